"""One provisioning round of one NodePool: from this round's readings to the Machines to create (pure).

Every provisioning pool runs the same computation over the same readings
(all provisioning pools, all their Machines and Nodes, every pending pod),
and creates only the claims that fall to it: pools never plan against each
other, and weight decides which one a pod goes to. A process computes that
placement once for the pools that ask for it over equal inputs
(hooks/provisioning/placements.py). Nothing is remembered
between rounds but what the API server holds: a Machine created for pods is
in-flight capacity the next round counts (inputs.slots), and names the pods
it was made for, so a round repeated while it boots creates nothing for
them, and a crash or a second hook replica changes nothing.
"""
from __future__ import annotations

import datetime as dt
import math
import time
from dataclasses import dataclass, field, replace
from typing import Mapping

from hooks import events, machine_names, provisioning_names, timefmt
from hooks.events import Event
from hooks.machines import pool, spec
from hooks.provisioning import batching, catalog, inputs, placements, pods, volumes
from hooks.provisioning.catalog import InstanceOption
from hooks.provisioning.resources import Resources, ZERO
from hooks.provisioning.scheduling import Limits, NewClaim, PoolView, Result, schedule

# Events per round, so a thousand pending pods cost a bounded number of writes (the recorder aggregates).
MAX_POD_EVENTS = 100


@dataclass(frozen=True)
class Readings:
    """What gather read for the round, from the API server and EC2."""

    pending: list[dict]  # raw pods, Pending and unbound
    bound: list[dict]  # raw pods bound to a Node, not finished
    nodes: list[dict]  # raw Nodes labelled with a pool
    machines: list[dict]  # every pool's Machines (hooks.machines.pool.machines_of)
    pools: list[dict]  # raw provisioning NodePools
    daemonsets: list[dict]  # raw DaemonSets
    catalog: list[InstanceOption]
    zones: Mapping[str, frozenset | None] = field(default_factory=dict)  # pool -> zones of its subnets
    subnets: list[dict] = field(default_factory=list)  # this pool's subnets: {"id", "zone"}
    disruption_budgets: list[dict] = field(default_factory=list)  # raw PodDisruptionBudgets
    subnet_zones: Mapping[str, str] = field(default_factory=dict)  # every pool's subnets: id -> zone
    # pool -> its image's architecture ({"id", "architecture"} or {"id", "error"}), read for the pools whose
    # instance types mix architectures (inputs.mixes_architectures)
    images: Mapping[str, dict] = field(default_factory=dict)
    # Claims, volumes, StorageClasses and CSINodes; None: not read (no pending pod has volumes).
    storage: volumes.Storage | None = None


def readings(raw: dict) -> Readings:
    """The round's Readings from what gather read (plain data, as a fixture holds it); the catalog is built
    here, from EC2's instance types, zone offerings and prices."""
    prices = raw.get("prices") or {}
    spot = {(t, z): p for t, z, p in prices.get(spec.SPOT) or []}
    built = catalog.MEMO.options(raw.get("typeFacts") or {}, raw.get("zoneOfferings") or {},
                                 {spec.ON_DEMAND: prices.get(spec.ON_DEMAND) or {}, spec.SPOT: spot})
    # A pool whose subnets EC2 does not know has no zone to launch in (an empty set), not every zone.
    zones = {name: frozenset(found) for name, found in (raw.get("zones") or {}).items() if isinstance(found, list)}
    storage = raw.get("storage")
    return Readings(pending=raw.get("pending") or [], bound=raw.get("bound") or [], nodes=raw.get("nodes") or [],
                    machines=pool.machines_of(raw.get("machines") or []), pools=raw.get("pools") or [],
                    daemonsets=raw.get("daemonsets") or [], catalog=built, zones=zones,
                    subnets=raw.get("subnets") or [], disruption_budgets=raw.get("podDisruptionBudgets") or [],
                    subnet_zones=_strings(raw.get("subnetZones")),
                    images={k: v for k, v in (raw.get("images") or {}).items() if isinstance(v, dict)},
                    storage=volumes.Storage.of(storage) if isinstance(storage, dict) and storage else None)


def _strings(raw) -> dict[str, str]:
    return {k: v for k, v in raw.items() if isinstance(k, str) and isinstance(v, str)} if isinstance(raw, dict) else {}


