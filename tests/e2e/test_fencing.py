"""Fencing end to end: real API server, kube-controller-manager (node lifecycle,
taint eviction, pod GC, attach/detach, StatefulSet, Deployment), scheduler,
Metacontroller, the hook server, and moto's EC2.

A node dies: out of kwok's selector, its Lease is no longer renewed and the
node lifecycle controller turns Ready Unknown. With a NodeFencingPolicy,
nodewarden powers its instance off, taints it out-of-service, and
kube-controller-manager's pod GC removes its pods, so the StatefulSet's
replacement is bound to a healthy node by the scheduler. The same scenario on a
node no policy selects, failed at the same moment, is the baseline: its
StatefulSet pod does not move.
"""
from __future__ import annotations

import time

import pytest

from devcluster import failover, fleet, kwok
from devcluster.api import STRATEGIC, wait_for

pytestmark = pytest.mark.e2e

HEALTHY = 3


@pytest.fixture(scope="module")
def healthy_nodes(api, cloud):
    """Nodes that stay Ready (kwok renews their Leases), where replacements can go."""
    names = []
    for instance_id in fleet.launch_instances(cloud, HEALTHY):
        name = f"healthy-{instance_id[-6:]}"
        failover.create_node(api, name, instance_id)
        names.append(name)
    yield names
    for name in names:
        api.delete(f"/api/v1/nodes/{name}")


def _condition(node: dict, ctype: str) -> dict:
    return next((c for c in (node.get("status") or {}).get("conditions") or [] if c["type"] == ctype), {})


def test_fenced_node_recovers_its_statefulset_and_the_baseline_does_not(api, cloud, healthy_nodes, namespace):
    fenced = failover.Trial(api, cloud, namespace, healthy_nodes, fenced=True, duration="30s")
    baseline = failover.Trial(api, cloud, namespace, healthy_nodes, fenced=False)
    try:
        # Watch until the fenced StatefulSet moved, then 60s more for the baseline.
        def stop_when(trials):
            moved = fenced.timings.get("statefulset_bound_elsewhere")
            return moved is not None and fenced.timings.get("volume_attachment_gone") is not None and \
                (fenced.failed_at + moved + 60) < time.time()

        failover.run_trials(api, healthy_nodes, [fenced, baseline], timeout=180, stop_when=stop_when)
        marks = fenced.timings
        print("fenced:", marks, "baseline:", baseline.timings)

        # nodewarden: power-off confirmed in moto, the out-of-service taint, then the pods moved.
        assert "statefulset_bound_elsewhere" in marks, f"StatefulSet pod never moved: {marks}"
        assert marks["statefulset_bound_elsewhere"] < 90
        assert marks["instance_stopped"] >= 30, "never before the policy's 30s duration"
        assert marks["instance_stopped"] <= marks["out_of_service_taint"] <= marks["statefulset_pod_gone"], \
            "the RWO pod went only after the power-off was confirmed"
        assert fenced.instance_state() == "stopped"
        replacement = fenced.workloads.replaced_elsewhere(fenced.workloads.statefulset)
        assert replacement["spec"]["nodeName"] in healthy_nodes
        # The Deployment pod (nodewarden.io/failover=immediate) failed over at the duration, without fencing.
        assert "deployment_bound_elsewhere" in marks
        # kube-controller-manager's attach/detach controller detached the volume of the out-of-service node.
        assert "volume_attachment_gone" in marks

        node = api.get(f"/api/v1/nodes/{fenced.node}")
        for ctype in ("FencingTriaged", "FencingRequired", "FencingComplete"):
            assert _condition(node, ctype).get("status") == "True", ctype
        keys = {t["key"] for t in node["spec"].get("taints") or []}
        assert {"node.kubernetes.io/fencingtriaged", "node.kubernetes.io/fencingrequired",
                "node.kubernetes.io/out-of-service"} <= keys
        request = fenced.fencing_request()
        assert request["status"]["providerStatus"]["instanceID"] == fenced.instance_id
        assert any(c["type"] == "FencingSucceeded" and c["status"] == "True" for c in request["status"]["conditions"])

        # Baseline: same failure, no policy. The StatefulSet pod stays (terminating at most), its volume attached.
        assert "statefulset_bound_elsewhere" not in baseline.timings
        assert baseline.instance_state() == "running"
        base_node = api.get(f"/api/v1/nodes/{baseline.node}")
        assert not _condition(base_node, "FencingTriaged"), "no policy: nodewarden writes nothing"
        assert baseline.workloads.volume_attachment() is not None
        events = api.get(f"/api/v1/namespaces/{namespace}/events")["items"]
        assert any(e["reason"] == "FailedOver" for e in events), "one Event per failed-over pod"
    finally:
        fenced.cleanup()
        baseline.cleanup()


