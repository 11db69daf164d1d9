"""On a Node's sync: its attachments claimed for the new controller, then the old finalizers off.

Only on a Node that still carries an old finalizer (``pending``), once every
old DecoratorController is gone from the API server (while one still runs,
it would claim its objects back) and the Node as the API server has it
either carries the new controller's finalizer (it holds the deletion from
now on) or is being deleted (``ready``). Then each of the Node's attachments
that is owned by this Node's uid and claimed by an old controller is claimed
for the new one (a merge patch carrying the resourceVersion it was read at),
and, when the new finalizer is on, the old finalizers come off. The actions
run in order and stop at the first failure (``InOrder``): the finalizers come
off only once every claim is made.

On a Node being deleted without the new finalizer (``holds``), the old one
stays: it holds the deletion in its place, the call is decided as a
finalize, and ``release`` takes it off once the answer lets the Node go.
"""
from __future__ import annotations

from hooks import events
from hooks.contract import DECORATOR_CLAIM, HookRequest, RequestError, decorator_finalizer, parse_object
from hooks.detacher.names import ATTACHMENT_KIND
from hooks.fencing.names import REQUEST_KIND, request_name
from hooks.fencing import records
from hooks.handover.names import CLAIM_ATTACHMENT, OLD_CONTROLLERS, OLD_FINALIZERS
from hooks.handover.release import remove, removed
from hooks.plan import HELD, Action, Change, Gate, Outcome, Plan


def pending(request: HookRequest) -> bool:
    """The Node still carries a finalizer of an old DecoratorController."""
    finalizers = request.meta.get("finalizers")
    return isinstance(finalizers, list) and any(f in OLD_FINALIZERS for f in finalizers)


def holds(request: HookRequest, controller: str) -> bool:
    """An old finalizer holds the Node's deletion for ``controller``: its own finalizer is not on."""
    return decorator_finalizer(controller) not in (request.meta.get("finalizers") or [])


def ready(request: HookRequest, controller: str) -> bool:
    """The Node can be handed over now: ``controller``'s finalizer is on (Metacontroller adds it before it
    calls; until then the old one holds the Node), or the Node is being deleted and will never get it."""
    return not holds(request, controller) or request.deleting


def looked_up(node: str, namespace: str) -> list[tuple[str, str, str | None]]:
    """(kind, name, namespace) of every attachment the old controllers kept for ``node``."""
    return [(ATTACHMENT_KIND, node, namespace), (REQUEST_KIND, request_name(node), namespace),
            (records.KIND, node, None)]


def decide(request: HookRequest, observed: dict, controller: str) -> Plan:
    """What the hand-over does on this call, and its answer.

    ``observed``: ``oldGone`` (no old DecoratorController on the API server),
    ``attachments`` (each ``{kind, name, namespace, found}`` as the API server
    answered, once the Node is verified and ``ready``), or ``error``.

    The answer: empty while there is nothing to do yet; ``error`` when a
    look-up failed; else ``holds``, ``parent`` (the verified Node), and what
    the actions' records add: ``adopted`` (kind -> the claimed object, as the
    concerns see it) and ``finalizers`` (the Node's, the old ones off).
    """
    if not pending(request):
        return Plan({})
    if observed.get("error"):
        return Plan({"error": observed["error"]})
    if not observed.get("oldGone"):
        return Plan({})
    if not request.verified:
        return Plan({}, verify=True)  # what the Node carries now decides, not the body
    if not ready(request, controller):
        return Plan({})
    uid = request.meta.get("uid")
    actions = [_claim(one, controller) for one in observed.get("attachments") or [] if _handed_over(one, uid)]
    response = {"holds": holds(request, controller), "parent": request.parent, "adopted": {}}
    if not response["holds"]:
        finalizers = request.meta.get("finalizers") or []
        if removed(finalizers):
            actions.append(remove(request.name, finalizers))
        else:
            response["finalizers"] = finalizers
    return Plan(response, actions, gate=InOrder())


class InOrder(Gate):
    """Every action after one that did not succeed is held for the next call: one claim failing stops the rest,
    and the old finalizers come off only once every claim is made."""

    def hold(self, action: Action, outcomes: list[Outcome], started: float) -> Outcome | None:
        if all(o.ok for o in outcomes):
            return None
        return Outcome(action, False, "not done: an earlier step of the hand-over did not succeed", code=HELD)


def _handed_over(one: dict, uid) -> bool:
    """Owned by this Node's uid (its controller reference) and claimed by an old controller."""
    meta = (one.get("found") or {}).get("metadata") or {}
    owners = [o for o in meta.get("ownerReferences") or [] if isinstance(o, dict) and o.get("controller")]
    claimed_by = (meta.get("annotations") or {}).get(DECORATOR_CLAIM)
    return bool(owners) and owners[0].get("uid") == uid and claimed_by in OLD_CONTROLLERS


def _claim(one: dict, controller: str) -> Action:
    """The claim of one attachment for ``controller``; once made, the concerns see it as their attachment (one
    that is no well-formed object is claimed all the same, but not shown to them)."""
    kind, name, namespace, found = one["kind"], one["name"], one["namespace"], one["found"]
    meta = found.get("metadata") or {}
    claimed = dict(found, metadata=dict(meta, annotations={**(meta.get("annotations") or {}),
                                                           DECORATOR_CLAIM: controller}))
    try:
        record = (Change(("adopted", kind), value=parse_object(claimed, f"attachments.{kind}")),)
    except RequestError:
        record = ()
    where = f"{namespace}/{name}" if namespace else name
    was = (meta.get("annotations") or {}).get(DECORATOR_CLAIM)
    return Action(CLAIM_ATTACHMENT, where,
                  {"kind": kind, "name": name, "namespace": namespace,
                   "resourceVersion": meta.get("resourceVersion"), "controller": controller},
                  record=record,
                  reports=events.normal(events.ATTACHMENT_CLAIMED,
                                        f"{kind} {where} claimed for {controller} from {was}"))
