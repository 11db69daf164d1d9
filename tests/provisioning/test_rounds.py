"""A provisioning round over readings as gather stores them: Machines to create, in-flight capacity counted
in the next round, the batch window, Events and status."""
from __future__ import annotations

import copy
import datetime as dt
import json

from hooks import events, machine_names, provisioning_names
from hooks.machines import capacity, spec
from hooks.provisioning import rounds, scheduling
from tests.support.provisioning import NOW, TYPES, ZONES, facts, raw_pod, stamp, type_facts

POOL = "general"
ZONE = provisioning_names.ZONE_LABEL
ARCH = provisioning_names.ARCH_LABEL
# TYPES with Graviton types beside them, the cheapest of all: a pool allowing both architectures.
GRAVITON = {"m6g.large": (2, 8, 0.077), "m6g.xlarge": (4, 16, 0.154), "c6g.large": (2, 4, 0.068)}
MIXED = {**TYPES, **GRAVITON}
BOTH_ARCHITECTURES = [{"key": ARCH, "operator": "In", "values": ["amd64", "arm64"]}]


def pool_object(name: str = POOL, weight: int = 0, requirements: list | None = None, limits: dict | None = None,
                taints: list | None = None) -> dict:
    template_spec = {"subnets": ["subnet-a", "subnet-b"], "imageId": "ami-1"}
    if taints:
        template_spec["taints"] = taints
    obj = {"apiVersion": machine_names.API_VERSION, "kind": "NodePool",
           "metadata": {"name": name, "uid": f"uid-{name}"},
           "spec": {"weight": weight, "template": {"metadata": {"labels": {"team": "a"}}, "spec": template_spec}}}
    if requirements:
        obj["spec"]["requirements"] = requirements
    if limits:
        obj["spec"]["limits"] = limits
    return obj


def raw_readings(pods: list[dict], pools: list[dict] | None = None, machines: list[dict] | None = None,
                 types: dict | None = None, *, arm64: frozenset = frozenset(), gpus: dict | None = None) -> dict:
    """Readings as gather stores them; ``arm64`` names the Graviton types, ``gpus`` the GPUs of a type."""
    types = TYPES if types is None else types
    pools = [pool_object()] if pools is None else pools
    return {
        "pending": pods, "bound": [], "nodes": [], "pools": pools, "machines": machines or [], "daemonsets": [],
        "typeFacts": type_facts(types, arm64=arm64, gpus=gpus),
        "zoneOfferings": {n: list(ZONES) for n in types},
        "prices": {"on-demand": {n: p for n, (_, _, p) in types.items()}, "spot": []},
        "zones": {p["metadata"]["name"]: list(ZONES) for p in pools},
        "subnets": [{"id": "subnet-a", "zone": ZONES[0]}, {"id": "subnet-b", "zone": ZONES[1]}],
        "subnetZones": {"subnet-a": ZONES[0], "subnet-b": ZONES[1]},
    }


def run(raw: dict, name: str = POOL) -> rounds.Round:
    obj = next(p for p in raw["pools"] if p["metadata"]["name"] == name)
    return rounds.provision(name, spec.pool(obj), rounds.readings(raw), NOW)


def as_machines(out: rounds.Round, name: str = POOL, start: int = 0) -> list[dict]:
    """The Machines Metacontroller would create for the round's claims: launching, no Node yet."""
    made = []
    for i, (machine_spec, annotations) in enumerate(out.machines, start):
        made.append({"apiVersion": machine_names.API_VERSION, "kind": "Machine",
                     "metadata": {"name": f"{name}-{i}", "uid": f"uid-{name}-{i}", "creationTimestamp": stamp(1),
                                  "labels": {machine_names.POOL_LABEL: name}, "annotations": dict(annotations)},
                     "spec": copy.deepcopy(machine_spec), "status": {}})
    return made


