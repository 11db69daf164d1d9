"""What the timeline leaves on the Node besides its conditions: our taints and the error annotation.

Conditions are written first and taints on a later call, so one call never
races Metacontroller's own status write on the same Node.
"""
from __future__ import annotations

from hooks import fields
from hooks.contract import HookRequest
from hooks.fencing import names
from hooks.plan import Action

# After writing conditions, look again soon to lay the matching taints.
TAINT_SETTLE_SECONDS = 1.0


def taint_actions(request: HookRequest, want: dict[str, str]) -> list[Action]:
    """The taint and untaint actions that leave exactly ``want`` (key: effect) of our taints on the node."""
    present = {t.get("key"): t.get("effect") for t in fields.objects(request.parent, "spec", "taints")
               if isinstance(t.get("key"), str)}
    actions = []
    for key, effect in names.OUR_TAINTS.items():
        if key in want and present.get(key) != effect:
            actions.append(Action("kube.taint", request.name, {"key": key, "effect": effect}))
        elif key not in want and key in present:
            actions.append(Action("kube.untaint", request.name, {"key": key}))
    return actions


def clear_error(request: HookRequest) -> dict:
    """The annotations that take a reported error off the node (none when it carries none)."""
    return {names.ERROR_ANNOTATION: None} if names.ERROR_ANNOTATION in request.annotations else {}
