"""What a provisioning round reads, as the scheduler sees it: pools, Slots and pods (pure).

Every input is the API server's or EC2's answer of this round, never a
request body. A Machine counts as in-flight capacity until it is
Initialized: with the allocatable it recorded from its instance type once
launched, before that with the least any of its instance types offers (the
launch may fall back to any of them); its Node's own allocatable once the
Node exists, where an extended resource the Node does not report yet (a
device plugin not started) stands at the Machine's figure. Before its
launch, its labels are those every (instance type, zone) it may launch with
gives, and the others vary (Slot.varying). A Machine being deleted or chosen
to go is no capacity, nor is one EC2 refused every candidate of for capacity
(on its record: a launch that is only slow is still capacity).
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
from typing import Iterable, Mapping

from hooks import conditions, machine_names, provisioning_names, timefmt
from hooks.contract import RequestError
from hooks.machines import launch, pool, signals, spec
from hooks.provisioning import pods, requirements, resources, slots, volumes
from hooks.provisioning.catalog import InstanceOption
from hooks.provisioning.pods import PodView
from hooks.provisioning.resources import Resources, ZERO
from hooks.provisioning.scheduling import Limits, PoolView, Slot, daemonset_overhead, daemonset_ports

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


def _sized(machine: dict, catalog: Mapping[str, InstanceOption], key: str, combine,
           types: Iterable[str] | None = None) -> Resources | None:
    """The Machine's recorded ``key`` (capacity or allocatable, from its launched type), else ``combine`` of
    its instance types' own (before the launch picks one of them), or of ``types`` when given."""
    recorded = machine["status"].get(key)
    if isinstance(recorded, dict) and recorded:
        try:
            return resources.parse(recorded, f"status.{key}")
        except RequestError:
            pass
    found = None
    for name in _instance_types(machine) if types is None else types:
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


def mixes_architectures(parsed: spec.PoolSpec, type_facts: Mapping[str, dict]) -> bool:
    """Whether the pool's requirements allow instance types of more than one architecture: then its image's
    architecture decides which it launches (a type of another is refused by RunInstances)."""
    allowed = requirements.of(parsed.provisioning.requirements).only(provisioning_names.INSTANCE_TYPE_LABELS) \
        if parsed.provisioning else None
    if allowed is None:
        return False
    seen = set()
    for name, facts in type_facts.items():
        labels = provisioning_names.instance_labels(name, facts)
        if labels.get(provisioning_names.ARCH_LABEL) not in seen and allowed.allows(labels):
            seen.add(labels.get(provisioning_names.ARCH_LABEL))
            if len(seen) > 1:
                return True
    return False


def image_architecture(image: Mapping | None) -> tuple[str | None, str | None]:
    """The architecture (as ``kubernetes.io/arch`` names it) of a pool's image, as gather read it
    (hooks.aws.images.architecture_of), or why it is not known; (None, None) when it was not read."""
    if not image:
        return None, None
    named = f"image {image.get('id')}" if image.get("id") else "the image of its launch template"
    if image.get("error"):
        return None, (f"the architecture of {named} is not known ({image['error']}): nothing is launched "
                      f"while its instance types may be of several; a {provisioning_names.ARCH_LABEL} "
                      "requirement needs no image read")
    found = provisioning_names.ARCHITECTURES.get(image.get("architecture"))
    if found is None:
        return None, f"{named} is {image.get('architecture')}: no instance type provisioning launches runs it"
    return found, None


def pool_view(name: str, parsed: spec.PoolSpec, machines: list[dict], catalog: Mapping[str, InstanceOption],
              zones: frozenset | None, image: Mapping | None = None) -> PoolView:
    """The pool as the scheduler weighs it; ``machines`` are its own, as the API server lists them. A Machine
    with no capacity holds nothing of the limits. ``image``: its image's architecture as gather read it
    (when its types mix architectures), to which its requirements are narrowed."""
    provisioning = parsed.provisioning
    live = [m for m in machines if not m["metadata"]["deletionTimestamp"] and not out_of_capacity(m)]
    used = ZERO
    for machine in live:
        used += machine_capacity(machine, catalog)
    limits = provisioning.limits
    allowed = requirements.of(provisioning.requirements)
    architecture, unknown = image_architecture(image)
    if architecture is not None:
        allowed = allowed.intersect(requirements.of([(provisioning_names.ARCH_LABEL, provisioning_names.IN,
                                                      (architecture,))]))
    return PoolView(
        name=name, weight=provisioning.weight,
        requirements=allowed,
        taints=parsed.template.taints,
        labels={**parsed.template.labels, machine_names.POOL_LABEL: name},
        limits=Limits(_limit(limits.cpu, milli=True), _limit(limits.memory, milli=False), limits.machines),
        used=Limits(used.cpu, used.memory, len(live)),
        capacity_type=parsed.template.capacity_type,
        zones=zones, cannot_launch=unknown)


def _recorded(machine: dict, key: str) -> str | None:
    value = machine["status"].get(key)
    return value if isinstance(value, str) and value else None