def test_pending_pods_get_the_fewest_cheapest_machines():
    pods = [raw_pod(f"web-{i}", cpu="1", memory="1Gi") for i in range(6)]
    out = run(raw_readings(pods))
    assert out.ready
    # Each pod asks 1 CPU; an m5.2xlarge's allocatable is the roomiest of TYPES.
    _, allocatable = capacity.resources(facts(8, 32))
    per_machine = int(allocatable["cpu"].rstrip("m")) // 1000
    assert sum(len(c.pods) for c in out.claims) == 6
    assert len(out.claims) == -(-6 // per_machine)
    for machine_spec, annotations in out.machines:
        assert machine_spec["instanceTypes"], "a ranked list to fall back on"
        assert machine_spec["imageId"] == "ami-1"
        recorded = json.loads(annotations[provisioning_names.PROVISIONED_FOR])
        assert recorded["more"] == 0 and all(p.startswith("default/web-") for p in recorded["pods"])
    assert out.status["pendingPods"] == 6


def test_a_repeated_round_launches_nothing_for_pods_its_machines_will_take():
    pods = [raw_pod(f"web-{i}", cpu="1", memory="1Gi") for i in range(10)]
    first = run(raw_readings(pods))
    assert first.claims
    again = run(raw_readings(pods, machines=as_machines(first)))
    assert again.claims == []
    nominated = [e for e in again.events if e.reason == events.NOMINATED]
    assert len(nominated) == 10 and all("waiting for Machine general-" in e.message for e in nominated)


def test_pods_arriving_while_machines_are_in_flight_get_only_what_does_not_fit():
    first_pods = [raw_pod(f"a-{i}", cpu="1500m", memory="1Gi") for i in range(3)]
    first = run(raw_readings(first_pods))
    in_flight = as_machines(first)
    more = first_pods + [raw_pod(f"b-{i}", cpu="100m", memory="128Mi") for i in range(2)]
    second = run(raw_readings(more, machines=in_flight))
    # The small pods fit beside the big ones on the Machines already made for them.
    assert second.claims == []


def test_a_pod_bound_between_the_reads_is_not_provisioned_for_again():
    pods = [raw_pod(f"web-{i}", cpu="1", memory="1Gi") for i in range(3)]
    bound = copy.deepcopy(pods[0])
    bound["spec"]["nodeName"] = "elsewhere"
    raw = raw_readings(pods)
    raw["bound"] = [bound]
    out = run(raw)
    assert out.pending_pods == 2 and out.status["pendingPods"] == 2
    assert sorted(p for c in out.claims for p in c.pods) == ["default/web-1", "default/web-2"]


def test_a_pod_nominated_for_preemption_gets_no_machine():
    preempting = raw_pod("urgent-0", cpu="1", memory="1Gi")
    preempting["status"]["nominatedNodeName"] = "node-7"
    out = run(raw_readings([preempting, raw_pod("web-0", cpu="1", memory="1Gi")]))
    assert [c.pods for c in out.claims] == [("default/web-0",)]
    assert out.pending_pods == 1 and "default/urgent-0" not in out.result.unschedulable
    assert not [e for e in out.events if e.about.get("name") == "urgent-0"]


def with_node(raw: dict, name: str, *bound: dict, cpu: str = "8", memory: str = "32Gi") -> dict:
    """``raw`` with an Initialized Machine of the pool, its Ready Node in the first zone and ``bound`` on it."""
    raw["machines"].append({
        "apiVersion": machine_names.API_VERSION, "kind": "Machine",
        "metadata": {"name": name, "uid": f"uid-{name}", "creationTimestamp": stamp(3600),
                     "labels": {machine_names.POOL_LABEL: POOL}},
        "spec": {"instanceTypes": ["m5.2xlarge"]},
        "status": {"instanceID": f"i-{name}", "nodeName": name, "zone": ZONES[0],
                   "conditions": [{"type": machine_names.INITIALIZED, "status": "True"}]}})
    raw["nodes"].append({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {machine_names.POOL_LABEL: POOL, provisioning_names.ZONE_LABEL: ZONES[0],
                                              provisioning_names.HOSTNAME_LABEL: name}},
        "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
                   "conditions": [{"type": "Ready", "status": "True"}]}})
    for pod in bound:
        pod = copy.deepcopy(pod)
        pod["spec"]["nodeName"] = name
        pod["status"] = {"phase": "Running"}
        raw["bound"].append(pod)
    return raw


