"""What the round makes of its readings: an in-flight Machine as a Slot (where and what it may launch as, what
it offers), and a pool as the scheduler weighs it."""
from __future__ import annotations

import copy

from hooks import machine_names, provisioning_names as names
from hooks.machines import capacity, spec
from hooks.provisioning import inputs, resources, scheduling
from tests.support.provisioning import ZONES, daemonset, facts, options, pod, stamp

CATALOG = {o.name: o for o in options()}
SUBNET_ZONES = {"subnet-a": ZONES[0], "subnet-b": ZONES[1]}
POOL_ZONES = {"general": frozenset(ZONES)}


def machine(name: str = "general-0", types=("m5.large", "c5.large"), **spec_fields) -> dict:
    made = {"metadata": {"name": name, "uid": f"uid-{name}", "creationTimestamp": stamp(5), "deletionTimestamp": "",
                         "labels": {machine_names.POOL_LABEL: "general"}, "annotations": {}},
            "spec": {"instanceTypes": list(types), "capacityType": spec.ON_DEMAND, **spec_fields}, "status": {}}
    return made


def slot_of(obj: dict, daemonsets=(), catalog=None) -> scheduling.Slot:
    (found,) = inputs.room(["general"], [obj], [], {}, catalog or CATALOG, list(daemonsets), SUBNET_ZONES,
                           POOL_ZONES)
    return found


def test_a_machine_is_in_the_zones_of_its_subnets():
    assert inputs.machine_zones(machine(subnets=["subnet-a"]), SUBNET_ZONES, None) == {ZONES[0]}
    assert inputs.machine_zones(machine(subnets=["subnet-a", "subnet-b"]), SUBNET_ZONES, None) == set(ZONES)
    assert inputs.machine_zones(machine(subnetSelector={"tier": "nodes"}), SUBNET_ZONES, frozenset(ZONES)) == \
        set(ZONES), "a selector finds any of its pool's subnets"
    assert inputs.machine_zones(machine(subnets=["subnet-gone"]), SUBNET_ZONES, None) is None
    launched = machine(subnets=["subnet-a", "subnet-b"])
    launched["status"]["zone"] = ZONES[1]
    assert inputs.machine_zones(launched, SUBNET_ZONES, None) == {ZONES[1]}


def test_an_unlaunched_machine_has_the_labels_every_launch_gives_and_the_rest_vary():
    slot = slot_of(machine(subnets=["subnet-a"]))
    assert slot.labels[names.ZONE_LABEL] == ZONES[0]
    assert slot.labels[names.ARCH_LABEL] == "amd64" and slot.labels[names.INSTANCE_SIZE_LABEL] == "large"
    assert slot.labels[names.CAPACITY_TYPE_LABEL] == spec.ON_DEMAND
    assert names.INSTANCE_TYPE_LABEL not in slot.labels
    assert slot.varying[names.INSTANCE_TYPE_LABEL] == {"m5.large", "c5.large"}
    assert slot.varying[names.INSTANCE_FAMILY_LABEL] == {"m5", "c5"}
    spanning = slot_of(machine(subnets=["subnet-a", "subnet-b"]))
    assert names.ZONE_LABEL not in spanning.labels and spanning.varying[names.ZONE_LABEL] == set(ZONES)
    unknown = slot_of(machine(subnets=["subnet-gone"]))
    assert unknown.varying[names.ZONE_LABEL] == set(ZONES), "any zone the catalog knows"


def test_a_machine_is_where_its_types_are_offered():
    only_east = options(zones=ZONES[:1])
    slot = slot_of(machine(subnets=["subnet-a", "subnet-b"]), catalog={o.name: o for o in only_east})
    assert slot.labels[names.ZONE_LABEL] == ZONES[0] and not slot.varying.get(names.ZONE_LABEL)


def test_a_launched_machine_is_what_it_recorded():
    launched = machine(subnets=["subnet-a", "subnet-b"])
    launched["status"].update(instanceID="i-1", instanceType="m5.large", zone=ZONES[1])
    slot = slot_of(launched)
    assert slot.varying == {}
    assert (slot.labels[names.INSTANCE_TYPE_LABEL], slot.labels[names.ZONE_LABEL]) == ("m5.large", ZONES[1])
    _, allocatable = capacity.resources(facts(2, 8))
    assert slot.allocatable == resources.parse(allocatable), "its type's, not the least of its list"


def test_the_daemonsets_that_may_run_on_a_machine_count_against_it():
    graviton_only = daemonset("arm", "1", nodeSelector={names.ARCH_LABEL: "arm64"})
    on_c5 = daemonset("c5", "300m", nodeSelector={names.INSTANCE_FAMILY_LABEL: "c5"})
    slot = slot_of(machine(subnets=["subnet-a"]), [graviton_only, on_c5])
    assert slot.requested == on_c5.requests, "it may launch as a c5.large, never as Graviton"


