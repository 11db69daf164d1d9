"""Conditions on an object's status: the one way every controller reads and writes them.

``set`` follows Kubernetes' own rule (meta.SetStatusCondition): the
lastTransitionTime moves only when the status changes; a new reason or
message is written without moving it; the same status, reason and message
change nothing, so a controller that sees ``changed is False`` need not write
at all. A decorator that returns a status replaces the whole status, so
these always start from the complete observed status and copy only the
conditions list (the big rest, such as a Node's images, is shared).
"""
from __future__ import annotations

from typing import Mapping


def _listed(status) -> list:
    """The conditions list; anything that is not a list (a mistyped status) reads as none."""
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    return conditions if isinstance(conditions, list) else []


def find(status: Mapping | None, ctype: str) -> dict | None:
    for cond in _listed(status):
        if isinstance(cond, Mapping) and cond.get("type") == ctype:
            return dict(cond)
    return None


def is_true(status: Mapping | None, ctype: str) -> bool:
    return (find(status, ctype) or {}).get("status") == "True"


def set(status: Mapping | None, ctype: str, value: str, reason: str, message: str, now: str, *,
        heartbeat: bool = False) -> tuple[dict, bool]:
    """(a copy of ``status`` with the condition set, whether anything changed).

    ``heartbeat`` also stamps lastHeartbeatTime, as Node conditions carry one;
    it moves only with a change, so an unchanged node is never written.
    """
    new_status = dict(status) if isinstance(status, Mapping) else {}
    previous = find(new_status, ctype)
    if previous and (previous.get("status"), previous.get("reason"), previous.get("message")) == \
            (value, reason, message) and previous.get("lastTransitionTime"):
        return new_status, False
    cond = {"type": ctype, "status": value, "reason": reason, "message": message}
    same_status = bool(previous) and previous.get("status") == value and previous.get("lastTransitionTime")
    cond["lastTransitionTime"] = previous["lastTransitionTime"] if same_status else now
    if heartbeat:
        cond["lastHeartbeatTime"] = now
    conditions = [dict(c) for c in _listed(new_status) if isinstance(c, Mapping)]
    index = next((i for i, c in enumerate(conditions) if c.get("type") == ctype), None)
    if index is None:
        conditions.append(cond)
    else:
        conditions[index] = cond
    new_status["conditions"] = conditions
    return new_status, True


def remove(status: Mapping | None, ctype: str) -> tuple[dict, bool]:
    """(a copy of ``status`` without the condition, whether it was there)."""
    new_status = dict(status) if isinstance(status, Mapping) else {}
    kept = [c for c in _listed(new_status) if not (isinstance(c, Mapping) and c.get("type") == ctype)]
    changed = len(kept) != len(_listed(new_status))
    if changed or "conditions" in new_status:
        new_status["conditions"] = kept
    return new_status, changed