def test_a_pod_whose_host_port_a_node_holds_gets_a_machine():
    ports = [{"name": "main", "ports": [{"containerPort": 80, "hostPort": 8080}],
              "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}}}]
    first = raw_pod("ingress-0", containers=ports)
    second, plain = raw_pod("ingress-1", containers=ports), raw_pod("web-0")
    out = run(with_node(raw_readings([second, plain]), "node-1", first))
    assert out.result.placed == {"default/web-0": "node-1"}
    assert [c.pods for c in out.claims] == [("default/ingress-1",)]


def _stateful(name: str, claim: str, **kwargs) -> dict:
    return raw_pod(name, volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": claim}}], **kwargs)


def _bound_claim(name: str, zone: str) -> list[dict]:
    """A claim and the EBS volume it is bound to, in ``zone``."""
    return [{"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": "default"},
             "spec": {"volumeName": f"pv-{name}", "storageClassName": "gp3"}, "status": {"phase": "Bound"}},
            {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"pv-{name}"},
             "spec": {"csi": {"driver": provisioning_names.EBS_CSI_DRIVER, "volumeHandle": f"vol-{name}"},
                      "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                          {"key": provisioning_names.ZONE_LABEL, "operator": "In", "values": [zone]}]}]}}}}]


def _storage(*objects: dict, csi_nodes: tuple = ()) -> dict:
    found: dict = {"claims": [], "volumes": [], "storageClasses": [], "csiNodes": list(csi_nodes)}
    for obj in objects:
        found["claims" if obj["kind"] == "PersistentVolumeClaim" else "volumes"].append(obj)
    return found


def test_a_pod_whose_volume_is_in_one_zone_gets_a_machine_in_that_zone():
    raw = with_node(raw_readings([_stateful("db-0", "data-db-0")]), "node-1")  # in the first zone, with room
    raw["storage"] = _storage(*_bound_claim("data-db-0", ZONES[1]))
    out = run(raw)
    assert out.result.placed == {}
    (claim,), ((machine_spec, _),) = out.claims, out.machines
    assert claim.zone == ZONES[1] and machine_spec["subnets"] == ["subnet-b"]


def test_a_pod_whose_claim_does_not_exist_gets_no_machine_and_an_event_saying_why():
    raw = raw_readings([_stateful("db-0", "data-db-0"), raw_pod("web-0")])
    raw["storage"] = _storage()
    out = run(raw)
    assert [c.pods for c in out.claims] == [("default/web-0",)]
    (failed,) = [e for e in out.events if e.reason == events.FAILED_PROVISIONING]
    assert failed.about["name"] == "db-0"
    assert "PersistentVolumeClaim data-db-0 does not exist" in failed.message
    assert out.status["unschedulablePods"] == 1


def test_a_node_that_attaches_no_more_volumes_leaves_the_pod_a_new_machine():
    running = _stateful("db-0", "data-db-0")
    raw = with_node(raw_readings([_stateful("db-1", "data-db-1")]), "node-1", running)
    csi_node = {"metadata": {"name": "node-1"}, "spec": {"drivers": [
        {"name": provisioning_names.EBS_CSI_DRIVER, "allocatable": {"count": 1}}]}}
    raw["storage"] = _storage(*_bound_claim("data-db-0", ZONES[0]), *_bound_claim("data-db-1", ZONES[0]),
                              csi_nodes=(csi_node,))
    out = run(raw)
    assert out.result.placed == {} and [(c.zone, c.pods) for c in out.claims] == [(ZONES[0], ("default/db-1",))]
    csi_node["spec"]["drivers"][0]["allocatable"]["count"] = 2
    assert run(raw).result.placed == {"default/db-1": "node-1"}


def test_the_batch_window_holds_a_round_while_pods_keep_arriving():
    pods = [raw_pod("web-0", since=5), raw_pod("web-1", since=0.2)]
    out = run(raw_readings(pods))
    assert not out.ready and out.claims == [] and 0 < out.wait <= 1.0


def test_a_rollout_beside_a_pod_pending_for_an_hour_is_decided_in_one_batch():
    """A pod no pool can run has been pending for an hour; a rollout of 20 pods then turns unschedulable two
    every poll (0.5 s). The rounds, each seeing the Machines of the earlier ones and the pool's status as the
    API server holds it, launch what one round over the 20 pods launches."""
    stuck = raw_pod("odd-0", since=3600, nodeSelector={provisioning_names.INSTANCE_FAMILY_LABEL: "x9"})
    rollout = [raw_pod(f"web-{i}", cpu="1", memory="1Gi", since=-(i // 2) * 0.5) for i in range(20)]
    pool = pool_object()
    pool["status"] = {"provisioning": {"lastRound": stamp(30)}}
    machines: list[dict] = []
    for poll in range(40):
        now = NOW + dt.timedelta(seconds=poll * 0.5)
        arrived = [p for i, p in enumerate(rollout) if (i // 2) * 0.5 <= poll * 0.5]
        out = rounds.provision(POOL, spec.pool(pool), rounds.readings(raw_readings([stuck, *arrived], [pool],
                                                                                   machines)), now)
        machines += as_machines(out, start=len(machines))
        pool["status"] = {"provisioning": out.status}
    at_once = run(raw_readings([stuck, *rollout]))
    assert len(machines) == len(at_once.claims)
    assert sorted(p for m in machines for p in json.loads(
        m["metadata"]["annotations"][provisioning_names.PROVISIONED_FOR])["pods"]) == \
        sorted(f"default/{p['metadata']['name']}" for p in rollout)


def test_a_round_that_waits_keeps_the_last_rounds_time():
    pool = pool_object()
    pool["status"] = {"provisioning": {"lastRound": stamp(30)}}
    out = run(raw_readings([raw_pod("web-0", since=0.2)], [pool]))
    assert not out.ready and out.status["lastRound"] == stamp(30)
    decided = run(raw_readings([raw_pod("web-0", since=2)], [pool]))
    assert decided.ready and decided.status["lastRound"] == "2026-11-27T13:00:00Z"


def test_a_pod_no_pool_can_run_is_reported_once_and_launches_nothing():
    pods = [raw_pod("odd-0", nodeSelector={provisioning_names.INSTANCE_FAMILY_LABEL: "x9"})]
    pools = [pool_object("a"), pool_object("b")]
    said_a, said_b = run(raw_readings(pods, pools), "a"), run(raw_readings(pods, pools), "b")
    assert said_a.claims == [] and said_b.claims == []
    failed = [e for e in said_a.events if e.reason == events.FAILED_PROVISIONING]
    assert len(failed) == 1 and failed[0].about["name"] == "odd-0" and "x9" in failed[0].message
    assert not [e for e in said_b.events if e.reason == events.FAILED_PROVISIONING], "one pool speaks"


def test_the_heavier_pool_takes_the_pods_and_the_other_creates_nothing():
    pods = [raw_pod(f"web-{i}", cpu="1", memory="1Gi") for i in range(4)]
    pools = [pool_object("light", weight=1), pool_object("heavy", weight=50)]
    assert run(raw_readings(pods, pools), "light").claims == []
    assert run(raw_readings(pods, pools), "heavy").claims


def test_limits_count_in_flight_machines():
    pods = [raw_pod(f"web-{i}", cpu="1", memory="1Gi") for i in range(30)]
    pools = [pool_object(limits={"machines": 2})]
    first = run(raw_readings(pods, pools))
    assert len(first.claims) == 2
    again = run(raw_readings(pods, pools, machines=as_machines(first)))
    assert again.claims == [], "the limit counts the Machines still launching"
    assert again.status["resources"]["machines"] == 2 and again.status["limits"] == {"machines": 2}


def test_a_zone_pinned_claim_gets_only_that_zones_subnets():
    pods = [raw_pod("web-0", nodeSelector={provisioning_names.ZONE_LABEL: ZONES[1]})]
    out = run(raw_readings(pods))
    (machine_spec, _), = out.machines
    assert machine_spec["subnets"] == ["subnet-b"]


def test_a_pool_without_a_known_subnet_launches_nothing():
    raw = raw_readings([raw_pod("web-0")])
    raw["zones"][POOL], raw["subnets"] = [], []
    out = run(raw)
    assert out.claims == [] and out.machines == []
    failed = [e for e in out.events if e.reason == events.FAILED_PROVISIONING]
    assert failed and "pools tried: general" in failed[0].message


def _refused_everywhere(machine: dict, seconds_ago: float, zones: tuple = ZONES) -> dict:
    """The Machine as its launch leaves it when EC2 refused every one of its types in ``zones`` for capacity."""
    machine["status"] = {"launchRequestedAt": stamp(seconds_ago + 5), "launchRefusals": [
        {"instanceType": t, "subnetID": f"subnet-{zone[-1]}", "zone": zone, "capacityType": "on-demand",
         "code": "InsufficientInstanceCapacity", "at": stamp(seconds_ago)}
        for t in machine["spec"]["instanceTypes"] for zone in zones],
        "conditions": [{"type": machine_names.LAUNCHED, "status": "False", "reason": "InsufficientCapacity",
                        "message": "EC2 refused every candidate", "lastTransitionTime": stamp(seconds_ago)}]}
    return machine


def test_a_machine_only_slow_to_launch_keeps_its_pods_and_counts_against_the_limits():
    """90 s old, no instance and no refusal on record (its launch calls are still going on, throttled, say):
    in-flight capacity, not no capacity."""
    pods = [raw_pod(f"web-{i}", cpu="1", memory="1Gi") for i in range(2)]
    pools = [pool_object(limits={"machines": 1})]
    first = run(raw_readings(pods, pools))
    slow = as_machines(first)
    assert len(slow) == 1
    slow[0]["metadata"]["creationTimestamp"] = stamp(90)
    slow[0]["status"] = {"launchRequestedAt": stamp(20),
                         "conditions": [{"type": machine_names.LAUNCHED, "status": "False", "reason": "Launching",
                                         "message": "launching an instance", "lastTransitionTime": stamp(89)}]}
    again = run(raw_readings(pods, pools, machines=slow))
    assert again.claims == [], "its pods wait for it: no other Machine is made for them"
    assert again.result.placed == {p: slow[0]["metadata"]["name"] for p in ("default/web-0", "default/web-1")}
    assert again.status["resources"]["machines"] == 1 and again.status["inFlight"]["machines"] == 1


def test_a_machine_refused_everywhere_gives_up_its_pods_and_its_refused_offerings_are_avoided():
    pods = [raw_pod(f"web-{i}", cpu="1", memory="1Gi") for i in range(2)]
    pools = [pool_object(limits={"machines": 2})]
    first = run(raw_readings(pods, pools))
    assert len(first.claims) == 1
    stuck = [_refused_everywhere(m, 10) for m in as_machines(first)]
    refused_types = set(stuck[0]["spec"]["instanceTypes"])
    again = run(raw_readings(pods, pools, machines=stuck))
    # The types left take one pod each: two Machines, which the limit allows only if the stuck one holds nothing.
    assert sorted(p for c in again.claims for p in c.pods) == ["default/web-0", "default/web-1"]
    assert again.status["resources"]["machines"] == 0 and again.status["inFlight"]["machines"] == 0
    assert all(not refused_types & set(c.instance_types) for c in again.claims), "no new claim on a refused offering"
    # Refused in one zone only: that type is still offered in the other zone.
    one_zone = [_refused_everywhere(m, 10, zones=ZONES[:1]) for m in as_machines(first)]
    elsewhere = run(raw_readings(pods, pools, machines=one_zone))
    assert elsewhere.claims and all(c.zone != ZONES[0] for c in elsewhere.claims)
    assert any(refused_types & set(c.instance_types) for c in elsewhere.claims)
    # Remembered 3 minutes, as Karpenter keeps an unavailable offering: then the types are offered again.
    forgotten = [_refused_everywhere(m, 181) for m in as_machines(first)]
    later = run(raw_readings(pods, pools, machines=forgotten))
    assert any(refused_types & set(c.instance_types) for c in later.claims)


def mixed_readings(pods: list[dict], machines: list[dict] | None = None, pools: list[dict] | None = None) -> dict:
    pools = [pool_object(requirements=BOTH_ARCHITECTURES)] if pools is None else pools
    return raw_readings(pods, pools, machines, MIXED, arm64=frozenset(GRAVITON))


def rounds_until_quiet(pods: list[dict], readings_of, repeats: int = 3) -> list[dict]:
    """The first round's Machines, after ``repeats`` more rounds over them in flight, not launched: each of
    those rounds must create nothing."""
    machines = as_machines(run(readings_of(pods, [])))
    for _ in range(repeats):
        again = run(readings_of(pods, machines))
        assert again.claims == [], f"a second Machine for {[c.pods for c in again.claims]}"
        nominated = {e.about["name"] for e in again.events if e.reason == events.NOMINATED}
        assert nominated == {p["metadata"]["name"] for p in pods}
    return machines


def test_zone_pinned_pods_get_one_machine_per_zone_while_those_launch():
    pods = [raw_pod("east-0", nodeSelector={ZONE: ZONES[0]}), raw_pod("west-0", nodeSelector={ZONE: ZONES[1]})]
    machines = rounds_until_quiet(pods, lambda p, m: mixed_readings(p, m))
    assert sorted(m["spec"]["subnets"][0] for m in machines) == ["subnet-a", "subnet-b"]
    assert all(len(m["spec"]["subnets"]) == 1 for m in machines), "each in its pod's zone only"


def test_a_pod_whose_affinity_names_instance_types_fits_the_machine_made_for_it():
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": provisioning_names.INSTANCE_TYPE_LABEL, "operator": "In",
                               "values": ["c5.large", "c5.xlarge"]}]}]}}}
    pods = [raw_pod("compute-0", cpu="1", affinity=affinity)]
    (machine,) = rounds_until_quiet(pods, lambda p, m: mixed_readings(p, m))
    assert sorted(machine["spec"]["instanceTypes"]) == ["c5.large", "c5.xlarge"]
    assert machine["spec"]["subnets"] == ["subnet-a", "subnet-b"], "either zone: the pod names none"


def test_a_zone_spread_counts_each_machine_in_the_zone_of_its_subnets():
    spread = [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
               "labelSelector": {"matchLabels": {"app": "web"}}}]
    pods = [raw_pod(f"web-{i}", cpu="1", labels={"app": "web"}, topologySpreadConstraints=spread) for i in range(4)]
    machines = rounds_until_quiet(pods, lambda p, m: mixed_readings(p, m))
    by_zone = sorted(m["spec"]["subnets"] for m in machines)
    assert by_zone == [["subnet-a"], ["subnet-b"]]


def test_a_pod_pinned_to_one_zone_does_not_take_a_machine_of_two():
    unpinned = [raw_pod("any-0", cpu="1")]
    (machine,) = as_machines(run(raw_readings(unpinned)))
    assert machine["spec"]["subnets"] == ["subnet-a", "subnet-b"]
    pinned = [raw_pod("east-0", cpu="100m", nodeSelector={ZONE: ZONES[0]})]
    out = run(raw_readings(unpinned + pinned, machines=[machine]))
    assert [c.pods for c in out.claims] == [("default/east-0",)], "its launch may pick the other zone"
    assert out.claims[0].zone == ZONES[0]
    launched = copy.deepcopy(machine)
    launched["status"].update(instanceID="i-1", instanceType=machine["spec"]["instanceTypes"][0], zone=ZONES[0])
    assert run(raw_readings(unpinned + pinned, machines=[launched])).claims == [], "launched: what it recorded"


def gpu_readings(pods: list[dict], machines: list[dict], nodes: list[dict] | None = None) -> dict:
    raw = raw_readings(pods, machines=machines, types={**TYPES, "g4dn.xlarge": (4, 16, 0.526)},
                       gpus={"g4dn.xlarge": 1})
    raw["nodes"] = nodes or []
    return raw


def test_a_gpu_machine_whose_node_does_not_report_its_gpu_yet_still_takes_its_pod():
    pods = [raw_pod("train-0", cpu="1", memory="2Gi")]
    pods[0]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1", "memory": "2Gi", "nvidia.com/gpu": "1"},
                                                    "limits": {"nvidia.com/gpu": "1"}}
    (machine,) = as_machines(run(gpu_readings(pods, [])))
    assert machine["spec"]["instanceTypes"] == ["g4dn.xlarge"]
    _, allocatable = capacity.resources(facts(4, 16, gpus=1))
    machine["status"].update(instanceID="i-gpu", instanceType="g4dn.xlarge", zone=ZONES[0], allocatable=allocatable,
                             nodeName="ip-10-0-0-1.ec2.internal",
                             conditions=[{"type": machine_names.REGISTERED, "status": "True"}])
    # Registered before its device plugin started: no nvidia.com/gpu in the Node's allocatable yet.
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "ip-10-0-0-1.ec2.internal", "labels": {
                machine_names.POOL_LABEL: POOL, ZONE: ZONES[0],
                provisioning_names.INSTANCE_TYPE_LABEL: "g4dn.xlarge"}},
            "spec": {}, "status": {"allocatable": {k: v for k, v in allocatable.items() if k != "nvidia.com/gpu"}}}
    again = run(gpu_readings(pods, [machine], [node]))
    assert again.claims == [], "the Machine's GPU stands until its Node reports it"
    node["status"]["allocatable"]["nvidia.com/gpu"] = "0"
    assert run(gpu_readings(pods, [machine], [node])).claims == [], "reported as 0 before the plugin counts"
    machine["status"]["conditions"].append({"type": machine_names.INITIALIZED, "status": "True"})
    assert run(gpu_readings(pods, [machine], [node])).claims, "Initialized: its Node's figure is the truth"