def machine_zones(machine: dict, subnet_zones: Mapping[str, str], pool_zones: frozenset | None) -> frozenset | None:
    """The zones a Machine's instance is or may be in: its recorded zone, else those of its subnets (a
    ``subnetSelector`` finds any of its pool's, ``pool_zones``); None when a subnet's zone is not known."""
    recorded = _recorded(machine, "zone")
    if recorded is not None:
        return frozenset((recorded,))
    found: set[str] = set()
    subnets = machine["spec"].get("subnets")
    for subnet in subnets if isinstance(subnets, list) else ():
        zone = subnet_zones.get(subnet) if isinstance(subnet, str) else None
        if zone is None:
            return None
        found.add(zone)
    if machine["spec"].get("subnetSelector"):
        if pool_zones is None:
            return None
        found |= pool_zones
    return frozenset(found) or None


def launch_choices(machine: dict, catalog: Mapping[str, InstanceOption], zones: frozenset
                   ) -> tuple[list[InstanceOption], frozenset]:
    """The instance types (known to the catalog) and zones a Machine's instance is or may be launched with:
    its recorded type, else its types offered in one of ``zones`` (``machine_zones``) at its capacity type;
    the zones of ``zones`` where one of them is offered."""
    launched = _recorded(machine, "instanceType")
    names = [launched] if launched is not None else _instance_types(machine)
    types = [catalog[t] for t in dict.fromkeys(names) if t in catalog]
    capacity_type = machine["spec"].get("capacityType") or spec.ON_DEMAND
    offered = [(option, frozenset(o.zone for o in option.offerings if o.capacity_type == capacity_type) & zones)
               for option in types]
    if any(where for _, where in offered):
        return [option for option, where in offered if where], frozenset().union(*(where for _, where in offered))
    return types, zones  # offered nowhere it may launch: judged by all it names


def machine_labels(machine: dict, types: list[InstanceOption], where: frozenset
                   ) -> tuple[dict[str, str], dict[str, frozenset]]:
    """The labels a Machine's Node will have, and those its launch still decides, when it launches with one
    of ``types`` in one of the zones ``where`` (``launch_choices``).

    The first: its own, its pool's, its capacity type's, and of its instance type's and zone's those every
    such launch gives. The second: each label key whose value differs between them, with every value it may
    take (None: missing).
    """
    labels = {k: v for k, v in (machine["spec"].get("labels") or {}).items() if isinstance(v, str)}
    pool_name = machine["metadata"]["labels"].get(machine_names.POOL_LABEL)
    if pool_name:
        labels[machine_names.POOL_LABEL] = pool_name
    varying: dict[str, frozenset] = {}
    keys = {key for option in types for key in option.labels}
    for key in keys:
        values = frozenset(option.labels.get(key) for option in types)
        if len(values) == 1:
            (labels[key],) = values  # every one of them has it, with this value
        else:
            varying[key] = values
    if len(where) == 1:
        (labels[provisioning_names.ZONE_LABEL],) = where
    elif where:
        varying[provisioning_names.ZONE_LABEL] = where
    for key in varying:
        labels.pop(key, None)  # the kubelet's value is the instance's
    labels[provisioning_names.CAPACITY_TYPE_LABEL] = machine["spec"].get("capacityType") or spec.ON_DEMAND
    return labels, varying


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


def ready_since(machines: Iterable[dict]) -> dict[str, dt.datetime]:
    """The pods each Initialized Machine was made for ("namespace/name") -> when it became Initialized (the
    latest, for a pod two name)."""
    found: dict[str, dt.datetime] = {}
    for machine in machines:
        if machine["metadata"]["deletionTimestamp"]:
            continue
        ready = conditions.find(machine["status"], machine_names.INITIALIZED) or {}
        at = timefmt.parse(ready.get("lastTransitionTime")) if ready.get("status") == "True" else None
        if at is None:
            continue
        for key in provisioned_for(machine):
            if key not in found or found[key] < at:
                found[key] = at
    return found


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


def _type_volume_limits(names: Iterable[str], catalog: Mapping[str, InstanceOption]) -> dict[str, int]:
    """Per CSI driver, the fewest volumes any of these instance types attaches (the launch may pick any)."""
    found: dict[str, int] = {}
    for name in names:
        option = catalog.get(name)
        for driver, count in option.volume_limits if option is not None else ():
            found[driver] = min(found.get(driver, count), count)
    return found


def _machine_volume_limits(machine: dict, node: dict | None, catalog: Mapping[str, InstanceOption]) -> dict:
    """The attach limits of a Machine's instance type: its Node's, else the one it launched, else the fewest
    of its types."""
    labels = ((node or {}).get("metadata") or {}).get("labels") or {}
    for name in (labels.get(provisioning_names.INSTANCE_TYPE_LABEL), machine["status"].get("instanceType")):
        if isinstance(name, str) and name in catalog:
            return dict(catalog[name].volume_limits)
    return _type_volume_limits(_instance_types(machine), catalog)