def test_node_back_to_ready_clears_everything(api, cloud, healthy_nodes, namespace):
    """Fenced with action Off; an admin starts the instance; the node is Ready again
    (back in kwok's hands): conditions and taints removed, the out-of-service taint
    too, the FencingRequest gone."""
    trial = failover.Trial(api, cloud, namespace, healthy_nodes, fenced=True, duration="5s")
    try:
        failover.run_trials(api, healthy_nodes, [trial], timeout=90,
                            stop_when=lambda ts: "statefulset_bound_elsewhere" in trial.timings
                            and "volume_attachment_gone" in trial.timings)
        request = wait_for(lambda: (trial.fencing_request() or {}).get("status", {}).get("phase") == "Succeeded"
                           and trial.fencing_request(), "FencingRequest Succeeded", timeout=60)
        assert request["status"]["recovery"]["outOfServiceTaint"] == "Applied"

        cloud.ec2.start_instances(InstanceIds=[trial.instance_id])
        # While fenced, kwok's node Stages kept nodewarden's conditions; now its
        # kubelet is back: a Lease renewed again, Ready=True since now.
        node = api.get(f"/api/v1/nodes/{trial.node}")
        assert {"FencingTriaged", "FencingRequired", "FencingComplete"} <= {
            c["type"] for c in node["status"]["conditions"]}
        kwok.manage(api, trial.node)
        back = kwok.ready(kwok.wait_ready(api, trial.node))
        assert failover.epoch(back["lastTransitionTime"]) >= trial.failed_at, "Ready since before it died"

        def clean() -> bool:
            node = api.get(f"/api/v1/nodes/{trial.node}")
            ours = {"FencingTriaged", "FencingRequired", "FencingComplete"}
            taints = {t["key"] for t in node["spec"].get("taints") or []}
            return not any(_condition(node, c) for c in ours) and not taints & {
                "node.kubernetes.io/fencingtriaged", "node.kubernetes.io/fencingrequired",
                "node.kubernetes.io/out-of-service"} and trial.fencing_request() is None

        wait_for(clean, "conditions, taints and the FencingRequest gone", timeout=60, interval=0.5)
    finally:
        trial.cleanup()


def test_deleting_a_request_half_way_leaves_no_taint(api, cloud, healthy_nodes, namespace):
    """An admin fences a node on demand, then deletes the request: the finalize hook untaints."""
    (instance_id,) = fleet.launch_instances(cloud, 1)
    name = f"by-hand-{instance_id[-6:]}"
    failover.create_node(api, name, instance_id)
    try:
        failover.kill(api, [name])
        failover.fence_by_hand(api, name)
        assert cloud.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0][
            "State"]["Name"] == "stopped"
        api.delete(f"{failover.REQUESTS}/{name}")
        wait_for(lambda: api.get_or_none(f"{failover.REQUESTS}/{name}") is None, "request deleted", timeout=30)
        taints = api.get(f"/api/v1/nodes/{name}")["spec"].get("taints") or []
        assert not any(t["key"] == "node.kubernetes.io/out-of-service" for t in taints)
    finally:
        api.delete(f"/api/v1/nodes/{name}")


def test_storm_guard_holds_fencing_back(api, cloud):
    """Two of three nodes of a policy (maxUnhealthy 1) are Unknown: neither is fenced.

    The two die together, yet the node lifecycle controller may see their Leases
    expire a few seconds apart (each was renewed on its own schedule); a policy
    already in place with a 3 s duration could fence the first alone, rightly.
    So the policy comes once both are Unknown."""
    scenario, names, instances = failover.scenario_nodes(api, cloud, "storm", 3)
    try:
        failover.kill(api, names[:2])
        api.create(failover.POLICIES, failover.policy_manifest(scenario, scenario, duration="3s", max_unhealthy=1))

        def holding():
            policy = api.get(f"{failover.POLICIES}/{scenario}")
            guard = next((c for c in policy.get("status", {}).get("conditions") or [] if c["type"] == "StormGuard"), {})
            return guard.get("status") == "True" and policy["status"]["unhealthyNodes"] == 2 and policy

        policy = wait_for(holding, "storm guard holding", timeout=30, interval=0.5)
        assert policy["status"]["observedNodes"] == 3 and policy["status"]["maxUnhealthyNodes"] == 1

        def held(name):
            cond = _condition(api.get(f"/api/v1/nodes/{name}"), "FencingRequired")
            return cond.get("status") == "False" and cond.get("reason") == "StormGuard"

        for name in names[:2]:
            wait_for(lambda n=name: held(n), f"{name} held back", timeout=30, interval=0.5)
            assert api.get_or_none(f"{failover.REQUESTS}/fence-{name}") is None
        for instance_id in instances:
            state = cloud.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
            assert state["State"]["Name"] == "running"
        events = api.get("/api/v1/namespaces/default/events")["items"]
        assert any(e["reason"] == "StormGuardHolding" and e["involvedObject"]["name"] == scenario for e in events)
    finally:
        api.delete(f"{failover.POLICIES}/{scenario}")
        for name in names:
            api.delete(f"/api/v1/nodes/{name}")