def arch_of(name: str) -> str:
    return "arm64" if name in GRAVITON else "amd64"


def test_a_claims_types_share_one_architecture():
    pods = [raw_pod(f"web-{i}", cpu="1", memory="1Gi") for i in range(2)]
    (claim,) = run(mixed_readings(pods)).claims
    assert claim.instance_types[0] == "m6g.xlarge", "the cheapest that fits both is Graviton"
    assert {arch_of(t) for t in claim.instance_types} == {"arm64"}, "one image runs one architecture"


def test_machines_launch_only_types_of_their_images_architecture():
    pods = [raw_pod(f"web-{i}", cpu="1", memory="1Gi") for i in range(2)]
    for ec2_name, kube_name in (("x86_64", "amd64"), ("arm64", "arm64")):
        raw = mixed_readings(pods)
        raw["images"] = {POOL: {"id": "ami-1", "architecture": ec2_name}}
        out = run(raw)
        (claim,) = out.claims
        assert {arch_of(t) for t in claim.instance_types} == {kube_name}
        assert out.status["image"] == {"id": "ami-1", "architecture": ec2_name}
    raw = mixed_readings(pods)
    raw["images"] = {POOL: {"id": "ami-1", "architecture": "x86_64"}}
    assert run(raw).claims[0].instance_types[0] == "c5.xlarge", "the cheapest of the image's architecture"


