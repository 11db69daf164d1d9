"""Where pending pods go: existing capacity first, then new Machines of the pools that can take them (pure).

Pods are placed one at a time, largest first (cpu, then memory). Each goes
on the first Slot that takes it (existing Nodes, then in-flight Machines; a
Machine created for the pod is tried first, so a repeated round places the
same pods the same way, and holds the room of the pods it was made for
until they are placed), else on a claim planned earlier this round, else on
a new claim of the highest-weight pool that admits it within its limits.
A Machine not launched yet takes a pod only if the pod's constraints hold
whichever of its instance types and zones the launch picks (Slot.varying).

A claim keeps every instance type that could still run all its pods (and
the DaemonSets that would run beside them) while it is planned, and at the
end the cheapest 20 of the cheapest one's architecture. Limits: a claim
counts, per resource, the largest capacity among the cheapest 20 of its
types, at every step of the round (the count never shrinks), and keeps only
types whose capacity fits what the pool's limits leave; so whichever type
launches, the pool stays within its limits.

Preferences (the heaviest preferred node-affinity term, ScheduleAnyway
spread) are first held as if required; a pod they leave nowhere to go is
tried again without any.

Identical pods (same requests, labels and constraints, e.g. one
Deployment's) are placed together where that gives what placing them one
by one would: first fit is then a count per Slot or claim.

Host ports and CSI volumes are held per Slot or claim: a pod goes only where
its host ports are free (of the pods there and, on a claim, of the
DaemonSets of each of its types) and where its volumes stay within the
attach limit of each driver (a Slot's own, or per instance type on a claim,
whose types shrink to those that attach them all). A pod's volumes narrow
where it may go (``PodView.volume_terms``), not which zones its spread counts.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from hooks import machine_names, provisioning_names
from hooks.machines.spec import ON_DEMAND, SPOT
from hooks.provisioning import requirements, resources
from hooks.provisioning.catalog import InstanceOption
from hooks.provisioning.pods import PodSelector, PodView, Resident, Spread, describe_port, port_conflict, tolerates
from hooks.provisioning.requirements import Requirements, Rule
from hooks.provisioning.residents import Residents
from hooks.provisioning.volumes import over_limit
from hooks.provisioning_names import EXISTS, IN
from hooks.provisioning.resources import Resources, ZERO

MAX_INSTANCE_TYPES = 20
CAPACITY_TYPES = (ON_DEMAND, SPOT)
ZONE = provisioning_names.ZONE_LABEL
CAPACITY_TYPE = provisioning_names.CAPACITY_TYPE_LABEL
ARCH = provisioning_names.ARCH_LABEL
WELL_KNOWN = frozenset(provisioning_names.WELL_KNOWN)
TYPE_KEYS = provisioning_names.INSTANCE_TYPE_LABELS
# A new Node's hostname: it has one, which no pod can name yet.
_UNKNOWN_HOSTNAME = "<new node>"
_EXISTS = Rule.of(EXISTS)


@dataclass(frozen=True)
class Limits:
    """Amounts of a pool: cpu in millicores, memory in bytes, Machines; None: no limit."""

    cpu: int | None = None
    memory: int | None = None
    machines: int | None = None


@dataclass(frozen=True)
class PoolView:
    name: str
    weight: int = 0
    requirements: Requirements = requirements.EVERYTHING  # template.spec.instanceTypes folded in
    taints: tuple = ()  # hooks.machines.spec.Taint; startup taints are not here: pods need not tolerate them
    labels: Mapping[str, str] = field(default_factory=dict)  # template labels
    limits: Limits = Limits()
    used: Limits = Limits(0, 0, 0)  # every live Machine of the pool, in-flight ones included
    capacity_type: str = ON_DEMAND  # when the requirements do not name the capacity type
    zones: frozenset | None = None  # where its subnets are; None: wherever the catalog offers
    cannot_launch: str | None = None  # why it launches nothing (its image's architecture unknown); None: it can


@dataclass(frozen=True)
class Slot:
    """Room that exists or is coming: a Node of a provisioning pool, or an in-flight Machine."""

    name: str
    pool: str
    labels: Mapping[str, str]
    taints: tuple  # those a pod must tolerate (not startup taints)
    allocatable: Resources
    requested: Resources  # bound pods; for a Machine without a Node, its DaemonSets' pods (daemonset_overhead)
    pods: tuple[Resident, ...] = ()
    machine: str | None = None
    in_flight: bool = False
    provisioned_for: tuple[str, ...] = ()
    # A Machine not launched yet: the label keys whose value its launch decides (zone, instance type, ...), each
    # with the values it may take (None: missing). ``labels`` holds only what every launch gives.
    varying: Mapping[str, frozenset] = field(default_factory=dict)
    # The host ports its pods hold (hooks.provisioning.pods.HostPort); for a Machine without a Node, its
    # DaemonSets' pods'.
    host_ports: frozenset = frozenset()
    # The CSI volumes its pods attach, (driver, claim) pairs, and how many of each driver's it can attach (a
    # driver not named: no limit).
    attached: frozenset = frozenset()
    attach_limits: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class NewClaim:
    pool: str
    instance_types: tuple[str, ...]  # cheapest first, at most MAX_INSTANCE_TYPES
    zone: str | None  # None: any zone of the pool
    capacity_type: str
    pods: tuple[str, ...]  # in placement order
    requests: Resources  # the pods', without DaemonSets
    capacity: Resources  # per resource the most any of instance_types has: what it counts against limits


@dataclass(frozen=True)
class Result:
    placed: dict[str, str]  # pod -> Slot name
    claims: list[NewClaim]
    unschedulable: dict[str, str]  # pod -> why


@dataclass(frozen=True, eq=False)
class _Level:
    """One set of constraints a pod is tried with."""

    alternatives: tuple[Requirements, ...]
    zone_spreads: tuple[Spread, ...]
    host_spreads: tuple[Spread, ...]
    anti: tuple[PodSelector, ...]
    tolerations: tuple
    static: int  # identifies (alternatives, tolerations) for the Slot admission cache
    required: tuple[Requirements, ...]  # the pod's own alternatives: which zones count for its spread
    loose: bool  # no limit per Slot or claim (no hostname spread, no anti-affinity, no host ports or volumes)
    holds: bool  # host ports or CSI volumes, which a Slot or claim must have free


class _PoolType:
    """An instance type as one pool sees it: ``room`` is its allocatable less the pool's DaemonSets, and
    ``daemon_ports`` the host ports those DaemonSets hold on it."""

    __slots__ = ("index", "name", "labels", "room", "capacity", "offers", "daemon_ports")

    def __init__(self, index: int, option: InstanceOption, room: Resources):
        self.index, self.name, self.labels = index, option.name, option.labels
        self.room, self.capacity = room, option.capacity
        self.offers = tuple((o.zone, o.capacity_type, math.inf if o.price is None else o.price)
                            for o in option.offerings if o.available)


class _Space:
    """What a claim's requirements leave: instance types (by index), zones, capacity types."""

    __slots__ = ("allowed", "zones", "capacity_types", "zone")

    def __init__(self, allowed: frozenset, zones: frozenset, capacity_types: frozenset):
        self.allowed, self.zones, self.capacity_types = allowed, zones, capacity_types
        self.zone = next(iter(zones)) if len(zones) == 1 else None