def test_a_node_that_does_not_report_its_gpu_yet_offers_its_machines():
    gpu_catalog = {o.name: o for o in options({"g4dn.xlarge": (4, 16, 0.526)}, gpus={"g4dn.xlarge": 1})}
    _, allocatable = capacity.resources(facts(4, 16, gpus=1))
    starting = machine(types=("g4dn.xlarge",), subnets=["subnet-a"])
    starting["status"].update(instanceID="i-1", instanceType="g4dn.xlarge", zone=ZONES[0], allocatable=allocatable,
                              nodeName="n1")
    node = {"metadata": {"name": "n1", "labels": {machine_names.POOL_LABEL: "general"}}, "spec": {},
            "status": {"allocatable": {k: v for k, v in allocatable.items() if k != "nvidia.com/gpu"}}}
    (slot,) = inputs.room(["general"], [starting], [node], {}, gpu_catalog, [])
    assert slot.allocatable.get("nvidia.com/gpu") == 1
    assert slot.allocatable.cpu == resources.parse(node["status"]["allocatable"]).cpu, "the Node's own otherwise"
    initialized = copy.deepcopy(starting)
    initialized["status"]["conditions"] = [{"type": machine_names.INITIALIZED, "status": "True"}]
    (slot,) = inputs.room(["general"], [initialized], [node], {}, gpu_catalog, [])
    assert slot.allocatable.get("nvidia.com/gpu") == 0


def test_a_pod_takes_an_unlaunched_machine_only_if_it_fits_whichever_launch():
    east = slot_of(machine(subnets=["subnet-a"]))
    both = slot_of(machine("general-1", subnets=["subnet-a", "subnet-b"]))
    pool = scheduling.PoolView("general")
    catalog = options()

    def placed(candidate, slots):
        return scheduling.schedule([candidate], [pool], slots, catalog).placed.get(candidate.key)

    assert placed(pod("a", nodeSelector={names.ZONE_LABEL: ZONES[0]}), [both]) is None
    assert placed(pod("a", nodeSelector={names.ZONE_LABEL: ZONES[0]}), [east]) == east.name
    not_east = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": names.ZONE_LABEL, "operator": "NotIn", "values": [ZONES[0]]}]}]}}}
    assert placed(pod("b", affinity=not_east), [both]) is None, "its launch may pick the zone the pod refuses"
    not_m5 = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": names.INSTANCE_FAMILY_LABEL, "operator": "NotIn", "values": ["m5"]}]}]}}}
    assert placed(pod("c", affinity=not_m5), [east]) is None, "it may launch as an m5.large"
    either = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": names.INSTANCE_FAMILY_LABEL, "operator": "In", "values": ["m5", "c5"]}]}]}}}
    assert placed(pod("d", affinity=either), [east]) == east.name


def test_a_pools_requirements_are_narrowed_to_its_images_architecture():
    parsed = spec.pool({"apiVersion": machine_names.API_VERSION, "kind": "NodePool",
                        "metadata": {"name": "general"},
                        "spec": {"template": {"spec": {"subnets": ["subnet-a"], "imageId": "ami-1"}}}})
    view = inputs.pool_view("general", parsed, [], CATALOG, None, {"id": "ami-1", "architecture": "arm64"})
    assert view.requirements.get(names.ARCH_LABEL).allows("arm64")
    assert not view.requirements.get(names.ARCH_LABEL).allows("amd64") and view.cannot_launch is None
    unread = inputs.pool_view("general", parsed, [], CATALOG, None, {"id": "ami-1", "error": "Throttling"})
    assert "ami-1" in unread.cannot_launch and "Throttling" in unread.cannot_launch
    odd = inputs.pool_view("general", parsed, [], CATALOG, None, {"id": "ami-1", "architecture": "i386"})
    assert "i386" in odd.cannot_launch
    assert inputs.pool_view("general", parsed, [], CATALOG, None).cannot_launch is None


def test_a_pool_mixes_architectures_when_its_requirements_allow_types_of_several():
    type_facts = {"m5.large": facts(2, 8), "m6g.large": facts(2, 8, arch="arm64")}

    def pool_of(requirements=None, instance_types=None) -> spec.PoolSpec:
        template = {"subnets": ["subnet-a"], "imageId": "ami-1"}
        if instance_types:
            template["instanceTypes"] = instance_types
        obj = {"apiVersion": machine_names.API_VERSION, "kind": "NodePool", "metadata": {"name": "general"},
               "spec": {"template": {"spec": template}}}
        if requirements:
            obj["spec"]["requirements"] = requirements
        return spec.pool(obj)

    assert inputs.mixes_architectures(pool_of(), type_facts)
    assert not inputs.mixes_architectures(pool_of([{"key": names.ARCH_LABEL, "operator": "In",
                                                    "values": ["arm64"]}]), type_facts)
    assert not inputs.mixes_architectures(pool_of(instance_types=["m5.large"]), type_facts)