def _with_volumes(slot: Slot, machine: dict, node: dict | None, bound: list[dict],
                  catalog: Mapping[str, InstanceOption], storage: volumes.Storage) -> Slot:
    """The Slot with the CSI volumes its pods attach and how many it can: its CSINode's counts, else its
    instance type's."""
    attached = frozenset(a for pod in bound for a in storage.attached(pod))
    by_type = _machine_volume_limits(machine, node, catalog)
    limits = storage.limits(slots.name_of(node), by_type) if node is not None else by_type
    return dataclasses.replace(slot, attached=attached, attach_limits=limits)


def room(pool_names: Iterable[str], machines: list[dict], nodes: list[dict], bound: Mapping[str, list[dict]],
         catalog: Mapping[str, InstanceOption], daemonsets: list[PodView],
         subnet_zones: Mapping[str, str] | None = None,
         pool_zones: Mapping[str, frozenset | None] | None = None,
         storage: volumes.Storage | None = None) -> list[Slot]:
    """The room the provisioning pools have or will have: Nodes of their Machines, then in-flight Machines.

    ``machines`` are every pool's (hooks.machines.pool.machines_of), ``nodes`` the Nodes labelled with a
    pool, ``bound`` the pods on each Node; ``subnet_zones`` the zone of each subnet the pools' Machines may
    use, ``pool_zones`` the zones of each pool's subnets (Readings.zones); ``storage``, read when a pending
    pod has volumes, gives each Slot its attached volumes and attach limits.
    """
    names = set(pool_names)
    subnet_zones, pool_zones = subnet_zones or {}, pool_zones or {}
    everywhere: frozenset | None = None  # every zone the catalog knows: where a subnet of unknown zone may be
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
            on_node = bound.get(slots.name_of(node), [])
            slot = slots.of_node(node, on_node, pool_name, machine["metadata"]["name"])
            if slot is None:
                continue
            if storage is not None:
                slot = _with_volumes(slot, machine, node, on_node, catalog, storage)
            if in_flight:
                # Still starting: the taints it starts with go once it is ready, so no pod needs to tolerate them;
                # a device plugin may not have reported its devices yet: the Machine's own figure stands.
                passing = _startup_keys(machine) | _PASSING_TAINTS
                own = _machine_allocatable(machine, catalog)
                slot = dataclasses.replace(slot, taints=tuple(t for t in slot.taints if t.key not in passing),
                                           allocatable=slot.allocatable if own is None
                                           else slot.allocatable.with_extended_of(own),
                                           in_flight=True, provisioned_for=provisioned_for(machine))
                coming.append(slot)
            else:
                existing.append(slot)
            continue
        if not in_flight:
            continue  # Initialized, its Node gone: nothing to place on
        zones = machine_zones(machine, subnet_zones, pool_zones.get(pool_name))
        if zones is None:
            if everywhere is None:
                everywhere = frozenset(o.zone for option in catalog.values() for o in option.offerings)
            zones = everywhere
        types, where = launch_choices(machine, catalog, zones)
        labels, varying = machine_labels(machine, types, where)
        startup = _startup_keys(machine)
        taints = tuple(t for t in slots.taints_of({"spec": {"taints": machine["spec"].get("taints")}})
                       if t.key not in startup)
        allocatable = _machine_allocatable(machine, catalog, [t.name for t in types])
        if allocatable is None:
            continue
        slot = Slot(
            name=machine["metadata"]["name"], pool=pool_name, labels=labels, taints=taints,
            allocatable=allocatable, requested=daemonset_overhead(labels, taints, daemonsets, varying),
            machine=machine["metadata"]["name"], in_flight=True, provisioned_for=provisioned_for(machine),
            varying=varying, host_ports=daemonset_ports(labels, taints, daemonsets, varying))
        coming.append(slot if storage is None else _with_volumes(slot, machine, None, [], catalog, storage))
    return existing + coming


def _machine_allocatable(machine: dict, catalog: Mapping[str, InstanceOption],
                         types: Iterable[str] | None = None) -> Resources | None:
    """What an in-flight Machine offers: its allocatable, else its launched type's, before its launch the
    least any of its types (or ``types``) has."""
    launched = _recorded(machine, "instanceType")
    if types is None and launched is not None:
        types = [launched]
    return _sized(machine, catalog, "allocatable", Resources.minimum, types)


def pending(raw_pods: Iterable[dict], storage: volumes.Storage | None = None) -> list[PodView]:
    """The pods kube-scheduler found no room for, that provisioning may place; with ``storage`` (read when
    one of them has volumes), what their volumes ask."""
    found = []
    for raw in raw_pods:
        if pods.is_provisionable(raw):
            view = pods.view(raw)
            if storage is not None and volumes.claims_of(raw):
                asked = storage.of_pod(raw)
                view = pods.with_volumes(view, asked.terms, asked.attachments, asked.problem)
            found.append(view)
    return found


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
