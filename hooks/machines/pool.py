"""A NodePool's decisions: which Machines it has, which go, which instances leaked (pure).

The pool returns its Machines as children, so a Machine is owned from the
moment it exists: no window in which an instance or Node has no owner.
Existing Machines are returned as they are (their spec is immutable, and the
controller never updates a child); new ones get a name derived from the
pool's uid and a free slot number, so a repeated call asks for the same one.

How many Machines the pool has, and which are already leaving, is what the
API server says (``fresh``), not Metacontroller's cache, which can be a step
behind its own last deletes: a scale-down removes exactly the difference
between the live Machines and ``replicas``, whatever the cache shows, and
never a replacement a disrupted Machine waits for (hooks.machines.disruption).
"""
from __future__ import annotations

import datetime as dt
import hashlib

from hooks import conditions, machine_names, timefmt
from hooks.machines.spec import PoolSpec


def _str(value) -> str:
    return value if isinstance(value, str) else ""


def machines_of(children: list[dict]) -> list[dict]:
    """The pool's Machines as the decisions read them: every field typed, nothing else kept.

    A child's metadata and status come from the API server through
    Metacontroller's cache, but are read through here all the same: a field of
    the wrong type reads as absent, never as an exception.
    """
    found = []
    for child in children:
        meta = child.get("metadata") if isinstance(child.get("metadata"), dict) else {}
        if not _str(meta.get("name")):
            continue
        labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
        annotations = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
        found.append({
            "apiVersion": _str(child.get("apiVersion")) or machine_names.API_VERSION,
            "kind": machine_names.MACHINE_KIND,
            "metadata": {"name": meta["name"], "uid": _str(meta.get("uid")),
                         "creationTimestamp": _str(meta.get("creationTimestamp")),
                         "deletionTimestamp": _str(meta.get("deletionTimestamp")),
                         "labels": {k: v for k, v in labels.items() if isinstance(v, str)},
                         "annotations": {k: v for k, v in annotations.items() if isinstance(v, str)}},
            "spec": child.get("spec") if isinstance(child.get("spec"), dict) else {},
            "status": child.get("status") if isinstance(child.get("status"), dict) else {},
        })
    return found


def phase(machine: dict) -> str:
    meta = machine["metadata"]
    status = machine["status"]
    if meta["deletionTimestamp"]:
        return "Terminating"
    if conditions.is_true(status, machine_names.INITIALIZED):
        return "Initialized"
    if conditions.is_true(status, machine_names.REGISTERED):
        return "Registered"
    return "Launching"


def has_node(machine: dict) -> bool:
    """Whether the Machine ever joined a Node (pods may run there): disrupting it counts against a budget."""
    return bool(machine["status"].get("nodeName")) or phase(machine) in ("Registered", "Initialized")


def by_phase(machines: list[dict]) -> dict[str, int]:
    counts = {p: 0 for p in machine_names.PHASES}
    for machine in machines:
        counts[phase(machine)] += 1
    return counts


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


# What a provisioning pool's replacement keeps of the Machine it replaces: the size and place it was made for.
_SIZED = ("instanceTypes", "capacityType", "subnets", "subnetSelector")


def like(machine: dict | None, spec: PoolSpec) -> dict | None:
    """A provisioning pool's replacement for ``machine``: the pool's template now, with the Machine's instance
    types, capacity type and subnets (a static pool's replacement is its template: None)."""
    if spec.replicas is not None or machine is None:
        return None
    made = {k: v for k, v in spec.machine_spec.items() if k not in _SIZED}
    made.update({k: machine["spec"][k] for k in _SIZED if machine["spec"].get(k) not in (None, [], {}, "")})
    return made if made.get("instanceTypes") else None


def removal_order(machines: list[dict]) -> list[dict]:
    """Scale-down order: Machines not yet Registered first (no pod runs there), then the oldest."""
    def key(m):
        registered = phase(m) in ("Registered", "Initialized")
        created = m["metadata"]["creationTimestamp"]
        return (registered, created, m["metadata"]["name"])
    return sorted(machines, key=key)