UNHEALTHY_NODES = "/apis/nodewarden.io/v1alpha1/unhealthynodes"


def test_a_record_saying_ready_does_not_hide_a_dead_node_from_the_storm_guard(api, cloud):
    """Three of four nodes of a policy (maxUnhealthy 1) die together. Two of them have UnhealthyNode records
    saying Ready (stale, or forged by anyone who may write them): the count list still sees them NotReady,
    so the guard holds, and the third, recorded by node-fencing, is not fenced either."""
    scenario, names, instances = failover.scenario_nodes(api, cloud, "stale", 4)
    hidden, dead = names[:2], names[:3]
    for name in hidden:
        api.create(UNHEALTHY_NODES, {
            "apiVersion": "nodewarden.io/v1alpha1", "kind": "UnhealthyNode",
            "metadata": {"name": name, "labels": {failover.SCENARIO_LABEL: scenario}},
            "spec": {"conditions": [{"type": "Ready", "status": "True",
                                     "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}]}})
    try:
        failover.kill(api, dead)
        api.create(failover.POLICIES, failover.policy_manifest(scenario, scenario, duration="5s", max_unhealthy=1))

        def holding():
            status = api.get(f"{failover.POLICIES}/{scenario}").get("status") or {}
            guard = next((c for c in status.get("conditions") or [] if c["type"] == "StormGuard"), {})
            return guard.get("status") == "True" and guard.get("reason") == "TooManyUnhealthy" and status

        status = wait_for(holding, "the storm guard holding on the list's word", timeout=30, interval=0.5)
        assert status["unhealthyNodes"] == 3 and status["observedNodes"] == 4
        time.sleep(15)  # past the 5 s duration of every dead node
        assert all(api.get_or_none(f"{failover.REQUESTS}/fence-{n}") is None for n in dead)
        states = {i["InstanceId"]: i["State"]["Name"] for r in cloud.ec2.describe_instances(
            InstanceIds=instances)["Reservations"] for i in r["Instances"]}
        assert set(states.values()) == {"running"}, states
    finally:
        api.delete(f"{failover.POLICIES}/{scenario}")
        for name in names:
            api.delete(f"/api/v1/nodes/{name}")
        for name in hidden:
            api.delete(f"{UNHEALTHY_NODES}/{name}")


def test_a_fencing_required_condition_written_by_anyone_starts_nothing(api, cloud):
    """A nodes/status writer sets FencingRequired=True on a NotReady node 10 minutes before its policy's
    duration is up, while the storm guard holds: only a FencingRequest of ours proves fencing in flight, so
    none is made, and node-fencing writes the condition back as it stands."""
    (instance,) = fleet.launch_instances(cloud, 1)
    scenario = f"claim-{instance[-6:]}"
    name = f"{scenario}-0"
    api.create("/api/v1/nodes", fleet.node_manifest(name, instance, {failover.SCENARIO_LABEL: scenario}, alive=False))
    try:
        api.create(failover.POLICIES, failover.policy_manifest(scenario, scenario, duration="10m", max_unhealthy=0))
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        api.patch(f"/api/v1/nodes/{name}/status", {"status": {"conditions": [
            {"type": "Ready", "status": "False", "reason": "KubeletNotReady", "message": "x",
             "lastHeartbeatTime": stamp, "lastTransitionTime": stamp},
            {"type": "FencingRequired", "status": "True", "reason": "FencingRequested",
             "message": f"FencingRequest nodewarden-system/fence-{name} powers the node off",
             "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}]}}, content_type=STRATEGIC)

        def written_back():
            cond = _condition(api.get(f"/api/v1/nodes/{name}"), "FencingRequired")
            return cond.get("status") == "False" and cond
        cond = wait_for(written_back, "node-fencing's own FencingRequired", timeout=30, interval=0.5)
        assert cond["reason"] in ("WaitingForDuration", "StormGuard", "PolicyCountPending"), cond
        time.sleep(10)
        assert api.get_or_none(f"{failover.REQUESTS}/fence-{name}") is None
        assert cloud.ec2.describe_instances(InstanceIds=[instance])["Reservations"][0]["Instances"][0][
            "State"]["Name"] == "running"
    finally:
        api.delete(f"{failover.POLICIES}/{scenario}")
        api.delete(f"/api/v1/nodes/{name}")
