"""The disruption methods of a NodePool, one file each, in the order a pass runs them (pure).

repair, interruption (EC2's notices), expiry, drift, empty, underutilized,
scale-down (hooks.nodepools.disruption.METHODS). Each is a ``Method``: it
reads the pool as this call found it (``PoolState``) and what the methods
before it decided (``Pass``), and offers its candidates, in its own order,
to ``Pass.offer``, which starts each the budgets let start. A Machine one
method offered is not offered again by a later one. Every method judges
on this call's fresh reads, so what it offers is valid now: a candidate
that no longer is one on a later call is simply not offered again, and a
consolidation candidate is offered only once it has stayed one for
``consolidateAfter`` (its clock is in the pool's status).
"""
from __future__ import annotations

from typing import Protocol

from hooks.nodepools.state import Pass, PoolState


class Method(Protocol):
    """One reason, or one family of reasons, a pool's Machines go for."""

    name: str

    def run(self, state: PoolState, progress: Pass) -> None:
        """Offer this method's candidates to ``progress``, in order."""
