"""A node's health judged from its NodeConditions only (the KEP's rule).

Time is read from the conditions' lastTransitionTime, so the judgement is
stateless: the same node at the same moment always gets the same answer.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from hooks import conditions, timefmt
from hooks.fencing import names
from hooks.fencing.policy import Rule


@dataclass(frozen=True)
class Health:
    unhealthy: bool
    rule: Rule | None = None  # the matching rule that falls due first
    since: dt.datetime | None = None  # when the node became unhealthy
    due_at: dt.datetime | None = None  # when fencing may start
    ready: bool = False

    def due(self, now: dt.datetime) -> bool:
        return self.unhealthy and self.due_at is not None and now >= self.due_at

    def seconds_until_due(self, now: dt.datetime) -> float:
        if self.due_at is None:
            return 0.0
        return max(0.0, (self.due_at - now).total_seconds())

    def describe(self) -> str:
        if not self.unhealthy:
            return "healthy"
        since = timefmt.fmt(self.since) if self.since else "an unknown time"
        return f"{self.rule.describe()} since {since}"


def is_control_plane(labels: dict) -> bool:
    return any(key in (labels or {}) for key in names.CONTROL_PLANE_LABELS)


def is_ready(status: dict) -> bool:
    ready = conditions.find(status, "Ready")
    return bool(ready) and ready.get("status") == "True"


def assess(status: dict, rules: tuple[Rule, ...], now: dt.datetime) -> Health:
    """Which rule the node's conditions match, since when, and when fencing falls due.

    The start is the earlier of the matching condition's lastTransitionTime and
    our own FencingTriaged=True transition, so Ready flapping between Unknown
    and False does not restart the clock.
    """
    triaged = conditions.find(status, names.TRIAGED)
    triaged_since = timefmt.parse(triaged.get("lastTransitionTime")) if triaged and triaged.get("status") == "True" else None
    best: tuple[dt.datetime, dt.datetime, Rule] | None = None
    for rule in rules:
        cond = conditions.find(status, rule.type)
        if not cond or cond.get("status") != rule.status:
            continue
        starts = [t for t in (timefmt.parse(cond.get("lastTransitionTime")), triaged_since) if t is not None]
        since = min(starts) if starts else now
        due_at = since + dt.timedelta(seconds=rule.seconds)
        if best is None or due_at < best[1]:
            best = (since, due_at, rule)
    if best is None:
        return Health(unhealthy=False, ready=is_ready(status))
    since, due_at, rule = best
    return Health(unhealthy=True, rule=rule, since=since, due_at=due_at, ready=is_ready(status))