def test_an_image_whose_architecture_is_not_known_launches_nothing_and_says_why():
    pods = [raw_pod("web-0", cpu="1", memory="1Gi")]
    raw = mixed_readings(pods)
    raw["images"] = {POOL: {"id": "ami-1", "error": "InvalidAMIID.NotFound: The image id '[ami-1]' does not exist"}}
    out = run(raw)
    assert out.claims == [] and out.machines == []
    assert out.status["image"]["error"].startswith("InvalidAMIID.NotFound")
    said = {(e.reason, (e.about or {}).get("name")): e.message for e in out.events}
    assert "image ami-1" in said[(events.FAILED_PROVISIONING, None)], "on the pool"
    assert "kubernetes.io/arch" in said[(events.FAILED_PROVISIONING, "web-0")], "and on the pod"


def test_the_pools_rounds_over_readings_read_apart_compute_one_placement(monkeypatch):
    """Each pool's call reads the cluster and EC2 on its own: equal readings, not the same objects. The
    placement is computed for the first pool and the same one serves the second; readings that differ
    (one more pending pod) are placed afresh."""
    computed = []
    place = scheduling._Scheduler.run
    monkeypatch.setattr(scheduling._Scheduler, "run", lambda self, *args: computed.append(1) or place(self, *args))
    def spread(i: int) -> dict:
        return raw_pod(f"read-apart-{i}", cpu="1", memory="1Gi", labels={"app": "read-apart"},
                       topologySpreadConstraints=[{"maxSkew": 1, "topologyKey": provisioning_names.ZONE_LABEL,
                                                   "whenUnsatisfiable": "DoNotSchedule",
                                                   "labelSelector": {"matchLabels": {"app": "read-apart"}}}])
    pods = [spread(i) for i in range(6)]
    pools = [pool_object("light", weight=1), pool_object("heavy", weight=50, taints=[
        {"key": "dedicated", "value": "x", "effect": "NoSchedule"}])]
    raw = raw_readings(pods, pools)
    light, heavy = run(copy.deepcopy(raw), "light"), run(copy.deepcopy(raw), "heavy")
    assert computed == [1], "one placement for both pools"
    assert light.result == heavy.result
    assert [c.pool for c in light.claims] == ["light"] * len(light.claims) and not heavy.claims
    assert sum(len(c.pods) for c in light.claims) == 6
    more = raw_readings(pods + [spread(6)], pools)
    assert sum(len(c.pods) for c in run(more, "light").claims) == 7
    assert computed == [1, 1], "other readings, another placement"


