"""A node's health judged from its NodeConditions only (the KEP's rule).

Time is read from the conditions' lastTransitionTime, so the judgement is
stateless: the same node at the same moment always gets the same answer.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from hooks import conditions, timefmt
from hooks.fencing.policy import Rule

MAX_RULE_SECONDS = 366 * 24 * 3600.0  # policy durations are bounded when parsed; this keeps datetimes safe


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


def is_ready(status: dict) -> bool:
    return conditions.is_true(status, "Ready")


def assess(status: dict, rules: tuple[Rule, ...], now: dt.datetime) -> Health:
    """Which rule the node's conditions match, since when, and when fencing falls due.

    Each rule runs on its own clock: the matching condition's own
    lastTransitionTime, never another rule's (a long DiskPressure must not
    make a two-second Ready blip due at once), and never our FencingTriaged
    time, which may have started for another rule. So a condition that
    changes status (Ready Unknown → False) starts its clock again: fencing
    may come later than it could, never earlier. A condition without a
    readable transition time starts its clock now.
    """
    best: tuple[dt.datetime, dt.datetime, Rule] | None = None
    for rule in rules:
        cond = conditions.find(status, rule.type)
        if not cond or cond.get("status") != rule.status:
            continue
        since = timefmt.parse(cond.get("lastTransitionTime")) or now
        since = min(since, now)  # a transition "in the future" (clock skew, forgery) counts from now
        due_at = since + dt.timedelta(seconds=min(rule.seconds, MAX_RULE_SECONDS))
        if best is None or due_at < best[1]:
            best = (since, due_at, rule)
    if best is None:
        return Health(unhealthy=False, ready=is_ready(status))
    since, due_at, rule = best
    return Health(unhealthy=True, rule=rule, since=since, due_at=due_at, ready=is_ready(status))
