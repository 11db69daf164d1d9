"""Interruption: EC2's notices that leave time, a scheduled change, impaired status checks, a rebalance
recommendation, surge-first within the budgets (pure).

The interruption controller writes the notice on the Machine
(hooks.machines.signals). Forceful ones (a spot warning, the instance
stopping) are the Machine's own to act on: it deletes itself, and the pass
records it for the count (hooks.nodepools.state.open_pass).
"""
from __future__ import annotations

from hooks.machines import signals
from hooks.nodepools import records
from hooks.nodepools.methods import eligible
from hooks.nodepools.state import Candidate, Pass, PoolState

name = "interruption"


def run(state: PoolState, progress: Pass) -> None:
    found = []
    for machine in eligible.unclaimed(state, progress):
        notice = signals.of(machine, signals.INTERRUPTION_ANNOTATION)
        if notice is not None and not notice.forceful:
            found.append(Candidate(machine, notice.reason, notice.at))
    for cand in sorted(found, key=lambda c: (records.ORDER[c.reason], c.at, c.name)):
        progress.offer(state, cand)
