"""What a provisioning round reads, as the scheduler sees it: pools, Slots and pods (pure).

Every input is the API server's or EC2's answer of this round, never a
request body. A Machine counts as in-flight capacity until it is
Initialized: with the allocatable it recorded from its instance type once
launched, before that with the least any of its instance types offers (the
launch may fall back to any of them); its Node's own allocatable once the
Node exists. A Machine being deleted or chosen to go is no capacity, nor is
one EC2 refused every candidate of for capacity (on its record: a launch
that is only slow is still capacity).
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
from typing import Iterable, Mapping

from hooks import machine_names, provisioning_names
from hooks.contract import RequestError
from hooks.machines import launch, pool, signals, spec
from hooks.provisioning import pods, requirements, resources, slots
from hooks.provisioning.catalog import InstanceOption
from hooks.provisioning.pods import PodView
from hooks.provisioning.resources import Resources, ZERO
from hooks.provisioning.scheduling import Limits, PoolView, Slot, daemonset_overhead

# Taints a Node carries only while it starts: the pods the round places will not need to tolerate them.
_PASSING_TAINTS = frozenset({machine_names.UNREGISTERED_TAINT, *machine_names.EPHEMERAL_TAINTS})


def pools_of(objects: Iterable[dict]) -> dict[str, spec.PoolSpec]:
    """Every provisioning NodePool that parses, by name (one that does not says so in its own status); a pool
    being deleted provisions nothing."""
    found = {}
    for obj in objects:
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        name = meta.get("name")
        if not isinstance(name, str) or not name or meta.get("deletionTimestamp"):
            continue
        try:
            parsed = spec.pool(obj)
        except RequestError:
            continue
        if parsed.provisioning is not None:
            found[name] = parsed
    return found


def _limit(value: str | None, *, milli: bool) -> int | None:
    return None if value is None else resources.quantity(value, "limits", milli=milli)


def _sized(machine: dict, catalog: Mapping[str, InstanceOption], key: str, combine) -> Resources | None:
    """The Machine's recorded ``key`` (capacity or allocatable, from its launched type), else ``combine`` of
    its instance types' own (before the launch picks one of them)."""
    recorded = machine["status"].get(key)
    if isinstance(recorded, dict) and recorded:
        try:
            return resources.parse(recorded, f"status.{key}")
        except RequestError:
            pass
    found = None
    for name in _instance_types(machine):
        option = catalog.get(name)
        if option is not None:
            amount = getattr(option, key)
            found = amount if found is None else combine(found, amount)
    return found


def machine_capacity(machine: dict, catalog: Mapping[str, InstanceOption]) -> Resources:
    """What a Machine counts against its pool's limits: its capacity, before its launch the most any of its
    types has (whichever launches, the limit holds)."""
    return _sized(machine, catalog, "capacity", Resources.maximum) or ZERO


def _instance_types(machine: dict) -> list[str]:
    raw = machine["spec"].get("instanceTypes")
    return [t for t in raw if isinstance(t, str)] if isinstance(raw, list) else []


def pool_view(name: str, parsed: spec.PoolSpec, machines: list[dict], catalog: Mapping[str, InstanceOption],
              zones: frozenset | None) -> PoolView:
    """The pool as the scheduler weighs it; ``machines`` are its own, as the API server lists them. A Machine
    with no capacity holds nothing of the limits."""
    provisioning = parsed.provisioning
    live = [m for m in machines if not m["metadata"]["deletionTimestamp"] and not out_of_capacity(m)]
    used = ZERO
    for machine in live:
        used += machine_capacity(machine, catalog)
    limits = provisioning.limits
    return PoolView(
        name=name, weight=provisioning.weight,
        requirements=requirements.of(provisioning.requirements),
        taints=parsed.template.taints,
        labels={**parsed.template.labels, machine_names.POOL_LABEL: name},
        limits=Limits(_limit(limits.cpu, milli=True), _limit(limits.memory, milli=False), limits.machines),
        used=Limits(used.cpu, used.memory, len(live)),
        capacity_type=parsed.template.capacity_type,
        zones=zones)