def _type_ok(rules: list, labels: Mapping[str, str]) -> bool:
    for key, rule in rules:
        if not rule.allows(labels.get(key)):
            return False
    return True


class _Pool:
    def __init__(self, view: PoolView, catalog: Sequence[InstanceOption], daemonsets: Sequence[PodView]):
        self.view, self.name, self.catalog = view, view.name, catalog
        self.fixed = {**view.labels, machine_names.POOL_LABEL: view.name,
                      provisioning_names.HOSTNAME_LABEL: _UNKNOWN_HOSTNAME}
        rules = {}
        for key in WELL_KNOWN:
            rule = view.requirements.get(key)
            rules[key] = _EXISTS if rule is None else rule.intersect(_EXISTS)
        if view.requirements.get(CAPACITY_TYPE) is None:
            rules[CAPACITY_TYPE] = Rule.of(IN, (view.capacity_type,))
        self.base = Requirements(rules)
        offered = {o.zone for option in catalog for o in option.offerings}
        self.zones = frozenset(offered if view.zones is None else offered & set(view.zones))
        self._admits: dict = {}
        self._spaces: dict = {}
        self._orders: dict = {}
        self._tolerated: dict = {}
        self.types: list[_PoolType] = []
        candidates = [] if view.cannot_launch else [_PoolType(i, option, option.allocatable)
                                                    for i, option in enumerate(catalog)]
        base_space = self._space_of(self.base, candidates)
        overheads = [(ds.requests, ds.host_ports, [self.admits(alt) for alt in ds.alternatives])
                     for ds in daemonsets if ds.unsupported is None and tolerates(ds.tolerations, view.taints)]
        for entry in candidates:
            if entry.index not in base_space.allowed:
                continue
            overhead, ports = ZERO, set()
            for asked, held, spaces in overheads:
                if any(wk is not None and entry.index in self._space_of(wk, candidates).allowed for wk in spaces):
                    overhead += asked
                    ports.update(held)
            if overhead.fits(entry.room):
                entry.room = entry.room - overhead
                entry.daemon_ports = frozenset(ports)
                self.types.append(entry)
        # Whether a pod's host ports must be checked against the DaemonSets of each type.
        self.has_daemon_ports = any(entry.daemon_ports for entry in self.types)
        self._spaces.clear()
        self.limits, self.used = view.limits, view.used
        self.claims: list[_Claim] = []
        self.charged_cpu = self.charged_memory = 0

    def tolerated(self, tolerations: tuple) -> bool:
        found = self._tolerated.get(tolerations)
        if found is None:
            found = self._tolerated[tolerations] = tolerates(tolerations, self.view.taints)
        return found

    def admits(self, alternative: Requirements) -> Requirements | None:
        """The pool's well-known requirements narrowed by one of a pod's alternatives; None if its labels or
        requirements rule the alternative out."""
        try:
            return self._admits[alternative]
        except KeyError:
            pass
        rules = dict(self.base.rules)
        found: Requirements | None = None
        narrowed = False
        for key, rule in alternative.rules.items():
            fixed = self.fixed.get(key)
            if fixed is not None:
                if not rule.allows(fixed):
                    break
            elif key in WELL_KNOWN:
                merged = rules[key].intersect(rule)
                if merged.empty:
                    break
                narrowed = narrowed or merged != rules[key]
                rules[key] = merged
            elif not rule.allows(None):
                break
        else:
            found = Requirements(rules) if narrowed else self.base
        self._admits[alternative] = found
        return found

    def conflict(self, alternative: Requirements) -> str:
        """The pod's rule the pool cannot meet, for a reason."""
        for key, rule in alternative.rules.items():
            fixed = self.fixed.get(key)
            if fixed is not None:
                if not rule.allows(fixed):
                    return rule.describe(key)
            elif key in WELL_KNOWN:
                if self.base.rules[key].intersect(rule).empty:
                    return rule.describe(key)
            elif not rule.allows(None):
                return rule.describe(key)
        return alternative.describe()

    def _space_of(self, reqs: Requirements, entries: Iterable[_PoolType]) -> _Space:
        found = self._spaces.get(reqs)
        if found is not None:
            return found
        zone_rule, type_rule = reqs.get(ZONE), reqs.get(CAPACITY_TYPE)
        zones = frozenset(z for z in self.zones if zone_rule is None or zone_rule.allows(z))
        capacity_types = frozenset(c for c in CAPACITY_TYPES if type_rule is None or type_rule.allows(c))
        rules = [(k, reqs.rules[k]) for k in TYPE_KEYS if k in reqs.rules and reqs.rules[k] != _EXISTS]
        allowed = frozenset(t.index for t in entries if _type_ok(rules, t.labels)
                            and any(z in zones and c in capacity_types for z, c, _ in t.offers))
        found = self._spaces[reqs] = _Space(allowed, zones, capacity_types)
        return found

    def space(self, reqs: Requirements) -> _Space:
        return self._space_of(reqs, self.types)

    def order(self, zones: frozenset, capacity_type: str) -> list[tuple[_PoolType, float]]:
        """The pool's types with an offering in ``zones`` at ``capacity_type``, cheapest first."""
        key = (zones, capacity_type)
        found = self._orders.get(key)
        if found is None:
            priced = []
            for entry in self.types:
                prices = [p for z, c, p in entry.offers if c == capacity_type and z in zones]
                if prices:
                    price = min(prices)
                    priced.append(((price, entry.capacity.cpu, entry.capacity.memory, entry.name), entry, price))
            priced.sort(key=lambda item: item[0])
            found = self._orders[key] = [(entry, price) for _, entry, price in priced]
        return found

    def budget(self, claim: _Claim | None) -> tuple[float, float]:
        """The cpu and memory the pool's limits leave for ``claim`` (or a new one)."""
        cpu = memory = math.inf
        mine_cpu, mine_memory = (claim.charge_cpu, claim.charge_memory) if claim else (0, 0)
        if self.limits.cpu is not None:
            cpu = self.limits.cpu - (self.used.cpu or 0) - (self.charged_cpu - mine_cpu)
        if self.limits.memory is not None:
            memory = self.limits.memory - (self.used.memory or 0) - (self.charged_memory - mine_memory)
        return cpu, memory

    def machines_left(self) -> float:
        if self.limits.machines is None:
            return math.inf
        return self.limits.machines - (self.used.machines or 0) - len(self.claims)

    def usable(self, pod: PodView, attached: frozenset, entries: list[_PoolType]) -> list[_PoolType]:
        """Of ``entries``, the types a claim holding ``attached`` may have with the pod: its DaemonSets leave
        the pod's host ports free, and it attaches the pod's volumes too."""
        if pod.host_ports and self.has_daemon_ports:
            entries = [e for e in entries if port_conflict(pod.host_ports, e.daemon_ports) is None]
        if pod.attachments:
            entries = [e for e in entries if over_limit(attached, pod.attachments, self.volume_limits(e)) is None]
        return entries

    def volume_limits(self, entry: _PoolType) -> dict[str, int]:
        return dict(self.catalog[entry.index].volume_limits)

    def unusable(self, pod: PodView, entries: list[_PoolType]) -> str:
        """Why none of ``entries`` is usable for the pod on a new claim."""
        if pod.host_ports and self.has_daemon_ports:
            held = sorted({describe_port(p) for e in entries for p in pod.host_ports
                           if port_conflict((p,), e.daemon_ports)})
            if held and not [e for e in entries if port_conflict(pod.host_ports, e.daemon_ports) is None]:
                return f"{', '.join(held)} held by a DaemonSet on every instance type that fits"
        drivers = sorted({d for d, _ in pod.attachments})
        most = {d: max((self.volume_limits(e).get(d, math.inf) for e in entries), default=0) for d in drivers}
        return "; ".join(f"no instance type that fits attaches {sum(1 for a in pod.attachments if a[0] == d)} "
                         f"volumes of {d} (at most {most[d]})" for d in drivers if most[d] != math.inf)


