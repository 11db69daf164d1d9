"""The old finalizers off a Node deleted before the hand-over, once the answer lets it go.

Metacontroller adds no finalizer to an object already being deleted, so such
a Node never gets the new controller's: the old finalizer holds the deletion
in its place (``claim``), and comes off here when the call's answer
finalizes the Node. Decided on the Node as the API server has it.
"""
from __future__ import annotations

from hooks import events
from hooks.contract import HookRequest
from hooks.handover.names import OLD_FINALIZERS, REMOVE_FINALIZERS
from hooks.plan import Action, Change, Plan


def decide(request: HookRequest) -> Plan:
    """Nothing until the Node is verified; then one JSON patch taking every old finalizer off, if any is on."""
    if not request.verified:
        return Plan({}, verify=True)
    finalizers = request.meta.get("finalizers") or []
    return Plan({}, [remove(request.name, finalizers)] if removed(finalizers) else [])


def removed(finalizers: list) -> list[int]:
    """The indexes of the old finalizers in ``finalizers``, last first (each removal leaves the earlier ones)."""
    return sorted((i for i, f in enumerate(finalizers) if f in OLD_FINALIZERS), reverse=True)


def remove(node: str, finalizers: list) -> Action:
    """One JSON patch removing every old finalizer entry, each tested first: the list may have moved since it
    was read, and then the patch fails whole (the next call reads it again)."""
    ops = []
    for index in removed(finalizers):
        ops += [{"op": "test", "path": f"/metadata/finalizers/{index}", "value": finalizers[index]},
                {"op": "remove", "path": f"/metadata/finalizers/{index}"}]
    kept = [f for f in finalizers if f not in OLD_FINALIZERS]
    gone = [f for f in finalizers if f in OLD_FINALIZERS]
    return Action(REMOVE_FINALIZERS, node, {"patch": ops}, record=(Change(("finalizers",), value=kept),),
                  reports=events.normal(events.DECORATOR_FINALIZERS_REMOVED,
                                        f"Finalizers of the replaced DecoratorControllers removed: {', '.join(gone)}"))
