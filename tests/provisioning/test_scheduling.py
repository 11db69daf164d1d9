"""Placing pending pods: existing Nodes, in-flight Machines, claims planned this round, new claims."""
from __future__ import annotations

import pytest

from hooks import provisioning_names as names
from hooks.provisioning import pods, requirements, resources, scheduling
from hooks.provisioning.scheduling import Limits, schedule
from tests.support.provisioning import (ZONES, daemonset, node_slot, options, placements, pod, pool, taint)

CATALOG = options()
GIB = 1 << 30


def _types(claim: scheduling.NewClaim) -> set[str]:
    return set(claim.instance_types)


def _web(name: str, **spec) -> pods.PodView:
    return pod(name, "500m", "512Mi", labels={"app": "web"}, **spec)


# --- where a pod goes


def test_an_existing_node_with_room_takes_the_pod():
    result = schedule([pod("a-1")], [pool()], [node_slot("n1")], CATALOG)
    assert result.placed == {"default/a-1": "n1"} and result.claims == []


def test_existing_nodes_before_in_flight_machines():
    slots = [node_slot("coming", in_flight=True), node_slot("there")]
    assert schedule([pod("a-1")], [pool()], slots, CATALOG).placed == {"default/a-1": "there"}


def test_a_machine_made_for_the_pod_is_tried_first():
    slots = [node_slot("there"), node_slot("m1", in_flight=True), node_slot("m2", in_flight=True,
                                                                           provisioned_for=("default/a-2",))]
    result = schedule([pod("a-1"), pod("a-2")], [pool()], slots, CATALOG)
    assert result.placed == {"default/a-1": "there", "default/a-2": "m2"}


def test_a_full_node_sends_the_pod_to_a_new_claim():
    full = node_slot("n1", requested={"cpu": "1900m"})
    result = schedule([pod("a-1")], [pool()], [full], CATALOG)
    assert result.placed == {} and [c.pods for c in result.claims] == [("default/a-1",)]


def test_pods_share_a_claim_planned_this_round():
    result = schedule([pod(f"a-{i}") for i in range(3)], [pool()], [], CATALOG)
    assert len(result.claims) == 1
    claim = result.claims[0]
    assert set(claim.pods) == {"default/a-0", "default/a-1", "default/a-2"}
    assert claim.requests == resources.parse({"cpu": "1500m", "memory": "1536Mi", "pods": "3"})
    assert (claim.pool, claim.zone, claim.capacity_type) == ("general", None, "on-demand")


def test_larger_pods_are_placed_first():
    # The Node fits either pod, not both: the larger gets it although it comes second.
    result = schedule([pod("small-1", "500m"), pod("big-1", "1500m")], [pool()], [node_slot("n1", cpu="1900m")],
                      CATALOG)
    assert result.placed == {"default/big-1": "n1"}
    assert result.claims[0].pods == ("default/small-1",)


def test_a_claim_grows_onto_larger_types_while_one_fits():
    result = schedule([pod(f"a-{i}", "1500m", "1Gi") for i in range(4)], [pool()], [], CATALOG)
    assert [len(c.pods) for c in result.claims] == [4]
    assert _types(result.claims[0]) == {"m5.2xlarge"}


# --- instance types


def test_instance_types_cheapest_first():
    claim = schedule([pod("a-1", "100m", "1Gi")], [pool()], [], CATALOG).claims[0]
    assert claim.instance_types == ("c5.large", "m5.large", "r5.large", "c5.xlarge", "m5.xlarge", "m5.2xlarge")


def test_only_types_that_fit_the_pods():
    claim = schedule([pod("a-1", "100m", "6Gi")], [pool()], [], CATALOG).claims[0]
    assert claim.instance_types == ("m5.large", "r5.large", "c5.xlarge", "m5.xlarge", "m5.2xlarge")


def test_at_most_twenty_types_kept():
    many = {f"t{i:02d}.large": (2, 8, 0.1 + i / 100) for i in range(25)}
    claim = schedule([pod("a-1")], [pool()], [], options(many)).claims[0]
    assert claim.instance_types == tuple(f"t{i:02d}.large" for i in range(20))


