"""Which live Machines a signal-driven method may still offer (pure)."""
from __future__ import annotations

from typing import Iterator

from hooks.nodepools.state import Pass, PoolState


def unclaimed(state: PoolState, progress: Pass) -> Iterator[dict]:
    """Live Machines no record holds and no earlier method offered; not a replacement still waited for,
    which goes for repair only (powered off, it would never initialize)."""
    recorded = progress.recorded
    for machine in state.live:
        meta = machine["metadata"]
        if meta["uid"] not in recorded and meta["uid"] not in progress.offered and meta["name"] not in progress.awaited:
            yield machine