def _common(labels: list[Mapping[str, str]]) -> dict[str, str]:
    """The labels every one of ``labels`` has, with the same value."""
    if not labels:
        return {}
    first = dict(labels[0])
    return {k: v for k, v in first.items() if all(other.get(k) == v for other in labels[1:])}


def machine_labels(machine: dict, catalog: Mapping[str, InstanceOption]) -> dict[str, str]:
    """The labels a Machine's Node will have: its own, its pool's, its instance type's (or those all its
    types share, before the launch picks one), its zone when known, its capacity type."""
    labels = {k: v for k, v in (machine["spec"].get("labels") or {}).items() if isinstance(v, str)}
    pool_name = machine["metadata"]["labels"].get(machine_names.POOL_LABEL)
    if pool_name:
        labels[machine_names.POOL_LABEL] = pool_name
    launched = machine["status"].get("instanceType")
    if isinstance(launched, str) and launched in catalog:
        labels.update(catalog[launched].labels)
    else:
        labels.update(_common([catalog[t].labels for t in _instance_types(machine) if t in catalog]))
    zone = machine["status"].get("zone")
    if isinstance(zone, str) and zone:
        labels[provisioning_names.ZONE_LABEL] = zone
    labels[provisioning_names.CAPACITY_TYPE_LABEL] = machine["spec"].get("capacityType") or spec.ON_DEMAND
    return labels


def _startup_keys(machine: dict) -> set[str]:
    raw = machine["spec"].get("startupTaints")
    return {t.get("key") for t in raw if isinstance(t, dict)} if isinstance(raw, list) else set()


def out_of_capacity(machine: dict) -> bool:
    """EC2 refused every instance type and subnet of the Machine for capacity, on its record: no capacity any
    pod can count on."""
    return not machine["metadata"]["deletionTimestamp"] and launch.no_capacity(machine["status"])


def _going(machine: dict) -> bool:
    """Being deleted, or chosen by its pool to go: no pod should be planned onto it."""
    return bool(machine["metadata"]["deletionTimestamp"]) or \
        signals.of(machine, signals.DISRUPTION_ANNOTATION) is not None


def provisioned_for(machine: dict) -> tuple[str, ...]:
    """The pods a Machine was created for, from its annotation; a malformed one names none."""
    raw = machine["metadata"]["annotations"].get(provisioning_names.PROVISIONED_FOR)
    try:
        names = json.loads(raw).get("pods") if isinstance(raw, str) and len(raw) <= 16384 else None
    except (ValueError, AttributeError):
        names = None
    return tuple(n for n in names if isinstance(n, str)) if isinstance(names, list) else ()


def provisioned_for_annotation(pod_keys: Iterable[str]) -> str:
    keys = list(pod_keys)
    kept = keys[:provisioning_names.PROVISIONED_FOR_MAX_PODS]
    return json.dumps({"pods": kept, "more": len(keys) - len(kept)}, separators=(",", ":"))


def pods_by_node(bound: Iterable[dict]) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for pod in bound:
        node = (pod.get("spec") or {}).get("nodeName") if isinstance(pod.get("spec"), dict) else None
        if isinstance(node, str) and node:
            found.setdefault(node, []).append(pod)
    return found