@dataclass
class Round:
    ready: bool  # the batch window has closed
    wait: float  # seconds until it closes, when not ready
    result: Result | None = None
    claims: list[NewClaim] = field(default_factory=list)  # this pool's new claims
    machines: list[tuple[dict, dict]] = field(default_factory=list)  # (spec, annotations) per claim
    events: list[Event] = field(default_factory=list)
    status: dict = field(default_factory=dict)
    placed_slots: set[str] = field(default_factory=set)  # Slots this round put pending pods on
    pending_pods: int = 0  # provisionable pods found
    pod_uids: dict[str, str] = field(default_factory=dict)  # pod key -> uid, for the Events
    ratios: list[dict[str, float]] = field(default_factory=list)  # per claim: requested / allocatable
    readings: Readings | None = None  # what the round ran on, for the consolidation that follows it
    view: PoolView | None = None  # this pool as the round weighed it: its limits, and what its Machines use
    decision_seconds: float = 0.0


def _own_subnets(subnets: list[dict], zone: str | None) -> list[str]:
    return [s["id"] for s in subnets if zone is None or s.get("zone") == zone]


def machine_spec(parsed: spec.PoolSpec, claim: NewClaim, subnets: list[dict]) -> dict:
    """The spec of a Machine for ``claim``: the pool's template, its ranked types, its zone's subnets."""
    made = dict(parsed.machine_spec)
    made["instanceTypes"] = list(claim.instance_types)
    made["capacityType"] = claim.capacity_type
    if claim.zone is not None:
        made["subnets"] = _own_subnets(subnets, claim.zone)
        made.pop("subnetSelector", None)
    return made


def _quantities(amount: Resources) -> dict:
    shown = amount.to_quantities()
    return {k: shown[k] for k in ("cpu", "memory") if k in shown}


def _last_round(pools: list[dict], name: str) -> str | None:
    """When the pool's last round decided, as the API server holds the pool's status (``pools``: the
    provisioning NodePools gather listed); None when it holds none."""
    for obj in pools:
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        if meta.get("name") == name:
            status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
            shown = status.get("provisioning") if isinstance(status.get("provisioning"), dict) else {}
            found = shown.get("lastRound")
            return found if isinstance(found, str) and timefmt.parse(found) is not None else None
    return None


def _status(name: str, parsed: spec.PoolSpec, pool_machines: list[dict], types: Mapping[str, InstanceOption],
            result: Result | None, claims: list[NewClaim], last: str | None, image: Mapping | None) -> dict:
    live = [m for m in pool_machines if not m["metadata"]["deletionTimestamp"] and not inputs.out_of_capacity(m)]
    flying = [m for m in live if pool.phase(m) != "Initialized"]
    total, coming = ZERO, ZERO
    for machine in live:
        total += inputs.machine_capacity(machine, types)
    for machine in flying:
        coming += inputs.machine_capacity(machine, types)
    limits = parsed.provisioning.limits
    shown_limits = {k: v for k, v in (("cpu", limits.cpu), ("memory", limits.memory),
                                      ("machines", limits.machines)) if v is not None}
    mine = 0
    if result is not None:
        own = {m["metadata"]["name"] for m in live}
        mine = sum(1 for slot in result.placed.values() if slot in own) + sum(len(c.pods) for c in claims)
    shown = {
        "pendingPods": mine,
        "unschedulablePods": len(result.unschedulable) if result is not None else 0,
        "inFlight": {"machines": len(flying), **_quantities(coming)},
        "resources": {"machines": len(live), **_quantities(total)},
        "limits": shown_limits,
    }
    if last is not None:
        shown["lastRound"] = last
    if image:
        shown["image"] = {k: str(image[k])[:256] for k in ("id", "architecture", "error") if image.get(k)}
    return shown