def test_a_type_without_a_price_is_ranked_last():
    types = {"cheap.large": (2, 8, 0.05), "unpriced.large": (2, 8, None), "dear.large": (2, 8, 0.5)}
    claim = schedule([pod("a-1")], [pool()], [], options(types)).claims[0]
    assert claim.instance_types == ("cheap.large", "dear.large", "unpriced.large")


def test_spot_when_the_pool_allows_it_and_a_spot_price_is_known():
    spot_pool = pool(requirements=requirements.of([(names.CAPACITY_TYPE_LABEL, "In", ("spot", "on-demand"))]))
    catalog = options(spot={("m5.large", ZONES[0]): 0.04, ("m5.xlarge", ZONES[1]): 0.03})
    claim = schedule([pod("a-1")], [spot_pool], [], catalog).claims[0]
    assert claim.capacity_type == "spot"
    assert claim.instance_types == ("m5.xlarge", "m5.large")
    on_demand = schedule([pod("a-1")], [pool()], [], catalog).claims[0]
    assert on_demand.capacity_type == "on-demand" and len(on_demand.instance_types) == 6


def test_a_pod_asking_for_spot_from_an_on_demand_pool_is_unschedulable():
    result = schedule([pod("a-1", nodeSelector={names.CAPACITY_TYPE_LABEL: "spot"})], [pool()], [], CATALOG)
    assert result.unschedulable == {
        "default/a-1": f"{names.CAPACITY_TYPE_LABEL} In [spot] not met; pools tried: general"}


@pytest.mark.parametrize("requirement, expected", [
    ((names.INSTANCE_TYPE_LABEL, "In", ("m5.xlarge", "c5.large")), {"m5.xlarge", "c5.large"}),
    ((names.INSTANCE_FAMILY_LABEL, "NotIn", ("m5",)), {"c5.large", "c5.xlarge", "r5.large"}),
    ((names.INSTANCE_CPU_LABEL, "Gt", ("2",)), {"m5.xlarge", "m5.2xlarge", "c5.xlarge"}),
    ((names.INSTANCE_MEMORY_LABEL, "Lt", ("8192",)), {"c5.large"}),
    ((names.INSTANCE_GPU_COUNT_LABEL, "DoesNotExist", ()), set()),
    ((names.ARCH_LABEL, "Exists", ()), {o.name for o in CATALOG}),
])
def test_every_operator_on_a_pool_requirement(requirement, expected):
    result = schedule([pod("a-1", "100m", "1Gi")], [pool(requirements=requirements.of([requirement]))], [], CATALOG)
    assert {t for c in result.claims for t in c.instance_types} == expected
    assert bool(result.unschedulable) == (not expected)


def test_pod_and_pool_requirements_combine():
    general = pool(requirements=requirements.of([(names.INSTANCE_FAMILY_LABEL, "In", ("m5", "c5"))]))
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": names.INSTANCE_CPU_LABEL, "operator": "Lt", "values": ["8"]},
                              {"key": names.INSTANCE_SIZE_LABEL, "operator": "NotIn", "values": ["large"]}]}]}}}
    claim = schedule([pod("a-1", affinity=affinity)], [general], [], CATALOG).claims[0]
    assert _types(claim) == {"m5.xlarge", "c5.xlarge"}


def test_a_pod_naming_a_template_label_goes_to_that_pool():
    pools = [pool("gpu", weight=50), pool("general-purpose", labels={"team": "data"})]
    claim = schedule([pod("a-1", nodeSelector={"team": "data"})], pools, [], CATALOG).claims[0]
    assert claim.pool == "general-purpose"
    named = schedule([pod("a-1", nodeSelector={"nodewarden.io/nodepool": "general-purpose"})], pools, [], CATALOG)
    assert named.claims[0].pool == "general-purpose"


def test_a_label_no_node_will_have():
    result = schedule([pod("a-1", nodeSelector={"team": "data"})], [pool("a"), pool("b")], [], CATALOG)
    assert result.unschedulable == {"default/a-1": "team In [data] not met; pools tried: a, b"}


def test_a_pod_naming_a_node_cannot_go_on_a_new_one():
    result = schedule([pod("a-1", nodeSelector={names.HOSTNAME_LABEL: "n9"})], [pool()], [], CATALOG)
    assert "default/a-1" in result.unschedulable
    away = schedule([pod("a-1", affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]}]}}})],
        [pool()], [node_slot("n1")], CATALOG)
    assert away.placed == {} and len(away.claims) == 1


