"""Properties of placement over random arrivals across rounds, where each round's new claims are the next
round's in-flight Machines and the pods it placed on Nodes are bound there:

1. no claim is made for a pod that fits existing or in-flight room at its turn;
2. a round repeated with nothing new makes no claim, and places the pods as before;
3. the claims of a round never take a pool past its limits, whichever of their types launches;
4. every pending pod is placed once, on a Slot or one claim, or reported unschedulable;

and placing alike pods together decides as placing them one by one, counting the pods on the Slots
through the index (hooks.provisioning.residents) decides as counting every one of them, and the placement
shared between the pools' rounds (hooks.provisioning.placements) is the one computed afresh.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hooks import machine_names, provisioning_names as names
from hooks.provisioning import placements, pods, requirements, resources, scheduling
from hooks.provisioning.scheduling import Limits, PoolView, Slot
from tests.support.provisioning import ZONES, daemonset, options, raw_pod, taint

CATALOG = options(spot={("m5.large", ZONES[0]): 0.03, ("c5.xlarge", ZONES[1]): 0.05})
BY_NAME = {o.name: o for o in CATALOG}
APPS = ("a", "b", "c", "d")
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def app_profiles(draw, topology: bool) -> dict:
    profiles = {}
    for app in APPS:
        spec: dict = {}
        if draw(st.booleans()):
            spec["nodeSelector"] = {names.ZONE_LABEL: draw(st.sampled_from(ZONES))}
        if draw(st.integers(0, 3)) == 0:
            spec.setdefault("nodeSelector", {})["team"] = "data"
        if draw(st.booleans()):
            spec["tolerations"] = [{"key": "dedicated", "operator": "Exists"}]
        if topology:
            selector = {"matchLabels": {"app": app}}
            kind = draw(st.sampled_from(("none", "zone", "anti", "host", "prefer")))
            if kind == "zone":
                spec["topologySpreadConstraints"] = [{"maxSkew": 1, "topologyKey": names.ZONE_LABEL,
                                                      "whenUnsatisfiable": "DoNotSchedule", "labelSelector": selector}]
            elif kind == "anti":
                spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": names.HOSTNAME_LABEL, "labelSelector": selector}]}}
            elif kind == "host":
                spec["topologySpreadConstraints"] = [{"maxSkew": 2, "topologyKey": names.HOSTNAME_LABEL,
                                                      "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": selector}]
            elif kind == "prefer":
                spec["affinity"] = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 5, "preference": {"matchExpressions": [
                        {"key": names.ZONE_LABEL, "operator": "In", "values": [draw(st.sampled_from(ZONES))]}]}}]}}
        profiles[app] = (draw(st.sampled_from(("100m", "400m", "900m", "1500m", "2500m"))),
                         draw(st.sampled_from(("128Mi", "1Gi", "3Gi", "6Gi"))), spec)
    return profiles


@st.composite
def pool_views(draw) -> list[PoolView]:
    found = []
    for index in range(draw(st.integers(1, 2))):
        tainted = draw(st.integers(0, 3)) == 0
        zone_rule = draw(st.sampled_from((None, (ZONES[0],), ZONES)))
        found.append(PoolView(
            name=f"p{index}", weight=draw(st.integers(0, 2)),
            requirements=requirements.of([(names.ZONE_LABEL, "In", zone_rule)] if zone_rule else []),
            taints=(taint("dedicated", "x"),) if tainted else (),
            labels={"team": "data"} if draw(st.integers(0, 2)) == 0 else {},
            limits=Limits(cpu=draw(st.sampled_from((None, 4000, 12000, 30000))),
                          memory=draw(st.sampled_from((None, 16 << 30, 64 << 30))),
                          machines=draw(st.sampled_from((None, None, 1, 3, 6)))),
            capacity_type=draw(st.sampled_from(("on-demand", "on-demand", "spot")))))
    return found


@st.composite
def residents(draw, topology: bool) -> list[pods.Resident]:
    """Pods already running on a Node: of the apps or not, in the pods' namespace or another; with topology,
    some keep an app away (required anti-affinity)."""
    found = []
    for _ in range(draw(st.integers(0, 4))):
        namespace = draw(st.sampled_from(("default", "default", "team")))
        labels = {"app": draw(st.sampled_from(APPS + ("other",)))}
        if draw(st.booleans()):
            labels["tier"] = "web"
        anti = ()
        if topology and draw(st.integers(0, 3)) == 0:
            selector = requirements.from_label_selector({"matchLabels": {"app": draw(st.sampled_from(APPS))}}, "s")
            anti = (pods.PodSelector(selector, draw(st.sampled_from((None, frozenset(("default",)))))),)
        found.append(pods.Resident(namespace, labels, anti))
    return found


@st.composite
def worlds(draw, topology: bool = False) -> dict:
    pools = draw(pool_views())
    nodes = []
    for index in range(draw(st.integers(0, 2))):
        pool = draw(st.sampled_from(pools))
        cpu, memory = draw(st.sampled_from(((1930, 7 << 30), (3920, 15 << 30))))
        nodes.append({"name": f"node-{index}", "pool": pool, "zone": draw(st.sampled_from(ZONES)),
                      "allocatable": resources.Resources(cpu=cpu, memory=memory, pods=58),
                      "requested": resources.Resources(cpu=draw(st.integers(0, cpu)), memory=draw(st.integers(0, memory))),
                      "residents": draw(residents(topology))})
    rounds = [[(draw(st.sampled_from(APPS)), draw(st.integers(1, 4))) for _ in range(draw(st.integers(0, 3)))]
              for _ in range(draw(st.integers(1, 3)))]
    return {"pools": pools, "nodes": nodes, "profiles": draw(app_profiles(topology)), "rounds": rounds,
            "daemonsets": [daemonset("agent", "50m", "64Mi")] if draw(st.booleans()) else []}


@dataclass
class Machine:
    """A claim made in an earlier round, now in flight."""

    name: str
    claim: scheduling.NewClaim
    pool: PoolView
    bound: list = field(default_factory=list)


class Cluster:
    def __init__(self, world: dict):
        self.world = world
        self.pending: dict[str, dict] = {}
        self.machines: list[Machine] = []
        self.arrived = 0

    def arrive(self, arrivals: list) -> None:
        for app, count in arrivals:
            cpu, memory, spec = self.world["profiles"][app]
            for _ in range(count):
                name = f"{app}-{self.arrived}"
                self.arrived += 1
                self.pending[f"default/{name}"] = raw_pod(name, cpu, memory, labels={"app": app}, **spec)

    def pools(self) -> list[PoolView]:
        found = []
        for pool in self.world["pools"]:
            cpu = memory = machines = 0
            for node in self.world["nodes"]:
                if node["pool"] is pool:
                    cpu, memory, machines = cpu + node["allocatable"].cpu, memory + node["allocatable"].memory, machines + 1
            for machine in self.machines:
                if machine.pool is pool:
                    cpu, memory = cpu + machine.claim.capacity.cpu, memory + machine.claim.capacity.memory
                    machines += 1
            found.append(PoolView(pool.name, pool.weight, pool.requirements, pool.taints, pool.labels, pool.limits,
                                  Limits(cpu, memory, machines), pool.capacity_type, pool.zones))
        return found

    def slots(self) -> list[Slot]:
        found = []
        for node in self.world["nodes"]:
            pool = node["pool"]
            labels = {**pool.labels, machine_names.POOL_LABEL: pool.name, names.ZONE_LABEL: node["zone"],
                      names.HOSTNAME_LABEL: node["name"], names.CAPACITY_TYPE_LABEL: pool.capacity_type}
            found.append(Slot(node["name"], pool.name, labels, pool.taints, node["allocatable"], node["requested"],
                              tuple(node["residents"])))
        for machine in self.machines:
            claim, pool = machine.claim, machine.pool
            labels = {**pool.labels, machine_names.POOL_LABEL: pool.name, names.CAPACITY_TYPE_LABEL: claim.capacity_type}
            if claim.zone:
                labels[names.ZONE_LABEL] = claim.zone
            allocatable = BY_NAME[claim.instance_types[0]].allocatable
            for name in claim.instance_types[1:]:
                allocatable = allocatable.minimum(BY_NAME[name].allocatable)
            requested = scheduling.daemonset_overhead(labels, pool.taints, self.world["daemonsets"])
            found.append(Slot(machine.name, pool.name, labels, pool.taints, allocatable, requested,
                              machine=machine.name, in_flight=True, provisioned_for=claim.pods))
        return found

    def inputs(self) -> tuple:
        """What a round places from, as a call builds it from its own readings (new objects every time)."""
        return [pods.view(p) for p in self.pending.values()], self.pools(), self.slots(), CATALOG, \
            self.world["daemonsets"]

    def decide(self, group: bool = True, index: bool = True) -> tuple[list[pods.PodView], scheduling.Result]:
        views, *rest = self.inputs()
        return views, scheduling.schedule(views, *rest, group_identical=group, index_residents=index)

    def settle(self, views: list[pods.PodView], result: scheduling.Result) -> None:
        """Pods placed on Nodes bind there; the claims become in-flight Machines."""
        by_key = {v.key: v for v in views}
        nodes = {n["name"]: n for n in self.world["nodes"]}
        for key, slot in result.placed.items():
            if slot in nodes:
                node = nodes[slot]
                node["requested"] = node["requested"] + by_key[key].requests
                node["residents"].append(pods.Resident(by_key[key].namespace, by_key[key].labels,
                                                       by_key[key].anti_affinity))
                del self.pending[key]
        pools = {p.name: p for p in self.world["pools"]}
        for claim in result.claims:
            self.machines.append(Machine(f"machine-{len(self.machines)}", claim, pools[claim.pool]))


def _fits_somewhere(view: pods.PodView, slots: list[Slot], free: dict[str, resources.Resources]) -> str | None:
    for slot in slots:
        if (view.requests.fits(free[slot.name]) and pods.tolerates(view.tolerations, slot.taints)
                and any(alt.allows(slot.labels) for alt in view.alternatives)):
            return slot.name
    return None


def _check_round(cluster: Cluster, views: list[pods.PodView], result: scheduling.Result, topology: bool) -> None:
    # 4. every pod once.
    on_claims = [key for claim in result.claims for key in claim.pods]
    assert len(on_claims) == len(set(on_claims))
    everywhere = list(result.placed) + on_claims + list(result.unschedulable)
    assert sorted(everywhere) == sorted(v.key for v in views)
    # 3. limits, counting for each claim the largest of its types.
    for pool in cluster.pools():
        mine = [c for c in result.claims if c.pool == pool.name]
        for claim in mine:
            assert claim.instance_types and len(claim.instance_types) <= scheduling.MAX_INSTANCE_TYPES
            assert claim.capacity.cpu >= max(BY_NAME[t].capacity.cpu for t in claim.instance_types)
            assert claim.capacity.memory >= max(BY_NAME[t].capacity.memory for t in claim.instance_types)
        if mine and pool.limits.cpu is not None:
            assert pool.used.cpu + sum(c.capacity.cpu for c in mine) <= pool.limits.cpu
        if mine and pool.limits.memory is not None:
            assert pool.used.memory + sum(c.capacity.memory for c in mine) <= pool.limits.memory
        if mine and pool.limits.machines is not None:
            assert pool.used.machines + len(mine) <= pool.limits.machines
    # Every claim's pods (and the DaemonSets) fit each of its types.
    taints = {p.name: p.taints for p in cluster.world["pools"]}
    for claim in result.claims:
        for name in claim.instance_types:
            overhead = scheduling.daemonset_overhead(BY_NAME[name].labels, taints[claim.pool],
                                                     cluster.world["daemonsets"])
            assert (claim.requests + overhead).fits(BY_NAME[name].allocatable)
    # 1. no claim for a pod that fits a Slot at its turn (without spread, anti-affinity or preferences, where
    # "fits" is requests, labels and taints alone), the room a Machine in flight holds for the pending pods it
    # was made for and not placed yet not counting for others.
    if not topology:
        slots = cluster.slots()
        free = {s.name: s.allocatable - s.requested for s in slots}
        by_key = {v.key: v for v in views}
        supported = [v for v in views if v.unsupported is None]
        made_for = {key: slot.name for slot in slots for key in slot.provisioned_for if key in by_key}
        held = {s.name: resources.ZERO for s in slots}
        for view in supported:
            if view.key in made_for:
                held[made_for[view.key]] += view.requests
        claimed = set(on_claims)
        for view in scheduling.placement_order(supported):
            own = made_for.get(view.key)
            if own is not None:
                held[own] -= view.requests  # its turn: its room is its own, then no one's to hold
            if view.key in claimed:
                assert _fits_somewhere(view, slots, {n: free[n] - held[n] for n in free}) is None, view.key
            elif view.key in result.placed:
                free[result.placed[view.key]] -= by_key[view.key].requests


def _run(world: dict, topology: bool) -> None:
    cluster = Cluster(world)
    shared = placements.Placements()
    for arrivals in world["rounds"]:
        cluster.arrive(arrivals)
        views, result = cluster.decide()
        _check_round(cluster, views, result, topology)
        assert result == cluster.decide(group=False)[1]
        assert result == cluster.decide(index=False)[1]
        # The placement the pools share, computed for the first and answered to the next, is the one afresh.
        assert shared.schedule(*cluster.inputs()) == result
        assert shared.schedule(*cluster.inputs()) == result
        cluster.settle(views, result)
        # 2. the same round again, with nothing new.
        again_views, again = cluster.decide()
        assert shared.schedule(*cluster.inputs()) == again
        _check_round(cluster, again_views, again, topology)
        assert again.claims == []
        for machine in cluster.machines[len(cluster.machines) - len(result.claims):]:
            assert {k for k, slot in again.placed.items() if slot == machine.name} == set(machine.claim.pods)


@SETTINGS
@given(worlds())
def test_rounds_of_arrivals(world):
    _run(world, topology=False)


@SETTINGS
@given(worlds(topology=True))
def test_rounds_of_arrivals_with_spread_anti_affinity_and_preferences(world):
    _run(world, topology=True)


@st.composite
def selectors_and_pods(draw) -> tuple[list[pods.PodSelector], list[tuple[str, dict]]]:
    values = st.sampled_from(("a", "b", "c"))
    keys = st.sampled_from(("app", "tier", "team"))
    selectors = []
    for _ in range(draw(st.integers(0, 6))):
        expressions = [{"key": draw(keys), "operator": draw(st.sampled_from(("In", "NotIn", "Exists", "DoesNotExist"))),
                        "values": draw(st.lists(values, min_size=1, max_size=2, unique=True))}
                       for _ in range(draw(st.integers(0, 2)))]
        for expression in expressions:
            if expression["operator"] in ("Exists", "DoesNotExist"):
                expression["values"] = []
        selector = requirements.from_label_selector(
            {"matchLabels": draw(st.dictionaries(keys, values, max_size=2)), "matchExpressions": expressions}, "s")
        selectors.append(pods.PodSelector(selector, draw(st.sampled_from((None, frozenset(("default",)))))))
    labelled = draw(st.lists(st.tuples(st.sampled_from(("default", "team")), st.dictionaries(keys, values, max_size=3)),
                             max_size=6))
    return selectors, labelled


@SETTINGS
@given(selectors_and_pods())
def test_the_selector_index_matches_as_every_selector_does(drawn):
    selectors, labelled = drawn
    index = scheduling._SelectorIndex(selectors)
    for namespace, labels in labelled:
        assert index.matching(namespace, labels) == frozenset(s for s in selectors if s.matches(namespace, labels))