def test_the_pods_a_machine_in_flight_was_made_for_keep_their_room_when_larger_pods_arrive():
    """Three small pods get a Machine; in the next round a larger pod arrives and is placed first (largest
    first), but the Machine holds their room for them: they stay on the Machine made for them (a round again
    places the same pods the same way) and the newcomer takes whatever room is left or a Machine of its own."""
    small = [raw_pod(f"small-{i}", cpu="1", memory="1Gi") for i in range(3)]
    (machine,) = as_machines(run(raw_readings(small)))
    large = raw_pod("large-0", cpu="2", memory="2Gi", labels={"app": "large"})
    again = run(raw_readings(small + [large], machines=[machine]))
    assert {p: again.result.placed.get(p) for p in ("default/small-0", "default/small-1", "default/small-2")} == \
        dict.fromkeys(("default/small-0", "default/small-1", "default/small-2"), machine["metadata"]["name"])
    assert all("default/small-" not in key for claim in again.claims for key in claim.pods)


def _arriving(name: str, since: float, **kwargs) -> dict:
    return raw_pod(name, **kwargs, since=since)


def _last_round(pool: dict, seconds_ago: float) -> dict:
    pool["status"] = {"provisioning": {"lastRound": stamp(seconds_ago)}}
    return pool


def test_while_pods_still_arrive_a_small_new_machine_waits_for_those_that_follow():
    """The window closed on its maximum (the oldest newcomer turned unschedulable 10 s ago, the newest just
    now): a full Machine launches, one its pods would fill only a little is planned again next round with
    the pods that follow them, instead of launching small beside the larger ones they will need."""
    pods = [_arriving(f"big-{i}", 10.5 - 2.5 * i, cpu="1800m", memory="6Gi") for i in range(5)]
    pods[-1] = _arriving("big-4", 0.2, cpu="1800m", memory="6Gi")
    out = run(raw_readings(pods, [_last_round(pool_object(), 12)]))
    assert [len(c.pods) for c in out.claims] == [4], [c.pods for c in out.claims]
    assert out.status["pendingPods"] == len(pods), "the pods waiting for the next round are still the pool's"
    # Stopped arriving (the newest a second ago and more): everything launches.
    calm = pods[:-1] + [_arriving("big-4", 1.5, cpu="1800m", memory="6Gi")]
    assert sorted(len(c.pods) for c in run(raw_readings(calm, [_last_round(pool_object(), 12)])).claims) == [1, 4]