def room(pool_names: Iterable[str], machines: list[dict], nodes: list[dict], bound: Mapping[str, list[dict]],
          catalog: Mapping[str, InstanceOption], daemonsets: list[PodView]) -> list[Slot]:
    """The room the provisioning pools have or will have: Nodes of their Machines, then in-flight Machines.

    ``machines`` are every pool's (hooks.machines.pool.machines_of), ``nodes`` the Nodes labelled with a
    pool, ``bound`` the pods on each Node.
    """
    names = set(pool_names)
    nodes_by_name = {slots.name_of(n): n for n in nodes}
    existing, coming = [], []
    for machine in sorted(machines, key=lambda m: m["metadata"]["name"]):
        pool_name = machine["metadata"]["labels"].get(machine_names.POOL_LABEL)
        if pool_name not in names or _going(machine) or out_of_capacity(machine):
            continue
        node = nodes_by_name.get(machine["status"].get("nodeName") or "")
        in_flight = pool.phase(machine) != "Initialized"
        if node is not None:
            if (node.get("spec") or {}).get("unschedulable") is True:
                continue
            slot = slots.of_node(node, bound.get(slots.name_of(node), []), pool_name, machine["metadata"]["name"])
            if slot is None:
                continue
            if in_flight:
                # Still starting: the taints it starts with go once it is ready, so no pod needs to tolerate them.
                passing = _startup_keys(machine) | _PASSING_TAINTS
                slot = dataclasses.replace(slot, taints=tuple(t for t in slot.taints if t.key not in passing),
                                           in_flight=True, provisioned_for=provisioned_for(machine))
                coming.append(slot)
            else:
                existing.append(slot)
            continue
        if not in_flight:
            continue  # Initialized, its Node gone: nothing to place on
        labels = machine_labels(machine, catalog)
        startup = _startup_keys(machine)
        taints = tuple(t for t in slots.taints_of({"spec": {"taints": machine["spec"].get("taints")}})
                       if t.key not in startup)
        allocatable = _machine_allocatable(machine, catalog)
        if allocatable is None:
            continue
        coming.append(Slot(
            name=machine["metadata"]["name"], pool=pool_name, labels=labels, taints=taints,
            allocatable=allocatable, requested=daemonset_overhead(labels, taints, daemonsets),
            machine=machine["metadata"]["name"], in_flight=True, provisioned_for=provisioned_for(machine)))
    return existing + coming


def _machine_allocatable(machine: dict, catalog: Mapping[str, InstanceOption]) -> Resources | None:
    """What an in-flight Machine offers: its allocatable, before its launch the least any of its types has."""
    return _sized(machine, catalog, "allocatable", Resources.minimum)


def pending(raw_pods: Iterable[dict]) -> list[PodView]:
    """The pods kube-scheduler found no room for, that provisioning may place."""
    return [pods.view(p) for p in raw_pods if pods.is_provisionable(p)]


def spot_candidates(specs: Mapping[str, spec.PoolSpec], type_facts: Mapping[str, dict]) -> list[str]:
    """The instance types some pool may launch as spot: the ones whose spot prices the round needs."""
    wanted = set()
    for parsed in specs.values():
        allowed = requirements.of(parsed.provisioning.requirements) if parsed.provisioning else None
        if allowed is None:
            continue
        capacity = allowed.get(provisioning_names.CAPACITY_TYPE_LABEL)
        if capacity is None and parsed.template.capacity_type != spec.SPOT:
            continue
        if capacity is not None and not capacity.allows(spec.SPOT):
            continue
        by_type = allowed.only(provisioning_names.INSTANCE_TYPE_LABELS)
        for name, facts in type_facts.items():
            if name not in wanted and by_type.allows(provisioning_names.instance_labels(name, facts)):
                wanted.add(name)
    return sorted(wanted)


def unavailable(options: list[InstanceOption], machines: list[dict], now: dt.datetime) -> list[InstanceOption]:
    """The catalog with the offerings EC2 refused a Machine's launch for marked unavailable (the instance type
    in that zone at that capacity type, every zone when the zone is not known), for as long as the Machine
    remembers the refusal, so no new claim waits on the same empty capacity."""
    refused = {(r["instanceType"], r["zone"], r["capacityType"]) for m in machines
               for r in launch.remembered(m["status"], now)}
    if not refused:
        return options
    names = {name for name, _, _ in refused}

    def gone(name: str, offering) -> bool:
        return (name, offering.zone, offering.capacity_type) in refused or \
            (name, "", offering.capacity_type) in refused
    return [dataclasses.replace(o, offerings=tuple(
        dataclasses.replace(f, available=False) if gone(o.name, f) else f for f in o.offerings))
        if o.name in names else o for o in options]