class _Host:
    __slots__ = ("id", "name", "zone", "anti", "ports", "attached", "attach_limits")

    def __init__(self, host_id: int, name: str, zone: str | None, ports: frozenset = frozenset(),
                 attached: frozenset = frozenset(), attach_limits: Mapping[str, int] | None = None):
        self.id, self.name, self.zone = host_id, name, zone
        # The required anti-affinity of the pods on it: a set, so a pod is checked against it in one look-up.
        self.anti: set[PodSelector] = set()
        self.ports = ports  # the host ports held on it
        self.attached = attached  # the CSI volumes attached to it
        # How many of a driver's volumes it attaches; None: by instance type (a claim's candidates say).
        self.attach_limits = attach_limits


class _SlotState(_Host):
    __slots__ = ("slot", "free", "labels", "varying", "taints")

    def __init__(self, host_id: int, slot: Slot):
        super().__init__(host_id, slot.name, slot.labels.get(ZONE), slot.host_ports, slot.attached,
                         slot.attach_limits)
        self.slot, self.labels, self.varying, self.taints = slot, slot.labels, slot.varying, slot.taints
        self.free = slot.allocatable - slot.requested

    def admits(self, alternatives: Iterable[Requirements]) -> bool:
        """Whether one of ``alternatives`` holds on the Slot, whichever type and zone a launch still picks."""
        if not self.varying:
            return any(alt.allows(self.labels) for alt in alternatives)
        return any(alt.allows_every(self.labels, self.varying) for alt in alternatives)