def provision(name: str, parsed: spec.PoolSpec, readings: Readings, now: dt.datetime, *,
              idle: float = batching.IDLE_SECONDS, maximum: float = batching.MAXIMUM_SECONDS) -> Round:
    """This pool's part of the round over ``readings``."""
    types = {o.name: o for o in readings.catalog}
    own_machines = [m for m in readings.machines if m["metadata"]["labels"].get(machine_names.POOL_LABEL) == name]
    previous = _last_round(readings.pools, name)
    displaced = inputs.ready_since(readings.machines)
    ready, wait = batching.window(readings.pending, now, idle, maximum, timefmt.parse(previous), displaced)
    if not ready:
        # No round yet: the last one stays the last, so the pods waiting for this one stay new.
        out = Round(False, wait)
        out.status = _status(name, parsed, own_machines, types, None, [], previous, readings.images.get(name))
        return out
    started = time.process_time()
    specs = inputs.pools_of(readings.pools)
    specs[name] = parsed  # this pool as its own request was verified, even if the list lags
    by_pool: dict[str, list[dict]] = {}
    for machine in readings.machines:
        by_pool.setdefault(machine["metadata"]["labels"].get(machine_names.POOL_LABEL) or "", []).append(machine)
    views = [inputs.pool_view(pool_name, specs[pool_name], by_pool.get(pool_name, []), types,
                              readings.zones.get(pool_name), readings.images.get(pool_name))
             for pool_name in sorted(specs)]
    daemonsets = [pods.from_daemonset(d) for d in readings.daemonsets]
    # The pending pods are read before the bound ones: a pod bound in between is in both lists, and holds
    # room only where it is bound (counted twice, it would launch a Machine for a pod already placed).
    bound_uids = {(p.get("metadata") or {}).get("uid") for p in readings.bound}
    pending = [p for p in inputs.pending(readings.pending, readings.storage) if p.uid not in bound_uids]
    slots = inputs.room(specs, readings.machines, readings.nodes, inputs.pods_by_node(readings.bound), types,
                        daemonsets, readings.subnet_zones, readings.zones, readings.storage)
    offered = inputs.unavailable(readings.catalog, readings.machines, now)
    result = placements.PLACEMENTS.schedule(pending, views, slots, offered, daemonsets)
    out = Round(True, 0.0, result=result, pending_pods=len(pending), pod_uids={p.key: p.uid for p in pending},
                readings=readings, view=next(v for v in views if v.name == name))
    out.claims = [c for c in result.claims if c.pool == name]
    out.decision_seconds = time.process_time() - started
    # A claim in a zone where the pool has no subnet could never launch (its zones are its subnets'): none.
    out.claims = [c for c in out.claims if c.zone is None or _own_subnets(readings.subnets, c.zone)]
    arriving = batching.still_arriving(readings.pending, now, idle, timefmt.parse(previous), displaced)
    held = set(batching.held_back(out.claims, {i: fill(c, types) for i, c in enumerate(out.claims)}, arriving))
    waiting = sum(len(c.pods) for i, c in enumerate(out.claims) if i in held)
    out.claims = [c for i, c in enumerate(out.claims) if i not in held]
    for claim in out.claims:
        out.ratios.append(request_ratios(claim, types))
        annotations = {provisioning_names.PROVISIONED_FOR: inputs.provisioned_for_annotation(claim.pods)}
        out.machines.append((machine_spec(parsed, claim, readings.subnets), annotations))
    out.placed_slots = set(result.placed.values())
    out.status = _status(name, parsed, own_machines, types, result, out.claims, timefmt.fmt(now),
                         readings.images.get(name))
    out.status["pendingPods"] += waiting
    out.events = _pod_events(name, specs, slots, result, {p.key: p for p in pending})
    _, unknown = inputs.image_architecture(readings.images.get(name))
    if unknown is not None:
        out.events.append(events.warning(events.FAILED_PROVISIONING, unknown))
    return out


def replacement(parsed: spec.PoolSpec, out: Round, moving: list[dict], now: dt.datetime) -> dict | None:
    """The spec of one new Machine of this pool, as its requirements, template and subnets are now, for the
    pods ``moving`` (raw, as they run): the claim the scheduler makes for them alone on the pool (its limits
    aside: a replacement takes the room of the Machine it replaces). None when they make no claim here (none
    can move, or the pool cannot run them now)."""
    readings, view = out.readings, out.view
    if readings is None or view is None:
        return None
    views = [p for p in (pods.view(raw) for raw in moving) if p.unsupported is None]
    if not views:
        return None
    daemonsets = [pods.from_daemonset(d) for d in readings.daemonsets]
    offered = inputs.unavailable(readings.catalog, readings.machines, now)
    result = schedule(views, [replace(view, limits=Limits())], [], offered, daemonsets)
    made = [c for c in result.claims if c.zone is None or _own_subnets(readings.subnets, c.zone)]
    return machine_spec(parsed, made[0], readings.subnets) if made else None


