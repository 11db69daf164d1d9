"""Repair: a Machine whose Node our fencing powered off, confirmed, goes first (pure).

What proves it fenced is hooks.machines.repair's: our FencingRequest
powered off exactly the Machine's instance behind exactly its Node. A
replacement still waited for and not Initialized yet is repaired too, and
no budget holds that: the Machine waiting for it would wait for ever.
"""
from __future__ import annotations

from hooks.machines import signals
from hooks.nodepools.state import Candidate, Pass, PoolState

name = "repair"


def run(state: PoolState, progress: Pass) -> None:
    recorded = progress.recorded
    found = []
    for machine in state.live:
        fence = state.fenced.get(machine["metadata"]["uid"])
        if fence is not None and machine["metadata"]["uid"] not in recorded:
            found.append(Candidate(machine, signals.REPAIR, fence.at,
                                   exempt=machine["metadata"]["name"] in progress.awaited))
    for cand in sorted(found, key=lambda c: (c.at, c.name)):
        progress.offer(state, cand)
