"""Empty: a provisioning pool's Machine whose Node runs no pod but DaemonSet and static pods goes, once it
has been so for ``consolidateAfter``; every due one in the same pass, within the budgets (pure).

What makes a candidate, its clock and the holds are in hooks.nodepools.consolidation.
"""
from __future__ import annotations

from hooks import timefmt
from hooks.machines import signals
from hooks.nodepools import consolidation
from hooks.nodepools.state import Pass, PoolState

name = "empty"


def run(state: PoolState, progress: Pass) -> None:
    view = consolidation.family(state, progress)
    if view is None:
        return
    found = [consolidation.Found(member, signals.EMPTY, consolidation.since(view, member, signals.EMPTY, state.now))
             for member in view.eligible if not consolidation.moving(member)]
    view.found.extend(found)
    for cand in sorted((f for f in found if consolidation.due(f, view.after, state.now)),
                       key=lambda f: (f.since, f.member.name)):
        member = cand.member
        consolidation.take(state, progress, view, cand,
                           f"Machine {member.name} (Node {member.node_name}) has run no pod but DaemonSet pods "
                           f"since {timefmt.fmt(cand.since)}: removing it (Empty)")
    consolidation.settle(progress, view)