def within(out: Round, reserved: Resources, machines: int) -> Round:
    """The round with only those of its claims, in order, that the pool's limits leave room for once
    ``reserved`` and ``machines`` more Machines are counted too (what the same call creates besides): all a
    call creates counts once against the limits."""
    view = out.view
    if view is None or not out.claims or (reserved == ZERO and machines == 0):
        return out
    limits, used = view.limits, view.used
    cpu = math.inf if limits.cpu is None else limits.cpu - (used.cpu or 0) - reserved.cpu
    memory = math.inf if limits.memory is None else limits.memory - (used.memory or 0) - reserved.memory
    count = math.inf if limits.machines is None else limits.machines - (used.machines or 0) - machines
    kept = []
    for index, claim in enumerate(out.claims):
        if claim.capacity.cpu <= cpu and claim.capacity.memory <= memory and count >= 1:
            kept.append(index)
            cpu, memory, count = cpu - claim.capacity.cpu, memory - claim.capacity.memory, count - 1
    if len(kept) == len(out.claims):
        return out
    dropped = sum(len(c.pods) for i, c in enumerate(out.claims) if i not in kept)
    return replace(
        out, claims=[out.claims[i] for i in kept], machines=[out.machines[i] for i in kept],
        ratios=[out.ratios[i] for i in kept], status={**out.status, "pendingPods": out.status["pendingPods"] - dropped})


def fill(claim: NewClaim, types: Mapping[str, InstanceOption]) -> float:
    """How full the claim's pods make the largest Machine it may be (of cpu or memory, the fuller)."""
    largest = ZERO
    for name in claim.instance_types:
        if name in types:
            largest = largest.maximum(types[name].allocatable)
    shares = [asked / room for asked, room in ((claim.requests.cpu, largest.cpu),
                                               (claim.requests.memory, largest.memory)) if room > 0]
    return max(shares, default=1.0)


def request_ratios(claim: NewClaim, types: Mapping[str, InstanceOption]) -> dict[str, float]:
    """How full the claim's first choice is with the pods it was made for (cpu, memory)."""
    option = types.get(claim.instance_types[0]) if claim.instance_types else None
    if option is None:
        return {}
    found = {}
    for resource, asked, room in (("cpu", claim.requests.cpu, option.allocatable.cpu),
                                  ("memory", claim.requests.memory, option.allocatable.memory)):
        if room > 0:
            found[resource] = round(asked / room, 4)
    return found


def _pod_events(name: str, specs: Mapping[str, spec.PoolSpec], slots: list, result: Result,
                pending: Mapping) -> list[Event]:
    """Nominated, for pods this pool's in-flight Machines will take; FailedProvisioning, said by one pool
    (the first by name) for pods no pool can take. Pods put on a new Machine hear of it once it is named
    (nominated)."""
    said: list[Event] = []
    machine_of = {s.name: s.machine for s in slots if s.pool == name and s.in_flight}
    for pod_key, slot in sorted(result.placed.items()):
        machine = machine_of.get(slot)
        if machine is not None and len(said) < MAX_POD_EVENTS:
            said.append(events.normal(events.NOMINATED, f"waiting for Machine {machine} of NodePool {name}",
                                      about=_pod_ref(pending.get(pod_key), pod_key)))
    if specs and name == min(specs):
        for pod_key, why in sorted(result.unschedulable.items())[:MAX_POD_EVENTS]:
            said.append(events.warning(events.FAILED_PROVISIONING, f"no NodePool can run it: {why}",
                                       about=_pod_ref(pending.get(pod_key), pod_key)))
    return said


def nominated(name: str, machine: str, claim: NewClaim, pending_uids: Mapping[str, str]) -> list[Event]:
    """The Events telling each pod of a new Machine which Machine it waits for."""
    return [events.normal(events.NOMINATED, f"waiting for Machine {machine} of NodePool {name}, created for it",
                          about=_pod_ref(None, key, pending_uids.get(key)))
            for key in claim.pods[:MAX_POD_EVENTS]]


def _pod_ref(view, key: str, uid: str | None = None) -> dict:
    namespace, _, pod_name = key.partition("/")
    return events.pod_ref(namespace, pod_name, (view.uid if view is not None else uid) or None)