class _Claim(_Host):
    __slots__ = ("pool", "reqs", "space", "candidates", "total", "pods", "head_cpu", "head_memory", "head_pods",
                 "charge_cpu", "charge_memory", "kept", "capacity_type", "most", "least")

    def __init__(self, host_id: int, pool: _Pool):
        super().__init__(host_id, "", None)
        self.pool = pool
        self.pods: list[PodView] = []
        self.total = ZERO
        self.charge_cpu = self.charge_memory = 0
        self.kept: list[tuple[_PoolType, float]] = []
        self.candidates: list[_PoolType] = []
        self.space: _Space | None = None
        self.capacity_type = ON_DEMAND
        self.most = (0, 0, 0)  # the candidates' largest cpu, memory and pods room
        self.least = ZERO  # per resource the smallest room of any candidate: what fits there fits in every one

    def update(self, reqs: Requirements, space: _Space, candidates: list[_PoolType], total: Resources) -> None:
        changed = len(candidates) != len(self.candidates) or space is not self.space  # candidates only shrink
        if candidates is not self.candidates:
            rooms = [entry.room for entry in candidates]
            self.most = (max((r.cpu for r in rooms), default=0), max((r.memory for r in rooms), default=0),
                         max((r.pods for r in rooms), default=0))
            self.least = resources.least(rooms)
        self.reqs, self.space, self.candidates, self.total = reqs, space, candidates, total
        self.zone = space.zone
        cpu, memory, pods = self.most
        self.head_cpu, self.head_memory, self.head_pods = cpu - total.cpu, memory - total.memory, pods - total.pods
        if changed:
            self._rank()

    def _rank(self) -> None:
        """Keep the cheapest types and charge the pool the largest of them. A charge never shrinks within a
        round, so a claim or pool that could not take a pod cannot take a pod like it later."""
        pool, zones, members = self.pool, self.space.zones, {e.index for e in self.candidates}
        capacity_type = ON_DEMAND
        if SPOT in self.space.capacity_types and any(e.index in members for e, _ in pool.order(zones, SPOT)):
            capacity_type = SPOT
        kept: list[tuple[_PoolType, float]] = []
        for entry, price in pool.order(zones, capacity_type):
            # One image runs one architecture: every type kept is the cheapest one's.
            if entry.index in members and (not kept or entry.labels.get(ARCH) == kept[0][0].labels.get(ARCH)):
                kept.append((entry, price))
                if len(kept) == MAX_INSTANCE_TYPES:
                    break
        cpu = max(self.charge_cpu, max(e.capacity.cpu for e, _ in kept))
        memory = max(self.charge_memory, max(e.capacity.memory for e, _ in kept))
        pool.charged_cpu += cpu - self.charge_cpu
        pool.charged_memory += memory - self.charge_memory
        self.charge_cpu, self.charge_memory, self.kept, self.capacity_type = cpu, memory, kept, capacity_type


def _within(entry: _PoolType, budget: tuple[float, float]) -> bool:
    return entry.capacity.cpu <= budget[0] and entry.capacity.memory <= budget[1]


class _SelectorIndex:
    """Selectors by the label values they require: a pod is matched against those its own labels carry and
    those that require none, not against every selector (each Deployment's own selector, for thousands of
    pods of hundreds of Deployments)."""

    def __init__(self, selectors: Iterable[PodSelector]):
        self._by_label: dict[tuple[str, str], list[PodSelector]] = {}
        self._unindexed: list[PodSelector] = []
        for selector in selectors:
            # The key with the fewest values a matching pod must have one of.
            required = min(((key, rule.values) for key, rule in selector.selector.rules.items()
                            if not rule.complement and not rule.absent), key=lambda kv: len(kv[1]), default=None)
            if required is None:
                self._unindexed.append(selector)
                continue
            key, values = required
            for value in values:
                self._by_label.setdefault((key, value), []).append(selector)

    def matching(self, namespace: str, labels: Mapping[str, str]) -> frozenset:
        """The selectors that match a pod of ``namespace`` with ``labels``."""
        found = [s for item in labels.items() for s in self._by_label.get(item, ())]
        found.extend(self._unindexed)
        return frozenset(s for s in found if s.matches(namespace, labels))


