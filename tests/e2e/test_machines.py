"""NodePools and Machines through the real Metacontroller and API server, moto as EC2.

A Node appears because devcluster's kubelet stand-in reads each running
instance's user data and registers it, as a kubelet would; nothing else of
the lifecycle is simulated. node-detacher runs too, so a terminating
Machine's Node leaves its target group first.
"""
from __future__ import annotations

import time

import pytest

from devcluster import fleet
from devcluster.api import wait_for
from devcluster.cluster import CLUSTER_NAME
from devcluster.pools import (MACHINES, POOLS, condition_status, live_machines, pool_instances, pool_machines,
                              pool_manifest, pool_subnet)
from hooks.machines import names
from tests.e2e.conftest import unique
from worlds.envelope import hook_request

pytestmark = pytest.mark.e2e

NEVER_REGISTER = ("#!/bin/bash\n# --nodewarden-standin=never-register\n"
                  "/etc/eks/bootstrap.sh '{{ cluster_name }}' --kubelet-extra-args '{{ kubelet_args }}'\n")


def _running(cloud, pool) -> set[str]:
    return {i for i, state in pool_instances(cloud, pool).items() if state in ("pending", "running")}


@pytest.fixture
def pools(api):
    created: list[str] = []
    yield created
    for name in created:
        api.delete(f"{POOLS}/{name}")