def desired(pool_name: str, pool_uid: str, spec: PoolSpec, machines: list[dict],
            fresh: list[dict] | None = None, held: frozenset[str] | set[str] = frozenset(),
            leaving: frozenset[str] | set[str] = frozenset(),
            scale_down_limit: int | None = None, kept: frozenset[str] | set[str] = frozenset(),
            replacing: list[dict[str, str]] | tuple = (), replacing_specs: list[dict | None] | tuple = (),
            provisioned: list[tuple[dict, dict]] | tuple = ()) -> tuple[list[dict], list[str], list[str]]:
    """(children, names created, names removed) for ``spec.replicas`` counted Machines (a provisioning
    pool, without replicas: the Machines it has, none created or taken as surplus).

    ``machines`` are the request's children (what Metacontroller can delete:
    only these are returned or left out); ``fresh`` the pool's Machines as the
    API server has them, which decide how many are live and which are already
    leaving. Without ``fresh`` the children stand for it. ``held`` are the
    Machines being disrupted (not counted: their replacements are made),
    ``leaving`` those the disruptions let go now, and ``scale_down_limit``
    how many Machines with a Node a scale-down may remove in this call
    (None: all the surplus); one that never had a Node is removed freely.
    ``kept`` are the replacements disrupted Machines wait for: a scale-down
    takes the surplus from the others, since taking one would leave its
    Machine nothing to wait for, and the Machine leaves once it is
    Initialized anyway. The first new Machines get ``replacing``'s
    annotations, in order (hooks.machines.disruption: whom each replaces),
    and ``replacing_specs``' spec where one is given (``like``). A
    provisioning pool then creates one Machine per ``provisioned`` (spec,
    annotations), in order.
    """
    known = {m["metadata"]["name"] for m in machines}
    current = machines if fresh is None else fresh
    live = [m for m in current if not m["metadata"]["deletionTimestamp"]]
    going = [m for m in current if m["metadata"]["deletionTimestamp"]]
    counted = [m for m in live if m["metadata"]["name"] not in held]
    # A provisioning pool (no replicas) has no count to keep: its Machines stay, and only leave when let go;
    # it creates the replacements its disrupted Machines wait for, then a Machine per new claim.
    wanted = len(counted) + len(replacing) + len(provisioned) if spec.replicas is None else spec.replicas
    surplus: list[str] = []
    if len(counted) > wanted:
        # Only a Machine Metacontroller has seen can be left out; one it has not is counted, and removed later.
        many = len(counted) - wanted
        # A Machine without a Node disrupts nothing: only those with one count against the limit.
        limit = None if scale_down_limit is None else max(0, scale_down_limit)
        for m in removal_order(counted):
            if len(surplus) == many:
                break
            if m["metadata"]["name"] not in known or m["metadata"]["name"] in kept:
                continue
            if has_node(m):
                if limit == 0:
                    break
                limit = None if limit is None else limit - 1
            surplus.append(m["metadata"]["name"])
    removed = surplus + sorted(n for n in leaving if n in known and n not in surplus)
    children = [keep(m) for m in live + going if m["metadata"]["name"] in known and m["metadata"]["name"] not in removed]
    taken = {m["metadata"]["name"] for m in machines} | {m["metadata"]["name"] for m in current}
    created: list[str] = []
    slot = 0
    while len(counted) - len(surplus) + len(created) < wanted:
        name = machine_name(pool_name, pool_uid, slot)
        slot += 1
        if name in taken:
            continue
        taken.add(name)
        index = len(created)
        if index < len(replacing):
            made = new_machine(pool_name, name, spec, replacing[index],
                               replacing_specs[index] if index < len(replacing_specs) else None)
        elif index - len(replacing) < len(provisioned):
            machine_spec, annotations = provisioned[index - len(replacing)]
            made = new_machine(pool_name, name, spec, annotations, machine_spec)
        else:
            made = new_machine(pool_name, name, spec)
        children.append(made)
        created.append(name)
    return children, created, removed


def recorded_instances(machines: list[dict]) -> set[str]:
    """The instances the Machines record in status.instanceID."""
    return {m["status"]["instanceID"] for m in machines if isinstance(m["status"].get("instanceID"), str)}


def leaked(instances: list[dict], machine_uids: set[str], now: dt.datetime, grace_seconds: float,
           recorded: frozenset[str] | set[str] = frozenset()) -> list[dict]:
    """Instances of the pool whose Machine-UID tag names no Machine and that no Machine records,
    launched longer than the grace ago.

    Only instances carrying our Machine-UID tag are ever candidates: an
    instance without it was not launched by a Machine. A tag can be edited,
    a Machine's own record cannot: an instance a Machine records is its own.
    """
    found = []
    for instance in instances:
        uid = (instance.get("tags") or {}).get(machine_names.TAG_MACHINE_UID)  # EC2's answer, not a request's
        if not uid or uid in machine_uids or instance.get("instanceID") in recorded:
            continue
        launched = timefmt.parse(instance.get("launchTime"))
        if launched is None or (now - launched).total_seconds() < grace_seconds:
            continue
        found.append(instance)
    return sorted(found, key=lambda i: i["instanceID"])