def test_a_pod_is_held_back_once_at_most():
    """Pods still arriving, and a Machine its pods would fill only a little: held back if its pod is new,
    launched if the pod was already there at the last round (it was held back then)."""
    def readings_for(tail_since: float) -> dict:
        full = [_arriving(f"big-{i}", 10.5, cpu="1950m", memory="6Gi") for i in range(4)]
        tail = _arriving("tail-0", tail_since, cpu="1", memory="1Gi", labels={"app": "tail"})
        newest = _arriving("big-9", 0.2, cpu="1950m", memory="6Gi")
        return raw_readings(full + [tail, newest], [_last_round(pool_object(), 11)])
    fresh = run(readings_for(5))
    assert not any("default/tail-0" in c.pods for c in fresh.claims), [c.pods for c in fresh.claims]
    again = run(readings_for(12))
    assert any("default/tail-0" in c.pods for c in again.claims), [c.pods for c in again.claims]


def test_pods_left_pending_by_a_machine_made_for_them_that_became_ready_are_decided_together():
    """A pod pending since long ago whose Machine just became Initialized, and it is still not bound there
    (kube-scheduler put others into its room): it arrives again then, so the round waits for the idle window
    as for a newcomer, instead of making a Machine for each such pod as each Machine becomes ready."""
    pods = [raw_pod("web-0", cpu="1", memory="1Gi", since=300)]
    (machine,) = as_machines(run(raw_readings(pods)))
    machine["status"]["conditions"] = [{"type": machine_names.INITIALIZED, "status": "True",
                                        "lastTransitionTime": stamp(0.3)}]
    obj = _last_round(pool_object(), 60)
    waiting = run(raw_readings(pods, [obj], machines=[machine]))
    assert not waiting.ready and 0 < waiting.wait <= 1.0
    machine["status"]["conditions"][0]["lastTransitionTime"] = stamp(2)
    assert run(raw_readings(pods, [obj], machines=[machine])).ready
