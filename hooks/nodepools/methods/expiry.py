"""Expiry: a Machine older than its pool's ``expireAfter`` (from its creationTimestamp) is replaced,
surge-first within the budgets (pure)."""
from __future__ import annotations

import datetime as dt

from hooks import timefmt
from hooks.machines import signals
from hooks.nodepools.methods import eligible
from hooks.nodepools.state import Candidate, Pass, PoolState

name = "expiry"


def expires_at(machine: dict, expire_after: float | None) -> dt.datetime | None:
    created = timefmt.parse(machine["metadata"]["creationTimestamp"])
    if expire_after is None or created is None:
        return None
    return created + dt.timedelta(seconds=expire_after)


def run(state: PoolState, progress: Pass) -> None:
    found = []
    for machine in eligible.unclaimed(state, progress):
        expiry = expires_at(machine, state.spec.expire_after)
        if expiry is not None and expiry <= state.now:
            found.append(Candidate(machine, signals.EXPIRED, expiry))
    for cand in sorted(found, key=lambda c: (c.at, c.name)):
        progress.offer(state, cand)