def test_ored_terms_the_first_a_pool_meets():
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": names.INSTANCE_FAMILY_LABEL, "operator": "In", "values": ["x9"]}]},
        {"matchExpressions": [{"key": names.INSTANCE_FAMILY_LABEL, "operator": "In", "values": ["r5"]}]}]}}}
    assert schedule([pod("a-1", affinity=affinity)], [pool()], [], CATALOG).claims[0].instance_types == ("r5.large",)


# --- pools: weight, taints, limits


def test_the_heaviest_pool_then_by_name():
    pools = [pool("b"), pool("a"), pool("c", weight=5)]
    assert schedule([pod("a-1")], pools, [], CATALOG).claims[0].pool == "c"
    assert schedule([pod("a-1")], pools[:2], [], CATALOG).claims[0].pool == "a"


def test_taints_keep_pods_without_a_toleration_off():
    pools = [pool("batch", weight=10, taints=(taint("batch", "true"),)), pool("general")]
    tolerating = pod("job-1", tolerations=[{"key": "batch", "operator": "Equal", "value": "true",
                                            "effect": "NoSchedule"}])
    result = schedule([pod("web-1"), tolerating], pools, [], CATALOG)
    assert {c.pool: c.pods for c in result.claims} == {"batch": ("default/job-1",), "general": ("default/web-1",)}
    only_tainted = schedule([pod("web-1")], pools[:1], [], CATALOG)
    assert only_tainted.unschedulable == {"default/web-1": "taint batch=true:NoSchedule not tolerated; "
                                                           "pools tried: batch"}


