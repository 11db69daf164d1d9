"""A NodePool's disruption budgets: how many of its Machines may be disrupting at once (pure).

    spec:
      disruption:
        budgets:
          - nodes: "10%"                 # or a count, "2"
            reasons: [Drifted, Expired]  # optional: the budget holds only these (default: every reason)
            schedule: "0 9 * * 1-5"      # optional, with duration: active for that long after each time (UTC)
            duration: 8h

A percentage is of the pool's Machines that have a Node and are not being
deleted (a replacement not yet Initialized is not counted: a surge does not
widen the budget it was made under), rounded up: 10 % of 3 Machines is 1, so a small pool is still disrupted one Machine
at a time; "0" or "0%" holds every disruption it applies to. Where several
budgets are active for a reason, the smallest wins; where none is, the reason
is not held. Without ``budgets`` the pool has one: ``nodes: "10%"``.
Forceful disruptions (the instance goes whatever we do) are never held, but
count as disrupting while they last.
"""
from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import dataclass

from croniter import croniter

from hooks import bounds, fields
from hooks.contract import RequestError
from hooks.machines import signals

MAX_BUDGETS = 50
_NODES = re.compile(r"(?:([0-9]{1,4})|([0-9]{1,3})%)")
DEFAULT_NODES = "10%"


@dataclass(frozen=True)
class Budget:
    nodes: str  # as written: "3" or "10%"
    reasons: tuple[str, ...] = ()  # empty: every budgeted reason
    schedule: str | None = None
    duration: float | None = None

    def limit(self, size: int) -> int:
        """How many Machines of ``size`` may be disrupting at once under this budget."""
        count, percent = _NODES.fullmatch(self.nodes).groups()
        if count is not None:
            return int(count)
        return math.ceil(int(percent) * size / 100)

    def applies(self, reason: str) -> bool:
        return not self.reasons or reason in self.reasons

    def active(self, now: dt.datetime) -> bool:
        if self.schedule is None:
            return True
        # The latest time the schedule fired at or before now (croniter counts back from just after now).
        started = croniter(self.schedule, now + dt.timedelta(seconds=1)).get_prev(dt.datetime)
        return (now - started).total_seconds() < (self.duration or 0.0)

    def to_dict(self) -> dict:
        out: dict = {"nodes": self.nodes}
        if self.reasons:
            out["reasons"] = list(self.reasons)
        if self.schedule is not None:
            out["schedule"] = self.schedule
        return out


DEFAULT = (Budget(DEFAULT_NODES),)


def parse(pool: dict) -> tuple[Budget, ...]:
    """The budgets of a NodePool's spec.disruption; RequestError names what is wrong."""
    where = "parent.spec.disruption"
    disruption = fields.mapping(pool, "spec", "disruption")
    items = fields.objects(disruption, "budgets", where=where)
    if not items:
        return DEFAULT
    if len(items) > MAX_BUDGETS:
        raise RequestError(f"{where}.budgets", f"has more than {MAX_BUDGETS} budgets")
    return tuple(_budget(item, f"{where}.budgets[{i}]") for i, item in enumerate(items))


def _budget(item: dict, where: str) -> Budget:
    nodes = item.get("nodes")
    if not isinstance(nodes, str) or not _NODES.fullmatch(nodes) or (nodes.endswith("%") and int(nodes[:-1]) > 100):
        raise RequestError(f"{where}.nodes", 'must be a count ("3") or a percentage from "0%" to "100%"')
    reasons = item.get("reasons") if item.get("reasons") is not None else []
    if not isinstance(reasons, list) or len(reasons) > len(signals.BUDGETED) or \
            any(r not in signals.BUDGETED for r in reasons):
        raise RequestError(f"{where}.reasons", f"must be a list of {', '.join(signals.BUDGETED)}")
    schedule = fields.item_string(item, "schedule", where)
    duration = None
    if schedule is not None:
        if len(schedule) > 100 or len(schedule.split()) != 5 or not croniter.is_valid(schedule):
            raise RequestError(f"{where}.schedule", "must be a cron expression of five fields")
        duration = bounds.duration(item.get("duration"), f"{where}.duration", positive=True, maximum=366 * 86400.0)
    elif item.get("duration") is not None:
        raise RequestError(f"{where}.duration", "is only meaningful with a schedule")
    return Budget(nodes, tuple(dict.fromkeys(reasons)), schedule, duration)


def allowed(budgets: tuple[Budget, ...], reason: str, size: int, now: dt.datetime) -> int | None:
    """The most Machines of a pool of ``size`` that may be disrupting for ``reason`` now; None: no limit."""
    limits = [b.limit(size) for b in budgets if b.applies(reason) and b.active(now)]
    return min(limits) if limits else None