class _Scheduler:
    def __init__(self, pools: Sequence[PoolView], slots: Sequence[Slot], catalog: Sequence[InstanceOption],
                 daemonsets: Sequence[PodView]):
        self.pools = [_Pool(view, catalog, daemonsets)
                      for view in sorted(pools, key=lambda p: (-p.weight, p.name))]
        ordered = sorted(enumerate(slots), key=lambda item: (item[1].in_flight, item[0]))
        self.slots = [_SlotState(i, slot) for i, (_, slot) in enumerate(ordered)]
        self.claims: list[_Claim] = []
        self.hosts: list[_Host] = list(self.slots)
        self.preferred_slot: dict[str, _SlotState] = {}
        for state in self.slots:
            for key in state.slot.provisioned_for:
                self.preferred_slot.setdefault(key, state)
        self.placed: dict[str, str] = {}
        self.unschedulable: dict[str, str] = {}
        self.reserved: dict[int, Resources] = {}  # Slot id -> room held for the pending pods made for it
        self._reserving: dict[str, _SlotState] = {}  # those pods -> the Slot holding room for them
        self._levels: dict = {}
        self._statics: dict = {}
        self._admitted: dict = {}
        self._narrowed: dict = {}
        self._eligible: dict = {}
        self._matched: dict = {}
        self.selectors: set[PodSelector] = set()
        self._selector_index = _SelectorIndex(())
        self.host_counts: dict[PodSelector, dict[int, int]] = {}
        self.zone_counts: dict[PodSelector, dict[str, int]] = {}

    # --- topology: matching pods per Slot or claim, and per zone

    def track(self, pods: Sequence[PodView], residents: Residents | None) -> None:
        """Count, for each selector a pending pod spreads by or keeps away, the pods on each Slot and in each
        zone that it matches, and give each Slot the anti-affinity of its pods. Only those selectors are
        counted (with none, nothing is), each through the index, which looks only at the pods it can match.
        ``residents`` None: every pod of every Slot is counted against every selector, the reference the
        index is tested against."""
        counted: set[PodSelector] = set()
        for pod in pods:
            counted.update(s.selector for s in pod.spreads)
            counted.update(pod.anti_affinity)
        if residents is None:
            self._track_every_pod(counted)
            return
        by_name = {state.name: state for state in self.slots}
        for name, anti in residents.anti_affinity.items():
            state = by_name.get(name)
            if state is not None:
                state.anti.update(anti)
                self.selectors.update(anti)
        self.selectors.update(counted)
        self._selector_index = _SelectorIndex(self.selectors)
        for selector in counted:
            hosts = self.host_counts[selector] = {}
            zones = self.zone_counts[selector] = {}
            for name, count in residents.where(selector):
                state = by_name.get(name)
                if state is None:
                    continue  # a Slot of the index this run leaves out
                hosts[state.id] = hosts.get(state.id, 0) + count
                if state.zone is not None:
                    zones[state.zone] = zones.get(state.zone, 0) + count

    def _track_every_pod(self, counted: set[PodSelector]) -> None:
        self.selectors.update(counted)
        for state in self.slots:
            for resident in state.slot.pods:
                self.selectors.update(resident.anti_affinity)
        self._selector_index = _SelectorIndex(self.selectors)
        for selector in self.selectors:
            self.host_counts[selector] = {}
            self.zone_counts[selector] = {}
        for state in self.slots:
            for resident in state.slot.pods:
                self._record(resident, state)

    def matched(self, pod: PodView | Resident) -> frozenset:
        key = (pod.namespace, frozenset(pod.labels.items())) if isinstance(pod, Resident) else pod.signature[:2]
        found = self._matched.get(key)
        if found is None:
            found = self._matched[key] = self._selector_index.matching(pod.namespace, pod.labels)
        return found

    def _record(self, pod: PodView | Resident, host: _Host) -> None:
        for selector in self.matched(pod):
            counts = self.host_counts.get(selector)
            if counts is None:
                continue  # a running pod's anti-affinity no pending pod shares: nothing counts it
            counts[host.id] = counts.get(host.id, 0) + 1
            if host.zone is not None:
                zones = self.zone_counts[selector]
                zones[host.zone] = zones.get(host.zone, 0) + 1
        if pod.anti_affinity:
            host.anti.update(pod.anti_affinity)
        if pod.host_ports:
            host.ports = host.ports.union(pod.host_ports)

    def _pin(self, claim: _Claim, zone: str | None) -> None:
        """A claim whose zone became known: count its pods there."""
        if zone is None:
            return
        for pod in claim.pods:
            for selector in self.matched(pod):
                zones = self.zone_counts.get(selector)
                if zones is not None:
                    zones[zone] = zones.get(zone, 0) + 1

    def host_room(self, pod: PodView, level: _Level, host: _Host) -> float:
        """How many more pods like ``pod`` its spread, anti-affinity and host ports let ``host`` take (one at
        most with host ports: a pod like it holds the same ones)."""
        if level.holds:
            if pod.host_ports and port_conflict(pod.host_ports, host.ports) is not None:
                return 0
            if (pod.attachments and host.attach_limits is not None
                    and over_limit(host.attached, pod.attachments, host.attach_limits) is not None):
                return 0
        matched = self.matched(pod)
        if not host.anti.isdisjoint(matched):
            return 0
        room = 1 if pod.host_ports else math.inf
        for selector in level.anti:
            if self.host_counts[selector].get(host.id, 0):
                return 0
            if selector in matched:
                room = 1
        for spread in level.host_spreads:
            count = self.host_counts[spread.selector].get(host.id, 0)
            if spread.selector in matched:
                room = min(room, spread.max_skew - count)
            elif count > spread.max_skew:
                return 0
        return max(room, 0)

    def admissible_zones(self, pod: PodView, level: _Level) -> list[str] | None:
        """Zones the pod's zone spread lets it go to, fewest matching pods first; None without one."""
        if not level.zone_spreads:
            return None
        eligible = self.eligible_zones(level)
        matched = self.matched(pod)
        allowed: set[str] | None = None
        for spread in level.zone_spreads:
            counts = self.zone_counts[spread.selector]
            least = min((counts.get(z, 0) for z in eligible), default=0)
            own = 1 if spread.selector in matched else 0
            fine = {z for z in eligible if counts.get(z, 0) + own - least <= spread.max_skew}
            allowed = fine if allowed is None else allowed & fine
        first = self.zone_counts[level.zone_spreads[0].selector]
        return sorted(allowed or (), key=lambda z: (first.get(z, 0), z))

    def eligible_zones(self, level: _Level) -> frozenset:
        """The zones a pod could go to by its required node affinity and node selector (taints and preferences
        aside, as Kubernetes counts spread domains)."""
        found = self._eligible.get(level.required)
        if found is None:
            zones = set()
            for state in self.slots:
                if state.zone is not None and state.admits(level.required):
                    zones.add(state.zone)
            for pool in self.pools:
                for alt in level.required:
                    wk = pool.admits(alt)
                    if wk is None:
                        continue
                    space = pool.space(wk)
                    for entry in pool.types:
                        if entry.index in space.allowed:
                            zones.update(z for z, c, _ in entry.offers
                                         if z in space.zones and c in space.capacity_types)
            found = self._eligible[level.required] = frozenset(zones)
        return found

    # --- levels: a pod's constraints with its preferences, then without

    def levels(self, pod: PodView) -> list[_Level]:
        found = self._levels.get(pod.signature)
        if found is not None:
            return found
        hard = [s for s in pod.spreads if s.hard]
        soft = [s for s in pod.spreads if not s.hard]
        alternatives = pod.alternatives
        if pod.preferred_terms:
            preferred = pod.preferred_terms[0][1]
            alternatives = tuple(a for a in (alt.intersect(preferred) for alt in pod.alternatives)
                                 if a.satisfiable) or pod.alternatives  # a preference no Node can meet: none
        found = []
        if alternatives != pod.alternatives or soft:
            found.append(self._level(pod, _with_volumes(alternatives, pod.volume_terms), hard + soft))
        found.append(self._level(pod, _with_volumes(pod.alternatives, pod.volume_terms), hard))
        self._levels[pod.signature] = found
        return found

    def _level(self, pod: PodView, alternatives: tuple, spreads: list[Spread]) -> _Level:
        static = self._statics.setdefault((alternatives, pod.tolerations), len(self._statics))
        host_spreads = tuple(s for s in spreads if not s.zone)
        holds = bool(pod.host_ports or pod.attachments)
        return _Level(alternatives, tuple(s for s in spreads if s.zone), host_spreads, pod.anti_affinity,
                      pod.tolerations, static, pod.alternatives, not host_spreads and not pod.anti_affinity and not holds,
                      holds)

    # --- Slots

    def slot_admits(self, level: _Level, state: _SlotState) -> bool:
        key = (level.static, state.id)
        found = self._admitted.get(key)
        if found is None:
            found = self._admitted[key] = (tolerates(level.tolerations, state.taints)
                                           and state.admits(level.alternatives))
        return found

    def slot_room(self, pod: PodView, level: _Level, state: _SlotState, zones: list[str] | None,
                  wanted: int) -> int:
        """How many of ``wanted`` pods like ``pod`` the Slot takes now (0 or 1 for one pod), leaving the room
        the pods it was made for still need (``_reserve``) to them."""
        asked = pod.requests
        free = state.free
        promised = self.reserved.get(state.id)
        if promised is not None:
            mine = self._reserving.get(pod.key) is state
            free = free - (promised - asked if mine else promised)
        if not asked.fits(free) or not self.slot_admits(level, state):
            return 0
        if zones is not None and state.zone not in zones:
            return 0
        room = wanted if level.loose and not state.anti else min(wanted, self.host_room(pod, level, state))
        if room > 1:
            room = min(room, asked.copies_in(free))
        return int(room)

    def _reserve(self, pods: Sequence[PodView]) -> None:
        """The room each in-flight Machine holds for the pending pods it was made for: a larger pod placed
        before them must not take it, leaving them to a new Machine while that room waits for nobody."""
        for pod in pods:
            state = self.preferred_slot.get(pod.key)
            if state is not None:
                self._reserving[pod.key] = state
                self.reserved[state.id] = self.reserved.get(state.id, ZERO) + pod.requests

    def _release(self, pod: PodView) -> None:
        """The pod takes its place (or gives up the Machine made for it): its room is no longer held."""
        state = self._reserving.pop(pod.key, None)
        if state is not None:
            self.reserved[state.id] = self.reserved[state.id] - pod.requests

    def put_on_slot(self, pods: Sequence[PodView], state: _SlotState) -> None:
        for pod in pods:
            self._release(pod)
            state.free = state.free - pod.requests
            self.placed[pod.key] = state.name
            self._record(pod, state)
            if pod.attachments:
                state.attached = state.attached | pod.attachments

    # --- claims

    def narrowed(self, reqs: Requirements, wk: Requirements) -> Requirements | None:
        key = (reqs, wk)
        try:
            return self._narrowed[key]
        except KeyError:
            pass
        found = reqs.intersect(wk)
        if not found.satisfiable:
            found = None
        elif found == reqs:
            found = reqs  # the same object: its space and candidates stay as they are
        self._narrowed[key] = found
        return found

    def claim_room(self, pod: PodView, level: _Level, claim: _Claim, zones: list[str] | None,
                   wanted: int) -> tuple[int, Requirements | None, _Space | None, list | None]:
        """How many of ``wanted`` pods like ``pod`` the claim takes now, and the claim after."""
        asked = pod.requests
        if asked.cpu > claim.head_cpu or asked.memory > claim.head_memory or asked.pods > claim.head_pods:
            return 0, None, None, None
        pool = claim.pool
        if not pool.tolerated(level.tolerations):
            return 0, None, None, None
        room = wanted if level.loose and not claim.anti else min(wanted, self.host_room(pod, level, claim))
        if room < 1:
            return 0, None, None, None
        for alt in level.alternatives:
            wk = pool.admits(alt)
            if wk is None:
                continue
            reqs = claim.reqs if wk is pool.base else self.narrowed(claim.reqs, wk)
            if reqs is None:
                continue
            for zone in self._zone_choices(zones, pool.space(reqs)):
                pinned = reqs if zone is None else self.narrowed(reqs, _zone_requirement(zone))
                if pinned is None:
                    continue
                space = pool.space(pinned)
                allowed = None if pinned is claim.reqs else space.allowed
                candidates = pool.usable(pod, claim.attached, claim.candidates) if level.holds else claim.candidates
                count, stages = self._fill(claim, candidates, claim.total, allowed, asked, room)
                if count:
                    return count, pinned, space, stages
        return 0, None, None, None

    @staticmethod
    def _zone_choices(zones: list[str] | None, space: _Space) -> list[str | None]:
        if zones is None:
            return [None]
        if space.zone is not None:
            return [space.zone] if space.zone in zones else []
        return [z for z in zones if z in space.zones]

    @staticmethod
    def _fill(claim: _Claim, candidates: list[_PoolType], total: Resources, allowed: frozenset | None,
              asked: Resources, wanted: float) -> tuple[int, list[list[_PoolType]]]:
        """How many of ``wanted`` copies of ``asked`` fit on ``total`` in one of the claim's ``candidates``
        (those in ``allowed`` unless None, and within the pool's limits), and the types left after each copy
        that changes them, as adding the copies one at a time would leave them."""
        budget = claim.pool.budget(claim)
        limited = budget[0] != math.inf or budget[1] != math.inf
        if wanted == 1:
            after = total + asked
            if candidates is claim.candidates and allowed is None and not limited and after.fits(claim.least):
                return 1, [candidates]  # every candidate still fits: the same ones, as filtering would leave them
            candidates = [e for e in candidates
                          if after.fits(e.room) and (allowed is None or e.index in allowed)
                          and (not limited or _within(e, budget))]
            return (1, [candidates]) if candidates else (0, [])
        counts = []
        for entry in candidates:
            if (allowed is None or entry.index in allowed) and (not limited or _within(entry, budget)):
                counts.append((min(wanted, asked.copies_in(entry.room - total)), entry))
        best = int(max((c for c, _ in counts), default=0))
        if not best:
            return 0, []
        changes = sorted({1} | {c + 1 for c, _ in counts if c + 1 <= best})
        return best, [[e for c, e in counts if c >= j] for j in changes]

    def put_on_claim(self, pods: Sequence[PodView], claim: _Claim, reqs: Requirements, space: _Space,
                     stages: list[list[_PoolType]]) -> None:
        was = claim.zone
        total = claim.total
        for pod in pods:
            total = total + pod.requests
        for candidates in stages:
            claim.update(reqs, space, candidates, total)
        if was is None and claim.zone is not None:
            self._pin(claim, claim.zone)
        for pod in pods:
            claim.pods.append(pod)
            self._record(pod, claim)
            if pod.attachments:
                claim.attached = claim.attached | pod.attachments

    def new_claim(self, pods: list[PodView], level: _Level, zones: list[str] | None, reasons: list[str]) -> int:
        """Place as many of ``pods`` (alike) as fit on a new claim of the first pool that can take one."""
        pod, wanted = pods[0], len(pods)
        asked = pod.requests
        for pool in self.pools:
            if pool.view.cannot_launch:
                reasons.append(pool.view.cannot_launch)
                continue
            if not pool.tolerated(level.tolerations):
                taint = next(t for t in pool.view.taints if not tolerates(level.tolerations, (t,)))
                reasons.append(f"taint {taint.key}{'=' + taint.value if taint.value else ''}:{taint.effect} "
                               "not tolerated")
                continue
            admitted = [wk for wk in (pool.admits(alt) for alt in level.alternatives) if wk is not None]
            if not admitted:
                reasons.append(f"{pool.conflict(level.alternatives[0])} not met" if level.alternatives
                               else "no required node-affinity term can be met")
                continue
            if pool.machines_left() < 1:
                reasons.append(f"limit of {pool.limits.machines} machines reached")
                continue
            budget = pool.budget(None)
            stage = 0
            unusable = ""
            for wk in admitted:
                space = pool.space(wk)
                for zone in self._zone_choices(zones, space):
                    reqs = wk if zone is None else self.narrowed(wk, _zone_requirement(zone))
                    if reqs is None:
                        continue
                    space_here = pool.space(reqs)
                    if not space_here.allowed:
                        continue
                    stage = max(stage, 1)
                    fitting = [e for e in pool.types if e.index in space_here.allowed and asked.fits(e.room)]
                    if not fitting:
                        continue
                    stage = max(stage, 2)
                    usable = pool.usable(pod, frozenset(), fitting)
                    if not usable:
                        unusable = pool.unusable(pod, fitting)
                        continue
                    fitting = usable
                    stage = max(stage, 3)
                    candidates = [e for e in fitting if _within(e, budget)]
                    if not candidates:
                        continue
                    claim = _Claim(len(self.hosts), pool)
                    self.hosts.append(claim)
                    self.claims.append(claim)
                    pool.claims.append(claim)
                    if not level.loose:
                        wanted = min(wanted, max(1, self.host_room(pod, level, claim)))
                    count, stages = (1, [candidates]) if wanted == 1 else self._fill(claim, candidates, ZERO, None,
                                                                                     asked, wanted)
                    self.put_on_claim(pods[:count], claim, reqs, space_here, stages)
                    return count
            if zones is not None and stage == 0 and not zones:
                reasons.append("topology spread over zones: no zone keeps the skew within maxSkew")
            elif stage == 0:
                asked_for = "; ".join(sorted({wk.only(WELL_KNOWN).describe() for wk in admitted} - {""}))
                reasons.append(f"no instance type offered meets {asked_for or 'the requirements'}"
                               + (" in the zones the topology spread allows" if zones is not None else ""))
            elif stage == 1:
                reasons.append(f"no instance type fits {_describe(asked)} (with DaemonSets)")
            elif stage == 2:
                reasons.append(unusable)
            else:
                reasons.append("the pool's limits leave room for no instance type that fits")
        return 0

    # --- placing

    def run(self, pods: Sequence[PodView], group: bool, residents: Residents | None) -> Result:
        unique: dict[str, PodView] = {}
        for pod in pods:
            unique.setdefault(pod.key, pod)
        supported = []
        for pod in unique.values():
            if pod.unsupported is not None:
                self.unschedulable[pod.key] = f"not supported: {pod.unsupported}"
            elif pod.unplaceable is not None:
                self.unschedulable[pod.key] = pod.unplaceable
            else:
                supported.append(pod)
        self.track(supported, residents)
        self._reserve(supported)
        ordered = placement_order(supported)
        start = 0
        while start < len(ordered):
            end = start + 1
            if group:
                while end < len(ordered) and ordered[end].signature == ordered[start].signature:
                    end += 1
            self.place_group(ordered[start:end], bulk=group)
            start = end
        return Result(self.placed, [self.finish(c) for c in self.claims], self.unschedulable)

    def place_group(self, pods: list[PodView], *, bulk: bool) -> None:
        """Pods alike, in order; runs without a Slot of their own are placed together."""
        single = not bulk or any(s.zone for s in pods[0].spreads)
        index = 0
        while index < len(pods):
            if single or pods[index].key in self.preferred_slot:
                self.place([pods[index]])
                index += 1
                continue
            end = index + 1
            while end < len(pods) and pods[end].key not in self.preferred_slot:
                end += 1
            self.place(pods[index:end])
            index = end

    def place(self, pods: list[PodView]) -> None:
        """Place alike pods in order, each as if alone, the preferred Slot of the first tried first."""
        reasons: list[str] = []
        for level in self.levels(pods[0]):
            reasons = []
            pods = pods[self.place_at(pods, level, reasons):]
            if not pods:
                return
        if not pods[0].alternatives:
            reason = "its node selector and required node-affinity terms cannot all be met"
        elif not self.levels(pods[0])[-1].alternatives:
            reason = "its node selector and required node affinity allow no topology its volumes allow"
        elif not self.pools:
            reason = "no provisioning NodePool"
        else:
            unique = list(dict.fromkeys(reasons)) or ["no room"]
            reason = f"{'; '.join(unique)}; pools tried: {', '.join(p.name for p in self.pools)}"
        for pod in pods:
            self.unschedulable[pod.key] = reason

    def place_at(self, pods: list[PodView], level: _Level, reasons: list[str]) -> int:
        """How many of ``pods`` (from the first) found a place with ``level``'s constraints."""
        pod = pods[0]
        if not level.alternatives:
            return 0
        done = 0
        preferred = self.preferred_slot.get(pod.key)
        if preferred is not None:
            zones = self.admissible_zones(pod, level)
            if self.slot_room(pod, level, preferred, zones, 1):
                self.put_on_slot([pod], preferred)
                return 1
            self._release(pod)  # it goes elsewhere: the Machine's room for it is anyone's
        # Pods alike never have a zone spread (zones is None for more than one pod), and what did not take
        # one of them does not take the next: first fit goes down Slots, then claims, then new claims once.
        zones = self.admissible_zones(pod, level)
        for state in self.slots:
            count = self.slot_room(pod, level, state, zones, len(pods) - done)
            if count:
                self.put_on_slot(pods[done:done + count], state)
                done += count
                if done == len(pods):
                    return done
        for claim in list(self.claims):
            count, reqs, space, stages = self.claim_room(pod, level, claim, zones, len(pods) - done)
            if count:
                self.put_on_claim(pods[done:done + count], claim, reqs, space, stages)
                done += count
                if done == len(pods):
                    return done
        while done < len(pods):
            count = self.new_claim(pods[done:], level, zones, reasons)
            if not count:
                break
            done += count
        return done

    def finish(self, claim: _Claim) -> NewClaim:
        kept = claim.kept
        zone = claim.zone
        if zone is None and claim.space.zones != claim.pool.zones:
            # Fewer zones than the pool's subnets cover: launch in the cheapest of them.
            best = min(((p, z) for e, _ in kept[:1] for z, c, p in e.offers
                        if c == claim.capacity_type and z in claim.space.zones), default=None)
            if best is not None:
                zone = best[1]
                kept = [(e, p) for e, p in kept if any(z == zone and c == claim.capacity_type for z, c, _ in e.offers)]
        return NewClaim(
            pool=claim.pool.name,
            instance_types=tuple(e.name for e, _ in kept),
            zone=zone,
            capacity_type=claim.capacity_type,
            pods=tuple(p.key for p in claim.pods),
            requests=claim.total,
            capacity=Resources(cpu=claim.charge_cpu, memory=claim.charge_memory),
        )


