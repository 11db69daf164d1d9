"""Drift: a Machine made from a template other than its pool's now is replaced, surge-first within the
budgets (pure).

The template is the pool's as read fresh in this call (its hash,
hooks.machines.spec.template_hash, requirements included for a provisioning
pool). The Machine's own Drifted condition is judged on Metacontroller's
copy of the pool, which can be a step behind: it gives only the time.
"""
from __future__ import annotations

import datetime as dt

from hooks import conditions, machine_names, timefmt
from hooks.machines import signals
from hooks.nodepools.methods import eligible
from hooks.nodepools.state import Candidate, Pass, PoolState

name = "drift"


def drifted_at(machine: dict, template_hash: str, now: dt.datetime) -> dt.datetime | None:
    """When the Machine drifted from ``template_hash``, if it did."""
    made_from = machine["metadata"]["annotations"].get(machine_names.TEMPLATE_HASH)
    if not template_hash or not made_from or made_from == template_hash:
        return None
    cond = conditions.find(machine["status"], machine_names.DRIFTED) or {}
    return timefmt.parse(cond.get("lastTransitionTime")) if cond.get("status") == "True" else now


def run(state: PoolState, progress: Pass) -> None:
    found = []
    for machine in eligible.unclaimed(state, progress):
        drifted = drifted_at(machine, state.spec.template_hash, state.now)
        if drifted is not None:
            found.append(Candidate(machine, signals.DRIFTED, drifted))
    for cand in sorted(found, key=lambda c: (c.at, c.name)):
        progress.offer(state, cand)