def test_a_tainted_node_takes_only_pods_that_tolerate_it():
    tainted = node_slot("n1", taints=(taint("dedicated", "db", "NoExecute"), taint("soft", effect="PreferNoSchedule")))
    assert schedule([pod("a-1")], [pool()], [tainted], CATALOG).placed == {}
    any_taint = pod("a-1", tolerations=[{"operator": "Exists"}])
    assert schedule([any_taint], [pool()], [tainted], CATALOG).placed == {"default/a-1": "n1"}
    by_key = pod("a-1", tolerations=[{"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}])
    assert schedule([by_key], [pool()], [tainted], CATALOG).placed == {"default/a-1": "n1"}


def test_cpu_limit_counts_the_largest_type_a_claim_keeps():
    limited = pool(limits=Limits(cpu=4000))
    result = schedule([pod(f"a-{i}", "1500m", "1Gi") for i in range(3)], [limited], [], CATALOG)
    # The claim keeps only types of at most 4 vCPUs, so it takes two pods; the third would need another.
    assert [len(c.pods) for c in result.claims] == [2]
    assert sum(c.capacity.cpu for c in result.claims) <= 4000
    assert all(t.endswith(("large", ".xlarge")) and "2x" not in t for t in result.claims[0].instance_types)
    assert result.unschedulable == {"default/a-2": "the pool's limits leave room for no instance type that fits; "
                                                   "pools tried: general"}


def test_limits_count_what_the_pool_already_runs():
    used = pool(limits=Limits(cpu=8000, memory=64 * GIB), used=Limits(cpu=6000, memory=8 * GIB, machines=2))
    claim = schedule([pod("a-1")], [used], [], CATALOG).claims[0]
    assert claim.capacity.cpu <= 2000
    assert _types(claim) == {"c5.large", "m5.large", "r5.large"}


def test_machine_limit():
    one = pool(limits=Limits(machines=3), used=Limits(cpu=0, memory=0, machines=2))
    result = schedule([pod("a-1", "1500m"), pod("b-1", "1500m", "5Gi")], [one, pool("other")], [],
                      options({"m5.large": (2, 8, 0.1)}))
    assert [c.pool for c in result.claims] == ["general", "other"]
    alone = schedule([pod("a-1", "1500m"), pod("b-1", "1500m")], [one], [], options({"m5.large": (2, 8, 0.1)}))
    assert alone.unschedulable == {"default/b-1": "limit of 3 machines reached; pools tried: general"}


def test_a_pod_no_type_fits():
    result = schedule([pod("huge-1", "64", "1Gi")], [pool("a"), pool("b")], [], CATALOG)
    assert result.unschedulable == {
        "default/huge-1": "no instance type fits cpu 64, memory 1Gi (with DaemonSets); pools tried: a, b"}


def test_no_pool():
    assert schedule([pod("a-1")], [], [], CATALOG).unschedulable == {"default/a-1": "no provisioning NodePool"}


def test_the_pool_zones_bound_its_claims():
    three = options(zones=ZONES + ("us-east-1c",))
    two = pool(zones=frozenset(ZONES))
    assert schedule([pod("a-1")], [two], [], three).claims[0].zone is None  # any of the pool's zones
    one = pool(zones=frozenset({ZONES[1]}))
    assert schedule([pod("a-1")], [one], [], three).claims[0].zone == ZONES[1]
    elsewhere = schedule([pod("a-1", nodeSelector={names.ZONE_LABEL: ZONES[0]})], [one], [], three)
    assert "default/a-1" in elsewhere.unschedulable


def test_a_zone_requirement_pins_the_claim():
    claim = schedule([pod("a-1", nodeSelector={names.ZONE_LABEL: ZONES[1]})], [pool()], [], CATALOG).claims[0]
    assert claim.zone == ZONES[1]
    three = options(zones=ZONES + ("us-east-1c",), spot=None)
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": names.ZONE_LABEL, "operator": "NotIn", "values": ["us-east-1c"]}]}]}}}
    # Two of the pool's three zones: the claim launches in one of them.
    assert schedule([pod("a-1", affinity=affinity)], [pool()], [], three).claims[0].zone in ZONES


# --- topology


def _zone_spread(skew: int = 1, when: str = "DoNotSchedule") -> list[dict]:
    return [{"maxSkew": skew, "topologyKey": names.ZONE_LABEL, "whenUnsatisfiable": when,
             "labelSelector": {"matchLabels": {"app": "web"}}}]


def test_zone_spread_over_two_zones():
    result = schedule([_web(f"web-{i}", topologySpreadConstraints=_zone_spread()) for i in range(4)], [pool()], [],
                      CATALOG)
    assert sorted((c.zone, len(c.pods)) for c in result.claims) == [(ZONES[0], 2), (ZONES[1], 2)]


def test_zone_spread_counts_pods_already_running():
    running = node_slot("n1", cpu="8", memory="32Gi", zone=ZONES[0],
                        residents=(pods.Resident("default", {"app": "web"}),) * 2)
    result = schedule([_web(f"web-{i}", topologySpreadConstraints=_zone_spread()) for i in range(3)], [pool()],
                      [running], CATALOG)
    assert list(result.placed.values()) == ["n1"]  # the third, once zone b has caught up
    assert [(c.zone, len(c.pods)) for c in result.claims] == [(ZONES[1], 2)]


def test_zone_spread_may_go_only_where_the_pod_may():
    # Only one zone is eligible for the pod, so skew is measured there alone.
    spread = _web("web-1", topologySpreadConstraints=_zone_spread(), nodeSelector={names.ZONE_LABEL: ZONES[0]})
    running = node_slot("n1", zone=ZONES[1], residents=(pods.Resident("default", {"app": "web"}),) * 3)
    result = schedule([spread], [pool()], [running], CATALOG)
    assert [c.zone for c in result.claims] == [ZONES[0]]


def test_anti_affinity_one_per_node():
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": names.HOSTNAME_LABEL, "labelSelector": {"matchLabels": {"app": "web"}}}]}}
    result = schedule([_web(f"web-{i}", affinity=anti) for i in range(3)], [pool()],
                      [node_slot("n1", cpu="8", memory="32Gi")], CATALOG)
    assert len(result.placed) == 1
    assert [len(c.pods) for c in result.claims] == [1, 1]


def test_anti_affinity_of_a_running_pod_keeps_others_away():
    guard = pods.resident({"metadata": {"name": "db-0", "namespace": "default", "labels": {"app": "db"}},
                           "spec": {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                               {"topologyKey": names.HOSTNAME_LABEL, "labelSelector": {"matchLabels": {"app": "web"}}}]}}}})
    result = schedule([_web("web-1"), pod("api-1")], [pool()], [node_slot("n1", cpu="8", memory="32Gi",
                                                                          residents=(guard,))], CATALOG)
    assert result.placed == {"default/api-1": "n1"}
    assert result.claims[0].pods == ("default/web-1",)


