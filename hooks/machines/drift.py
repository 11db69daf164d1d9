"""Drift: the Machine was made from a template its pool no longer has (pure).

Reported here; the pool replaces a drifted Machine, surge-first and within
its disruption budgets (hooks.nodepools.methods.drift).
"""
from __future__ import annotations

from hooks import machine_names
from hooks.contract import RequestError
from hooks.machines import spec
from hooks.machines.view import MachineView, Progress


def step(view: MachineView, progress: Progress, pool: dict | None) -> None:
    if pool is None:
        return  # not shown this pool: say nothing rather than guess
    made_from = (view.obj["metadata"].get("annotations") or {}).get(machine_names.TEMPLATE_HASH)
    try:
        current = spec.pool(pool).template_hash
    except RequestError:
        return
    if not made_from:
        return
    if made_from == current:
        progress.condition(machine_names.DRIFTED, "False", "UpToDate", "made from the pool's current template")
    else:
        progress.condition(machine_names.DRIFTED, "True", "TemplateChanged",
                           f"made from template {made_from}; the pool's is now {current}")
