"""Conditions on object status: upsert and remove without losing the rest.

A decorator that returns a status replaces the whole status, so these always
start from the complete observed status.
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


def upsert(status: Mapping | None, condition: Mapping, now_str: str, *, heartbeat: bool = False) -> dict:
    """A copy of ``status`` with ``condition`` set; lastTransitionTime moves only on a status change."""
    # Shallow: only the conditions list changes, and the big rest (images) is shared, not copied.
    new_status = dict(status) if isinstance(status, Mapping) else {}
    conditions = [dict(c) for c in _listed(new_status) if isinstance(c, Mapping)]
    previous = find(new_status, condition["type"])
    cond = dict(condition)
    if previous and previous.get("status") == cond.get("status") and previous.get("lastTransitionTime"):
        cond["lastTransitionTime"] = previous["lastTransitionTime"]
    else:
        cond["lastTransitionTime"] = now_str
    if heartbeat:
        cond["lastHeartbeatTime"] = now_str
    replaced = False
    for i, existing in enumerate(conditions):
        if existing.get("type") == cond["type"]:
            conditions[i] = cond
            replaced = True
    if not replaced:
        conditions.append(cond)
    new_status["conditions"] = conditions
    return new_status


def remove(status: Mapping | None, ctype: str) -> dict:
    new_status = dict(status) if isinstance(status, Mapping) else {}
    new_status["conditions"] = [
        c for c in _listed(new_status) if not (isinstance(c, Mapping) and c.get("type") == ctype)
    ]
    return new_status


def differs(status: Mapping | None, ctype: str, want_status: str | None, reason: str | None = None) -> bool:
    """Whether writing this condition would change anything (avoid status churn)."""
    current = find(status, ctype)
    if want_status is None:
        return current is not None
    if current is None:
        return True
    return current.get("status") != want_status or (reason is not None and current.get("reason") != reason)
