"""A Node and the pods bound to it as a Slot: its room, its taints, whether pods may go there (pure)."""
from __future__ import annotations

from hooks import machine_names
from hooks.machines.spec import Taint
from hooks.provisioning import resources, slots


def _node(**spec) -> dict:
    return {"metadata": {"name": "node-a", "labels": {"disk": "ssd", "bad": 3}},
            "spec": spec, "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                                     "conditions": [{"type": "Ready", "status": "True"}]}}


def _pod(cpu: str, phase: str = "Running", deleting: bool = False) -> dict:
    meta = {"name": f"p-{cpu}", "namespace": "default", "labels": {"app": "web"}}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-27T12:59:00Z"
    return {"metadata": meta, "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
            "status": {"phase": phase}}


def test_a_slot_counts_every_bound_pod_that_has_not_finished():
    bound = [_pod("1"), _pod("500m", deleting=True), _pod("2", phase="Succeeded"), _pod("3", phase="Failed")]
    slot = slots.of_node(_node(taints=[{"key": "gpu", "effect": "NoSchedule"}]), bound, "general", "a")
    assert slot.requested == resources.Resources(cpu=1500, pods=2)
    assert slot.allocatable == resources.parse({"cpu": "4", "memory": "8Gi", "pods": "110"})
    assert slot.labels == {"disk": "ssd"} and slot.taints == (Taint("gpu", "NoSchedule"),)
    assert (slot.name, slot.pool, slot.machine, len(slot.pods)) == ("node-a", "general", "a", 2)


def test_a_pod_whose_requests_do_not_read_still_takes_a_place():
    broken = _pod("1")
    broken["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    assert slots.requested([broken]) == resources.ONE_POD


def test_a_node_whose_allocatable_does_not_read_is_no_slot():
    node = _node()
    node["status"]["allocatable"] = {"cpu": "many"}
    assert slots.of_node(node, [], "general") is None


def test_pods_may_go_only_to_a_ready_schedulable_node_that_is_staying():
    assert slots.usable(_node())
    assert not slots.usable(_node(unschedulable=True))
    for key in (machine_names.DISRUPTED_TAINT, machine_names.UNREGISTERED_TAINT):
        assert not slots.usable(_node(taints=[{"key": key, "effect": "NoSchedule"}]))
    deleting = _node()
    deleting["metadata"]["deletionTimestamp"] = "2026-11-27T12:59:00Z"
    assert not slots.usable(deleting)
    not_ready = _node()
    not_ready["status"]["conditions"][0]["status"] = "Unknown"
    assert not slots.usable(not_ready)
