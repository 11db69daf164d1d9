"""A provisioning round over readings as gather stores them: Machines to create, in-flight capacity counted
in the next round, the batch window, Events and status."""
from __future__ import annotations

import copy
import json

from hooks import events, machine_names, provisioning_names
from hooks.machines import capacity, spec
from hooks.provisioning import rounds
from tests.support.provisioning import NOW, TYPES, ZONES, facts, raw_pod, stamp

POOL = "general"


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
                 types: dict | None = None) -> dict:
    types = TYPES if types is None else types
    pools = [pool_object()] if pools is None else pools
    return {
        "pending": pods, "bound": [], "nodes": [], "pools": pools, "machines": machines or [], "daemonsets": [],
        "typeFacts": {n: facts(v, m) for n, (v, m, _) in types.items()},
        "zoneOfferings": {n: list(ZONES) for n in types},
        "prices": {"on-demand": {n: p for n, (_, _, p) in types.items()}, "spot": []},
        "zones": {p["metadata"]["name"]: list(ZONES) for p in pools},
        "subnets": [{"id": "subnet-a", "zone": ZONES[0]}, {"id": "subnet-b", "zone": ZONES[1]}],
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


def test_the_batch_window_holds_a_round_while_pods_keep_arriving():
    pods = [raw_pod("web-0", since=5), raw_pod("web-1", since=0.2)]
    out = run(raw_readings(pods))
    assert not out.ready and out.claims == [] and 0 < out.wait <= 1.0


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