def test_hostname_spread_at_most_max_skew_per_node():
    spread = [{"maxSkew": 2, "topologyKey": names.HOSTNAME_LABEL, "whenUnsatisfiable": "DoNotSchedule",
               "labelSelector": {"matchLabels": {"app": "web"}}}]
    result = schedule([_web(f"web-{i}", topologySpreadConstraints=spread) for i in range(5)], [pool()], [], CATALOG)
    assert [len(c.pods) for c in result.claims] == [2, 2, 1]


# --- host ports


def _serving(port: int, protocol: str = "TCP", host_ip: str | None = None, **container) -> dict:
    entry = {"containerPort": 8080, "hostPort": port, "protocol": protocol, **container}
    if host_ip is not None:
        entry["hostIP"] = host_ip
    return {"name": "main", "ports": [entry], "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}}}


def _holding(*containers: dict, **spec) -> pods.Resident:
    return pods.resident({"metadata": {"name": "holder", "namespace": "default", "labels": {"app": "holder"}},
                          "spec": {"containers": list(containers), **spec}})


def test_a_pod_goes_only_where_its_host_ports_are_free():
    node = node_slot("n1", cpu="8", memory="32Gi", residents=(_holding(_serving(8080)),))
    result = schedule([pod("web-1", containers=[_serving(8080)])], [pool()], [node], CATALOG)
    assert result.placed == {} and [c.pods for c in result.claims] == [("default/web-1",)]
    # Another protocol, or another port, is free there.
    for other in (_serving(8080, "UDP"), _serving(8081)):
        assert schedule([pod("web-1", containers=[other])], [pool()], [node], CATALOG).placed == {"default/web-1": "n1"}


def test_host_ports_on_one_address_conflict_with_the_same_address_or_every_address():
    on_a = node_slot("n1", cpu="8", memory="32Gi", residents=(_holding(_serving(53, "UDP", "10.0.0.1")),))
    elsewhere = pod("dns-1", containers=[_serving(53, "UDP", "10.0.0.2")])
    same = pod("dns-2", containers=[_serving(53, "UDP", "10.0.0.1")])
    everywhere = pod("dns-3", containers=[_serving(53, "UDP")])
    assert schedule([elsewhere], [pool()], [on_a], CATALOG).placed == {"default/dns-1": "n1"}
    assert schedule([same], [pool()], [on_a], CATALOG).placed == {}
    assert schedule([everywhere], [pool()], [on_a], CATALOG).placed == {}
    on_every = node_slot("n1", cpu="8", memory="32Gi", residents=(_holding(_serving(53, "UDP", "0.0.0.0")),))
    assert schedule([elsewhere], [pool()], [on_every], CATALOG).placed == {}


def test_a_host_network_pods_container_ports_are_host_ports():
    exporter = {"name": "main", "ports": [{"containerPort": 9100}]}
    node = node_slot("n1", cpu="8", memory="32Gi", residents=(_holding(exporter, hostNetwork=True),))
    result = schedule([pod("scrape-1", containers=[_serving(9100)])], [pool()], [node], CATALOG)
    assert result.placed == {} and len(result.claims) == 1
    # Without hostNetwork a container port binds nothing on the Node.
    node = node_slot("n1", cpu="8", memory="32Gi", residents=(_holding(exporter),))
    assert schedule([pod("scrape-1", containers=[_serving(9100)])], [pool()], [node], CATALOG).placed


@pytest.mark.parametrize("group", [True, False])
def test_pods_alike_with_a_host_port_take_one_per_node_and_per_claim(group):
    pair = [pod(f"proxy-{i}", labels={"app": "proxy"}, containers=[_serving(443)]) for i in range(3)]
    result = schedule(pair, [pool()], [node_slot("n1", cpu="8", memory="32Gi")], CATALOG, group_identical=group)
    assert list(result.placed.values()) == ["n1"]
    assert [len(c.pods) for c in result.claims] == [1, 1]


def test_a_daemonset_holding_the_port_on_every_new_node_leaves_the_pod_unplaced():
    agent = daemonset("agent", hostNetwork=True, containers=[{"name": "main", "ports": [{"containerPort": 9100}]}])
    result = schedule([pod("scrape-1", containers=[_serving(9100)])], [pool()], [], CATALOG, [agent])
    assert result.claims == []
    assert "host port 9100/TCP held by a DaemonSet on every instance type that fits" in \
        result.unschedulable["default/scrape-1"]
    # Where it would not run, its port is free.
    arm_only = daemonset("agent", hostNetwork=True, nodeSelector={names.ARCH_LABEL: "arm64"},
                         containers=[{"name": "main", "ports": [{"containerPort": 9100}]}])
    assert schedule([pod("scrape-1", containers=[_serving(9100)])], [pool()], [], CATALOG, [arm_only]).claims


def test_daemonset_ports_of_an_in_flight_machine():
    agent = daemonset("agent", hostNetwork=True, containers=[{"name": "main", "ports": [{"containerPort": 9100}]}])
    assert scheduling.daemonset_ports({names.ARCH_LABEL: "amd64"}, (), [agent]) == {pods.HostPort("0.0.0.0", "TCP", 9100)}
    assert scheduling.daemonset_ports({}, (taint("x"),), [agent]) == frozenset()


# --- volumes

EBS = "ebs.csi.aws.com"  # the AWS EBS CSI driver, as StorageClasses and PersistentVolumes name it


def _zone(zone: str) -> requirements.Requirements:
    return requirements.Requirements({names.ZONE_LABEL: requirements.Rule.of(names.IN, (zone,))})


def _with_volumes(view: pods.PodView, *claims: str, zone: str | None = None, driver: str = EBS) -> pods.PodView:
    return pods.with_volumes(view, (_zone(zone),) if zone else (), frozenset((driver, c) for c in claims), None)


def test_a_pod_goes_only_where_its_volume_is():
    there = node_slot("n1", cpu="8", memory="32Gi", zone=ZONES[0])
    result = schedule([_with_volumes(pod("db-0"), "default/data-0", zone=ZONES[1])], [pool()], [there], CATALOG)
    assert result.placed == {}
    assert [(c.zone, c.pods) for c in result.claims] == [(ZONES[1], ("default/db-0",))]
    assert schedule([_with_volumes(pod("db-0"), "default/data-0", zone=ZONES[0])], [pool()], [there],
                    CATALOG).placed == {"default/db-0": "n1"}


def test_a_zone_spread_counts_the_zones_the_pod_itself_may_use_not_its_volumes():
    spread = [{"maxSkew": 1, "topologyKey": names.ZONE_LABEL, "whenUnsatisfiable": "DoNotSchedule",
               "labelSelector": {"matchLabels": {"app": "db"}}}]
    running = node_slot("n1", cpu="8", memory="32Gi", zone=ZONES[1], residents=(pods.Resident("default", {"app": "db"}),))
    # Zone a has none of the pods yet: one more in zone b breaks the skew, so the pod waits.
    db = _with_volumes(pod("db-1", labels={"app": "db"}, topologySpreadConstraints=spread), "default/data-1",
                       zone=ZONES[1])
    result = schedule([db], [pool()], [running], CATALOG)
    assert result.placed == {} and result.claims == []
    assert "topology spread" in result.unschedulable["default/db-1"]


def test_volumes_that_contradict_the_pods_node_selector_leave_it_unplaced():
    db = _with_volumes(pod("db-0", nodeSelector={names.ZONE_LABEL: ZONES[0]}), "default/data-0", zone=ZONES[1])
    result = schedule([db], [pool()], [], CATALOG)
    assert result.claims == []
    assert result.unschedulable["default/db-0"] == \
        "its node selector and required node affinity allow no topology its volumes allow"


def test_a_node_attaches_no_more_volumes_than_its_limit():
    full = scheduling.Slot(**{**node_slot("n1", cpu="8", memory="32Gi").__dict__,
                              "attached": frozenset({(EBS, "default/a"), (EBS, "default/b")}),
                              "attach_limits": {EBS: 2}})
    result = schedule([_with_volumes(pod("db-0"), "default/c")], [pool()], [full], CATALOG)
    assert result.placed == {} and len(result.claims) == 1
    # A volume it holds already, or one of a driver without a limit, needs no more room.
    assert schedule([_with_volumes(pod("db-0"), "default/a")], [pool()], [full], CATALOG).placed
    assert schedule([_with_volumes(pod("db-0"), "default/c", driver="efs.csi.aws.com")], [pool()], [full],
                    CATALOG).placed


@pytest.mark.parametrize("group", [True, False])
def test_a_new_claim_takes_no_more_volumes_than_its_types_attach(group):
    few = options({"m5.xlarge": (4, 16, 0.192)})
    assert dict(few[0].volume_limits) == {EBS: 26}
    db = [_with_volumes(pod(f"db-{i}", "100m", "128Mi", labels={"app": "db"}), f"default/data-{i}") for i in range(30)]
    result = schedule(db, [pool()], [], few, group_identical=group)
    assert sorted(len(c.pods) for c in result.claims) == [4, 26]
    shared = [_with_volumes(pod(f"web-{i}", "100m", "128Mi", labels={"app": "web"}), "default/shared", driver=EBS)
              for i in range(30)]
    assert [len(c.pods) for c in schedule(shared, [pool()], [], few, group_identical=group).claims] == [30], \
        "one volume shared by every pod attaches once"


def test_a_pod_with_more_volumes_than_any_type_attaches_is_unplaced():
    many = _with_volumes(pod("db-0"), *(f"default/data-{i}" for i in range(30)))
    result = schedule([many], [pool()], [], CATALOG)
    assert result.claims == []
    assert "no instance type that fits attaches 30 volumes of ebs.csi.aws.com (at most 26)" in \
        result.unschedulable["default/db-0"]


def test_a_pod_kube_scheduler_runs_nowhere_is_unschedulable_with_its_reason():
    waiting = pods.with_volumes(pod("db-0"), (), frozenset(), "volume 'data': PersistentVolumeClaim data does not exist")
    result = schedule([waiting], [pool()], [node_slot("n1")], CATALOG)
    assert result.placed == {} and result.claims == []
    assert result.unschedulable == {"default/db-0": "volume 'data': PersistentVolumeClaim data does not exist"}


# --- DaemonSets


def test_daemonset_overhead_rules_out_types_too_small_for_both():
    hungry = daemonset("agent", cpu="1")
    claim = schedule([pod("a-1", "1")], [pool()], [], CATALOG, [hungry]).claims[0]
    assert _types(claim) == {"c5.xlarge", "m5.xlarge", "m5.2xlarge"}


def test_daemonsets_that_would_not_run_there_do_not_count():
    elsewhere = daemonset("arm-agent", cpu="1", nodeSelector={names.ARCH_LABEL: "arm64"})
    intolerant = daemonset("plain", cpu="1")
    tainted = pool(taints=(taint("batch", "true"),))
    tolerating = pod("a-1", "1", tolerations=[{"key": "batch", "operator": "Exists"}])
    assert len(schedule([pod("a-1", "1")], [pool()], [], CATALOG, [elsewhere]).claims[0].instance_types) == 6
    assert len(schedule([tolerating], [tainted], [], CATALOG, [intolerant]).claims[0].instance_types) == 6


def test_daemonset_overhead_for_an_in_flight_machine():
    labels = {names.ARCH_LABEL: "amd64"}
    daemonsets = [daemonset("a", "100m", "1Mi"), daemonset("arm", "1", nodeSelector={names.ARCH_LABEL: "arm64"}),
                  daemonset("t", "200m", "1Mi", tolerations=[{"operator": "Exists"}])]
    assert scheduling.daemonset_overhead(labels, (), daemonsets) == resources.parse(
        {"cpu": "300m", "memory": "2Mi", "pods": "2"})
    assert scheduling.daemonset_overhead(labels, (taint("x"),), daemonsets) == resources.parse(
        {"cpu": "200m", "memory": "1Mi", "pods": "1"})


# --- what cannot be placed, and preferences


def test_an_unsupported_pod_is_reported_with_why():
    odd = pod("a-1", affinity={"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": names.ZONE_LABEL, "labelSelector": {}}]}})
    result = schedule([odd], [pool()], [node_slot("n1")], CATALOG)
    assert result.placed == {} and result.claims == []
    assert result.unschedulable == {"default/a-1": "not supported: spec.affinity.podAffinity: required pod affinity "
                                                   "is not supported"}


