"""The storm guard: when too many of a policy's nodes look dead at once, fence none.

A network partition or an API server outage makes healthy nodes look exactly
like dead ones, many at a time. Fencing them would turn a blip into an outage,
so no new fencing starts while more than ``maxUnhealthy`` of a policy's nodes
are unhealthy. The NodeFencingPolicy controller counts (it sees the policy's
nodes); the node-fencing hook reads the verdict from the policy's status, and
proceeds only when that status was computed for the current spec, already
counts this node, and was observed recently (``countedAt``, at most
NODEWARDEN_FENCING_COUNT_MAX_AGE_SECONDS old and not from the future), so a
stale, frozen or missing count never lets fencing through: a policy sync
that stopped (its request too large, its hook failing) holds fencing instead
of trusting its last answer.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from hooks import conditions, timefmt
from hooks.fencing import health, names
from hooks.fencing.policy import Policy

ALLOWED = "allowed"
HOLD = "hold"
PENDING = "pending"
# How far ahead of this clock a count's countedAt may be (clocks of two hook replicas).
MAX_SKEW_SECONDS = 10.0


@dataclass(frozen=True)
class Counts:
    observed: int
    unhealthy: int
    fencing: int
    fenced: int
    allowed: int
    unhealthy_names: tuple[str, ...]

    @property
    def holds(self) -> bool:
        return self.unhealthy > self.allowed


def count(policy: Policy, nodes: list[dict], now: dt.datetime) -> Counts:
    """Count the policy's nodes by health (nodes: the Node objects it selects)."""
    selected = [n for n in nodes if policy.selects(n["metadata"].get("labels") or {})]
    unhealthy, fencing, fenced = [], 0, 0
    for node in selected:
        status = node.get("status") or {}
        if health.assess(status, policy.rules, now).unhealthy:
            unhealthy.append(node["metadata"]["name"])
        for ctype, bucket in ((names.REQUIRED, "fencing"), (names.COMPLETE, "fenced")):
            cond = conditions.find(status, ctype)
            if cond and cond.get("status") == "True":
                if bucket == "fencing":
                    fencing += 1
                else:
                    fenced += 1
    return Counts(
        observed=len(selected),
        unhealthy=len(unhealthy),
        fencing=fencing,
        fenced=fenced,
        allowed=policy.allowed_unhealthy(len(selected)),
        unhealthy_names=tuple(sorted(unhealthy)),
    )


@dataclass(frozen=True)
class Verdict:
    outcome: str  # ALLOWED, HOLD or PENDING
    message: str


def verdict(policy: Policy, node_name: str, now: dt.datetime, max_age: float) -> Verdict:
    """May fencing of ``node_name`` start, by the policy's last count?"""
    status = policy.status or {}
    guard = conditions.find(status, names.STORM_GUARD)
    if guard is None or status.get("observedGeneration") != policy.generation:
        return Verdict(PENDING, f"NodeFencingPolicy {policy.name} has not counted its nodes for this spec yet")
    counted = timefmt.parse(status.get("countedAt"))
    age = (now - counted).total_seconds() if counted else None
    if age is None or age < -MAX_SKEW_SECONDS or age > max_age:
        # A stamp from the future would stay "fresh" long after its sync stopped: not trusted either.
        # A fixed message: the age changes every second and would rewrite the node each time.
        return Verdict(PENDING, f"the last count of NodeFencingPolicy {policy.name} is missing, from the future "
                                f"or older than {max_age:g}s: no fencing on a count that may be out of date")
    if guard.get("status") == "True":
        # A fixed message: counts change often in a storm, and every change would rewrite every held node.
        return Verdict(HOLD, f"the storm guard of NodeFencingPolicy {policy.name} holds new fencing: more than "
                             f"{policy.max_unhealthy} of its nodes are unhealthy (see its status)")
    names_counted = status.get("unhealthyNodeNames")
    if not isinstance(names_counted, list) or node_name not in names_counted:
        return Verdict(PENDING, f"NodeFencingPolicy {policy.name} has not counted this node as unhealthy yet")
    return Verdict(ALLOWED, "")
