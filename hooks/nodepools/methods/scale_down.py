"""Scale-down: a static pool with more Machines than ``replicas`` lets the surplus go, within the budgets
(pure).

The surplus is counted on the pool's Machines as the API server lists them
(Metacontroller's cache can be a step behind its own deletes), without the
Machines being disrupted (their replacements are made). It is taken not yet
Registered first (no pod can run there), then the oldest; never a Machine
Metacontroller has not shown (only a child it knows can be left out), and
never a replacement a disrupted Machine waits for: that Machine would wait
for ever, and it leaves once its replacement is Initialized anyway. A
Machine without a Node disrupts nothing and is not held by a budget.
"""
from __future__ import annotations

from hooks.machines import pool, signals
from hooks.nodepools.state import Pass, PoolState

name = "scale-down"


def removal_order(machines: list[dict]) -> list[dict]:
    """Scale-down order: Machines not yet Registered first (no pod runs there), then the oldest."""
    def key(m):
        registered = pool.phase(m) in ("Registered", "Initialized")
        return (registered, m["metadata"]["creationTimestamp"], m["metadata"]["name"])
    return sorted(machines, key=key)


def run(state: PoolState, progress: Pass) -> None:
    replicas = state.spec.replicas
    if replicas is None:
        return
    counted = [m for m in state.live if m["metadata"]["name"] not in progress.held]
    many = len(counted) - replicas
    if many <= 0:
        return
    left = progress.allowed(signals.SCALE_DOWN, state.spec.budgets, state.now)
    limit = None if left is None else max(0, left)
    for machine in removal_order(counted):
        chosen = machine["metadata"]["name"]
        if len(progress.surplus) == many:
            break
        if chosen not in state.known or chosen in progress.kept:
            continue
        if pool.has_node(machine):
            if limit == 0:
                break
            limit = None if limit is None else limit - 1
        progress.surplus.append(chosen)