def _with_volumes(alternatives: tuple[Requirements, ...], terms: tuple[Requirements, ...]) -> tuple:
    """The pod's alternatives each narrowed by one of its volumes' terms (all that can still be met)."""
    if not terms:
        return alternatives
    return tuple(dict.fromkeys(both for both in (alt.intersect(term) for alt in alternatives for term in terms)
                               if both.satisfiable))


def _zone_requirement(zone: str) -> Requirements:
    return Requirements({ZONE: Rule.of(IN, (zone,))})


def _describe(asked: Resources) -> str:
    quantities = asked.to_quantities()
    quantities.pop("pods", None)
    return ", ".join(f"{k} {v}" for k, v in quantities.items())


def placement_order(pods: Iterable[PodView]) -> list[PodView]:
    """The order pods are placed in: cpu, then memory, descending; then alike pods together, by key."""
    by_key = sorted(pods, key=lambda p: p.key)
    groups: dict = {}
    for pod in by_key:
        groups.setdefault(pod.signature, len(groups))
    return sorted(by_key, key=lambda p: (-p.requests.cpu, -p.requests.memory, groups[p.signature], p.key))


def _running_on(labels: Mapping[str, str], taints: tuple, daemonsets: Iterable[PodView],
                varying: Mapping[str, frozenset] | None = None) -> Iterable[PodView]:
    """The DaemonSets that admit a Node with these labels and taints; with ``varying`` (a Machine whose launch
    decides those labels), every DaemonSet that may run there."""
    return (d for d in daemonsets if d.unsupported is None and tolerates(d.tolerations, taints)
            and any(alt.may_allow(labels, varying) if varying else alt.allows(labels) for alt in d.alternatives))