def test_a_pool_launches_registers_terminates_and_cleans_up(api, cloud, pools):
    name = unique("pool")
    pool = pool_manifest(name, pool_subnet(cloud), 3)
    # The template changes below: drift is reported, not replaced (tests/e2e/test_disruption.py replaces it).
    pool["spec"]["disruption"] = {"budgets": [{"nodes": "0", "reasons": ["Drifted"]}, {"nodes": "100%"}]}
    api.create(POOLS, pool)
    pools.append(name)

    def initialized():
        machines = live_machines(pool_machines(api, name))
        return len(machines) == 3 and all(condition_status(m, names.INITIALIZED) == "True" for m in machines) and machines
    machines = wait_for(initialized, "3 Machines Initialized", timeout=90)
    assert len(_running(cloud, name)) == 3
    for machine in machines:
        status = machine["status"]
        assert status["capacity"]["cpu"] == "2" and status["zone"] == fleet.ZONE
        node = api.get(f"/api/v1/nodes/{status['nodeName']}")
        assert node["spec"]["providerID"] == status["providerID"]
        assert node["metadata"]["labels"]["e2e-pool"] == name
        assert node["metadata"]["labels"][names.POOL_LABEL] == name
        assert names.UNREGISTERED_TAINT not in {t["key"] for t in node["spec"].get("taints") or []}
    # The pool's status follows its Machines' at its next sync.
    wait_for(lambda: ((api.get(f"{POOLS}/{name}").get("status") or {}).get("machines") or {}).get("Initialized") == 3,
             "the pool counting 3 Initialized", timeout=30)

    # One Machine goes: its Node leaves the target group, loses its pod, and the instance ends.
    group = fleet.create_target_group(cloud, unique("mtg"), CLUSTER_NAME)
    instance_ids = [m["status"]["instanceID"] for m in machines]
    cloud.elbv2.register_targets(TargetGroupArn=group, Targets=[{"Id": i, "Port": fleet.NODE_PORT}
                                                                for i in instance_ids])
    leaving = machines[0]
    node_name, instance_id = leaving["status"]["nodeName"], leaving["status"]["instanceID"]
    api.create("/api/v1/namespaces/default/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": unique("on-machine")},
        "spec": {"nodeName": node_name, "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}})
    api.delete(f"{MACHINES}/{leaving['metadata']['name']}")

    def cordoned():
        node = api.get_or_none(f"/api/v1/nodes/{node_name}")
        return node is None or (node["spec"].get("unschedulable")
                                and names.DISRUPTED_TAINT in {t["key"] for t in node["spec"].get("taints") or []})
    wait_for(cordoned, "Node cordoned and tainted disrupted", timeout=30)
    wait_for(lambda: instance_id not in {i for i, _ in fleet.targets(cloud, group)},
             "instance out of the target group", timeout=60)
    wait_for(lambda: pool_instances(cloud, name).get(instance_id) == "terminated", "instance terminated", timeout=120)
    wait_for(lambda: api.get_or_none(f"/api/v1/nodes/{node_name}") is None, "Node deleted", timeout=60)
    wait_for(lambda: api.get_or_none(f"{MACHINES}/{leaving['metadata']['name']}") is None, "Machine gone", timeout=60)
    pods_left = api.get(f"/api/v1/pods?fieldSelector=spec.nodeName%3D{node_name}")["items"]
    assert not pods_left
    # The others stayed in the target group; the pool replaced the one that went.
    assert {i for i, _ in fleet.targets(cloud, group)} == set(instance_ids[1:])
    wait_for(lambda: len([m for m in live_machines(pool_machines(api, name)) if condition_status(m, names.INITIALIZED) == "True"]) == 3,
             "a replacement Machine Initialized", timeout=90)

    # Scale-down takes Machines that never registered first: new ones now never register.
    api.patch(f"{POOLS}/{name}", {"spec": {"replicas": 4, "template": {"spec": {"userData": NEVER_REGISTER}}}})
    wait_for(lambda: len(live_machines(pool_machines(api, name))) == 4, "a fourth Machine", timeout=30)
    unregistered = wait_for(lambda: [m["metadata"]["name"] for m in live_machines(pool_machines(api, name))
                                     if condition_status(m, names.LAUNCHED) == "True"
                                     and condition_status(m, names.REGISTERED) != "True"], "a launched, unregistered Machine",
                            timeout=60)
    registered = sorted((m for m in live_machines(pool_machines(api, name)) if condition_status(m, names.REGISTERED) == "True"),
                        key=lambda m: m["metadata"]["creationTimestamp"])
    drifted = [m for m in registered if condition_status(m, names.DRIFTED) == "True"]
    assert drifted, "the template changed under the registered Machines"
    api.patch(f"{POOLS}/{name}", {"spec": {"replicas": 2}})
    expected = {m["metadata"]["name"] for m in registered[-2:]}
    wait_for(lambda: {m["metadata"]["name"] for m in live_machines(pool_machines(api, name))} == expected,
             f"the unregistered {unregistered} and the oldest registered removed first", timeout=30)

    # Deleting the pool drains and terminates every Machine; nothing is left in EC2.
    api.delete(f"{POOLS}/{name}")
    wait_for(lambda: api.get_or_none(f"{POOLS}/{name}") is None, "NodePool gone", timeout=180)
    assert not pool_machines(api, name)
    assert not _running(cloud, name), pool_instances(cloud, name)


def test_a_machine_that_never_registers_is_replaced_after_its_ttl(api, cloud, pools):
    name = unique("ttl")
    api.create(POOLS, pool_manifest(name, pool_subnet(cloud), 1, registrationTTL="15s",
                            template_spec={"userData": NEVER_REGISTER}))
    pools.append(name)
    first = wait_for(lambda: next((m for m in pool_machines(api, name) if m.get("status", {}).get("instanceID")), None),
                     "a launched Machine", timeout=30)
    first_name, first_instance = first["metadata"]["name"], first["status"]["instanceID"]
    wait_for(lambda: api.get_or_none(f"{MACHINES}/{first_name}") is None, "the Machine deleted after its TTL",
             timeout=90)
    assert pool_instances(cloud, name)[first_instance] == "terminated"
    wait_for(lambda: [m for m in live_machines(pool_machines(api, name)) if m["metadata"]["name"] != first_name],
             "a replacement Machine", timeout=30)
    reasons = {e["reason"] for e in api.get(f"/api/v1/events?fieldSelector=involvedObject.name%3D{first_name}")["items"]}
    assert "RegistrationTimedOut" in reasons


def _one_initialized(api, cloud, pools, prefix: str, **spec) -> dict:
    """A pool of one Machine, once that Machine is Initialized: the Machine as the API server has it."""
    name = unique(prefix)
    api.create(POOLS, pool_manifest(name, pool_subnet(cloud), 1, **spec))
    pools.append(name)
    return wait_for(lambda: next((m for m in live_machines(pool_machines(api, name)) if condition_status(m, names.INITIALIZED) == "True"),
                                 None), "a Machine Initialized", timeout=90)


def _untouched(api, cloud, machine: dict) -> None:
    """The Machine is live and Registered, its Node schedulable and untainted, its instance running."""
    now = api.get(f"{MACHINES}/{machine['metadata']['name']}")
    assert now["metadata"]["uid"] == machine["metadata"]["uid"] and not now["metadata"].get("deletionTimestamp")
    assert condition_status(now, names.REGISTERED) == "True" and condition_status(now, names.TERMINATING) is None
    node = api.get(f"/api/v1/nodes/{machine['status']['nodeName']}")
    assert not node["spec"].get("unschedulable")
    assert names.DISRUPTED_TAINT not in {t["key"] for t in node["spec"].get("taints") or []}
    pool = machine["metadata"]["labels"][names.POOL_LABEL]
    assert pool_instances(cloud, pool)[machine["status"]["instanceID"]] == "running"


def test_a_forged_finalize_of_a_live_machine_changes_nothing(api, cloud, door, pools):
    """The API server's own copy of a live Machine, with only finalizing: true invented, sent to a hook
    server that takes only authenticated HTTPS: without the token it is refused at the door; with the
    token the Machine is still not being deleted, so nothing is cordoned, drained or terminated."""
    machine = _one_initialized(api, cloud, pools, "forged")
    live = api.get(f"{MACHINES}/{machine['metadata']['name']}")
    body = hook_request("machine", live, finalizing=True)
    refused = door.session(token=False).post(f"{door.url}/machine/finalize", json=body, timeout=10)
    assert refused.status_code == 401, refused.text
    answers = []
    for _ in range(3):
        reply = door.session().post(f"{door.url}/machine/finalize", json=body, timeout=10)
        assert reply.status_code == 200, reply.text
        answers.append(reply.json())
        time.sleep(0.5)
    time.sleep(2)
    _untouched(api, cloud, live)
    for answer in answers:
        assert answer.get("finalized") is False and "not verified" in answer["status"].get("lastError", ""), answer


def test_a_node_that_loses_its_machine_label_keeps_its_machine(api, cloud, pools):
    """A label is the kubelet's and users' to change: the Machine knows its Node by name and uid. Its
    registrationTTL has long passed by then; the Machine stays, and so do its Node and instance."""
    machine = _one_initialized(api, cloud, pools, "relabel", registrationTTL="20s")
    launched = time.monotonic()
    api.patch(f"/api/v1/nodes/{machine['status']['nodeName']}", {"metadata": {"labels": {names.MACHINE_LABEL: None}}})
    # Past the TTL, and past a resync (30 s) of the Machine whatever its watch saw.
    while time.monotonic() < launched + 40:
        _untouched(api, cloud, machine)
        time.sleep(2)
    _untouched(api, cloud, machine)