def test_contradicting_constraints():
    odd = pod("a-1", nodeSelector={"disk": "ssd"}, affinity={"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "disk", "operator": "DoesNotExist"}]}]}}})
    assert schedule([odd], [pool()], [], CATALOG).unschedulable == {
        "default/a-1": "its node selector and required node-affinity terms cannot all be met"}


def _prefer_zone(zone: str) -> dict:
    return {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 10, "preference": {"matchExpressions": [{"key": names.ZONE_LABEL, "operator": "In", "values": ["x"]}]}},
        {"weight": 80, "preference": {"matchExpressions": [{"key": names.ZONE_LABEL, "operator": "In", "values": [zone]}]}},
    ]}}


def test_a_preferred_zone_is_held_when_it_can_be():
    result = schedule([pod("a-1", affinity=_prefer_zone(ZONES[1]))], [pool()], [node_slot("n1", zone=ZONES[0])],
                      CATALOG)
    assert result.placed == {} and result.claims[0].zone == ZONES[1]


def test_a_preference_that_leaves_nowhere_is_dropped():
    result = schedule([pod("a-1", affinity=_prefer_zone("us-west-2a"))], [pool()], [node_slot("n1", zone=ZONES[0])],
                      CATALOG)
    assert result.placed == {"default/a-1": "n1"}
    capped = pool(limits=Limits(machines=0))
    assert schedule([pod("a-1", affinity=_prefer_zone(ZONES[1]))], [capped], [node_slot("n1")], CATALOG).placed == \
        {"default/a-1": "n1"}


