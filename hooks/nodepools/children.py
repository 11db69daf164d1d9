"""A NodePool's children after a pass: the Machines it keeps, those it lets go, those it makes (pure).

The pool returns its Machines as children, so a Machine is owned from the
moment it exists: no window in which an instance or Node has no owner.
Existing Machines are returned as they are (their spec is immutable, and the
controller never updates a child); new ones get a name derived from the
pool's uid and a free slot number, so a repeated call asks for the same one.

How many Machines the pool has, and which are already leaving, is what the
API server says (``PoolState.machines``), not Metacontroller's cache, which
can be a step behind its own last deletes; only a child Metacontroller
showed (``PoolState.known``) can be left out.
"""
from __future__ import annotations

import hashlib

from hooks import machine_names
from hooks.machines.spec import PoolSpec
from hooks.nodepools.state import Pass, PoolState


def machine_name(pool_name: str, pool_uid: str, slot: int) -> str:
    digest = hashlib.sha256(f"{pool_uid}/{slot}".encode()).hexdigest()[:5]
    return f"{pool_name[:machine_names.MAX_NAME - 6]}-{digest}"


def keep(machine: dict) -> dict:
    """An existing Machine as the pool asks for it again: unchanged."""
    meta = machine["metadata"]
    return {"apiVersion": machine["apiVersion"], "kind": machine_names.MACHINE_KIND,
            "metadata": {"name": meta["name"], "labels": dict(meta["labels"]),
                         "annotations": dict(meta["annotations"])},
            "spec": machine["spec"]}


def new_machine(pool_name: str, name: str, spec: PoolSpec, annotations: dict[str, str] | None = None,
                machine_spec: dict | None = None) -> dict:
    """A Machine of the pool: its template's spec, or ``machine_spec`` (a provisioning pool's, sized for its pods)."""
    return {"apiVersion": machine_names.API_VERSION, "kind": machine_names.MACHINE_KIND,
            "metadata": {"name": name, "labels": {machine_names.POOL_LABEL: pool_name},
                         "annotations": {**(annotations or {}), machine_names.TEMPLATE_HASH: spec.template_hash}},
            "spec": machine_spec if machine_spec is not None else spec.machine_spec}


def desired(state: PoolState, progress: Pass, made: list[tuple[dict | None, dict]]) -> tuple[
        list[dict], list[str], list[str]]:
    """(children, names created, names removed).

    A static pool keeps ``replicas`` Machines counted (those the pass holds
    are not: their replacements are made), less the pass's surplus; a
    provisioning pool has no count: it keeps what it has and makes one
    Machine per entry of ``made``. Both let go what the pass says leaves.
    ``made``: (spec, annotations) of each new Machine, in order, the
    replacements first; a spec of None is the pool's template.
    """
    known = state.known
    live = state.live
    going = [m for m in state.machines if m["metadata"]["deletionTimestamp"]]
    counted = [m for m in live if m["metadata"]["name"] not in progress.held]
    surplus = progress.surplus
    wanted = len(counted) + len(made) if state.spec.replicas is None else state.spec.replicas
    removed = surplus + sorted(n for n in progress.leaving if n in known and n not in surplus)
    children = [keep(m) for m in live + going
                if m["metadata"]["name"] in known and m["metadata"]["name"] not in removed]
    taken = set(known) | {m["metadata"]["name"] for m in state.machines}
    created: list[str] = []
    slot = 0
    while len(counted) - len(surplus) + len(created) < wanted:
        name = machine_name(state.name, state.uid, slot)
        slot += 1
        if name in taken:
            continue
        taken.add(name)
        index = len(created)
        machine_spec, annotations = made[index] if index < len(made) else (None, {})
        children.append(new_machine(state.name, name, state.spec, annotations, machine_spec))
        created.append(name)
    return children, created, removed
