"""One decorator answer for a Node from the answers of its two concerns (node-detacher, node-fencing).

- labels, annotations and attachments: the union (the concerns own different keys and kinds);
- status: the observed status with each concern's own condition changes (a decorator's status replaces the
  whole status, so neither may write over the other's);
- ``resyncAfterSeconds``: the sooner, and never later than the look-again bound;
- ``finalized``: node-detacher's (node-fencing never holds a deletion).
"""
from __future__ import annotations

from hooks.contract import HookRequest, decorator_response


def merge(request: HookRequest, answers: list[dict], look_again: float) -> dict:
    """One decorator response from the concerns' answers, asking to see the Node again within
    ``look_again`` seconds at the latest."""
    labels: dict = {}
    annotations: dict = {}
    attachments: list = []
    resyncs = []
    for answer in answers:
        labels.update(answer.get("labels") or {})
        annotations.update(answer.get("annotations") or {})
        attachments.extend(answer.get("attachments") or [])
        resync = _resync(answer.get("resyncAfterSeconds"))
        if resync:
            resyncs.append(resync)
    response = decorator_response(labels=labels, annotations=annotations,
                                  status=merge_status(request.parent.get("status"),
                                                      [a.get("status") for a in answers]),
                                  attachments=attachments, resync_after=min([*resyncs, look_again]))
    finalized = answers[0].get("finalized")  # node-detacher's: the only concern that holds a deletion
    if finalized is not None:
        response["finalized"] = finalized
    return response


def _resync(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


def merge_status(observed, statuses: list) -> dict | None:
    """The observed status with every concern's condition changes; None when no concern changes it.

    Each concern answers the complete status (its own conditions upserted or
    removed) or None. What a concern changed is read against the observed
    conditions, by type, and applied in order.
    """
    changed = [s for s in statuses if isinstance(s, dict)]
    if not changed:
        return None
    observed = observed if isinstance(observed, dict) else {}
    before = _by_type(observed.get("conditions"))
    merged = dict(before)
    for status in changed:
        after = _by_type(status.get("conditions"))
        for ctype, cond in after.items():
            if before.get(ctype) != cond:
                merged[ctype] = cond
        for ctype in before:
            if ctype not in after:
                merged.pop(ctype, None)
    base = dict(changed[0]) if len(changed) == 1 else dict(observed)
    base["conditions"] = [merged[t] for t in _order(observed.get("conditions"), changed) if t in merged]
    return base


def _by_type(conditions) -> dict:
    if not isinstance(conditions, list):
        return {}
    return {c["type"]: c for c in conditions if isinstance(c, dict) and isinstance(c.get("type"), str)}


def _order(observed, statuses: list) -> list[str]:
    """Condition types in the order they first appear: the observed ones, then the new ones."""
    seen: list[str] = []
    for conditions in [observed, *(s.get("conditions") for s in statuses)]:
        for ctype in _by_type(conditions):
            if ctype not in seen:
                seen.append(ctype)
    return seen