def daemonset_overhead(labels: Mapping[str, str], taints: tuple, daemonsets: Iterable[PodView],
                       varying: Mapping[str, frozenset] | None = None) -> Resources:
    """What the DaemonSets that admit a Node with these labels and taints ask of it (``_running_on``)."""
    total = ZERO
    for daemonset in _running_on(labels, taints, daemonsets, varying):
        total += daemonset.requests
    return total


def daemonset_ports(labels: Mapping[str, str], taints: tuple, daemonsets: Iterable[PodView],
                    varying: Mapping[str, frozenset] | None = None) -> frozenset:
    """The host ports the DaemonSets that admit a Node with these labels and taints hold on it (``_running_on``)."""
    return frozenset(p for daemonset in _running_on(labels, taints, daemonsets, varying)
                     for p in daemonset.host_ports)


def schedule(pods: Sequence[PodView], pools: Sequence[PoolView], slots: Sequence[Slot],
             catalog: Sequence[InstanceOption], daemonsets: Sequence[PodView] = (), *,
             residents: Residents | None = None, group_identical: bool = True, index_residents: bool = True) -> Result:
    """Place ``pods`` on ``slots`` or on new claims of ``pools``.

    ``residents``: the index of the pods on ``slots`` (``residents_of``), or of a wider set of Slots for
    calls that each leave some out; built here when None. ``group_identical`` False places every pod alone,
    ``index_residents`` False counts every pod of every Slot for spread and anti-affinity (the same result,
    slower: tests compare them)."""
    if index_residents and residents is None:
        residents = residents_of(slots)
    return _Scheduler(pools, slots, catalog, daemonsets).run(pods, group_identical,
                                                             residents if index_residents else None)


def residents_of(slots: Iterable[Slot]) -> Residents:
    """The index of the pods bound to ``slots``."""
    return Residents.of((slot.name, slot.pods) for slot in slots)