def test_schedule_anyway_spread_is_relaxed_when_it_leaves_nowhere():
    spread = [{"maxSkew": 1, "topologyKey": names.HOSTNAME_LABEL, "whenUnsatisfiable": "ScheduleAnyway",
               "labelSelector": {"matchLabels": {"app": "web"}}}]
    web = [_web(f"web-{i}", topologySpreadConstraints=spread) for i in range(3)]
    big = node_slot("n1", cpu="8", memory="32Gi")
    with_pools = schedule(web, [pool()], [big], CATALOG)
    assert len(with_pools.placed) == 1 and len(with_pools.claims) == 2
    capped = schedule(web, [pool(limits=Limits(machines=0))], [big], CATALOG)
    assert set(capped.placed.values()) == {"n1"} and len(capped.placed) == 3


def test_duplicate_pods_are_placed_once():
    result = schedule([pod("a-1"), pod("a-1")], [pool()], [], CATALOG)
    assert [c.pods for c in result.claims] == [("default/a-1",)]


def test_placing_alike_pods_together_decides_as_one_by_one():
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": names.HOSTNAME_LABEL, "labelSelector": {"matchLabels": {"app": "db"}}}]}}
    batch = ([pod(f"web-{i}", "700m", "1Gi") for i in range(17)]
             + [pod(f"db-{i}", "300m", "3Gi", labels={"app": "db"}, affinity=anti) for i in range(4)]
             + [pod(f"job-{i}", "100m", "100Mi", affinity=_prefer_zone(ZONES[1])) for i in range(9)])
    slots = [node_slot("n1", requested={"cpu": "500m"}), node_slot("m1", in_flight=True,
                                                                   provisioned_for=("default/web-3",))]
    pools = [pool(limits=Limits(cpu=20000)), pool("spare")]
    grouped = schedule(batch, pools, slots, CATALOG, [daemonset("agent")])
    assert grouped == schedule(batch, pools, slots, CATALOG, [daemonset("agent")], group_identical=False)
    assert len(placements(grouped)) == len(batch) - len(grouped.unschedulable)


# --- architectures, and a pool that cannot launch


def test_a_claims_types_are_of_the_cheapest_ones_architecture():
    mixed = options({"m5.large": (2, 8, 0.096), "m6g.large": (2, 8, 0.077), "c6g.large": (2, 4, 0.068),
                     "c5.large": (2, 4, 0.085)}, arm64=frozenset({"m6g.large", "c6g.large"}))
    (claim,) = schedule([pod("a-1")], [pool()], [], mixed).claims
    assert claim.instance_types == ("c6g.large", "m6g.large")


def test_a_pool_that_cannot_launch_says_why_and_the_next_takes_the_pod():
    blocked = pool("mixed", weight=10, cannot_launch="the architecture of image ami-1 is not known")
    result = schedule([pod("a-1")], [blocked, pool("other")], [], CATALOG)
    assert [c.pool for c in result.claims] == ["other"]
    alone = schedule([pod("a-1")], [blocked], [], CATALOG)
    assert "image ami-1" in alone.unschedulable["default/a-1"]
