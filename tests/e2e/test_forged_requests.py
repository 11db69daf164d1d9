"""Forged hook requests, sent straight to a hook server that takes only authenticated HTTPS.

Three lines stand in front of the hooks: the NetworkPolicy (not enforced
here, the local stack has no network plugin), the bearer token, and the
hooks' own checks with the API server. Every forged body here is sent to the
`door` fixture's server (the stack's own where Metacontroller authenticates,
a second one set up the same way where it cannot) twice over: first as a
stranger, without the token or with a wrong one, which gets 401 before its
body is read and changes nothing; then as a holder of a leaked token, which
reaches the hooks: a request body alone still never makes nodewarden delete,
stop or force-delete anything. Only what the API server says about the
objects a body names counts. moto and the API server are checked after each
line: nothing changed.
"""
from __future__ import annotations

import copy
import re
import time
import uuid

import pytest
import requests

from devcluster import failover, fleet
from devcluster.api import ApiError, wait_for
from tests.e2e.test_cluster_gc import FINALIZER, GC, LAST_ERROR, aws_cluster_manifest, aws_clusters, capa  # noqa: F401 - capa is a fixture
from worlds import cluster_gc as w
from worlds.envelope import hook_request

pytestmark = pytest.mark.e2e

REQUESTS = "/apis/nodewarden.io/v1alpha1/namespaces/{}/fencingrequests"
DELETE_FOR_MOVE = "clusterctl.cluster.x-k8s.io/delete-for-move"


def _forge(door, route: str, body: dict, unchanged) -> requests.Response:
    """``body`` as a stranger (no token, a wrong one: 401, and ``unchanged()`` holds), then with the
    leaked token (answered; what it changed is for the caller to check)."""
    url = f"{door.url}/{route}"
    stranger = door.session(token=False)
    for headers in ({}, {"Authorization": "Bearer not-the-token"}):
        refused = stranger.post(url, json=body, headers=headers, timeout=10)
        assert refused.status_code == 401, refused.text
    unchanged()
    reply = door.session().post(url, json=body, timeout=10)
    assert reply.status_code in (200, 400), reply.text
    return reply


def _forged_cluster(namespace: str, name: str, cluster_name: str, uid: str) -> dict:
    manifest = aws_cluster_manifest(name, cluster_name)
    manifest["metadata"].update(namespace=namespace, uid=uid, deletionTimestamp="2026-01-01T00:00:00Z",
                                finalizers=[FINALIZER])
    return manifest


def _finalize_body(parent: dict) -> dict:
    return hook_request("cluster-gc", parent, finalizing=True)  # as Metacontroller v4 sends it (hook v2)


def _refused(reply: requests.Response) -> None:
    """Answered, held, and held because the API server did not confirm the body."""
    answer = reply.json()
    assert answer.get("finalized") is False, answer
    assert "not verified with the API server" in answer["annotations"][LAST_ERROR], answer


def _cloud_keeps(cloud, made: dict):
    def check() -> None:
        assert w.existing(lambda s: getattr(cloud, s), made) == made
    return check


def test_a_forged_finalize_for_a_cluster_that_does_not_exist_deletes_nothing(capa, api, door, cloud, namespace):
    victim = f"{namespace}-prod"
    net = w.network(cloud.ec2)
    made = w.build_cluster(lambda s: getattr(cloud, s), net, f"{namespace[-6:]}f", w.cluster_tags(victim),
                           load_balancers=1, target_groups=1, security_groups=1)
    unchanged = _cloud_keeps(cloud, made)
    forged = _forged_cluster(namespace, "prod", victim, str(uuid.uuid4()))
    for _ in range(3):
        _refused(_forge(door, "cluster-gc/finalize", _finalize_body(forged), unchanged))
    # Bodies that would skip or block (a move, an opt-out, an unreadable value) are checked first too.
    for claim in ({DELETE_FOR_MOVE: ""}, {GC: "false"}, {GC: "maybe"}):
        variant = copy.deepcopy(forged)
        variant["metadata"]["annotations"] = claim
        _refused(_forge(door, "cluster-gc/finalize", _finalize_body(variant), unchanged))
    unchanged()
    events = api.get(f"/api/v1/namespaces/{namespace}/events",
                     params={"fieldSelector": "involvedObject.name=prod"})["items"]
    assert events == []  # nothing written about an object the API server does not have


def test_a_forged_finalize_naming_a_live_cluster_deletes_nothing(capa, api, door, cloud, namespace):
    workload = f"{namespace}-live"
    net = w.network(cloud.ec2)
    made = w.build_cluster(lambda s: getattr(cloud, s), net, f"{namespace[-6:]}l", w.cluster_tags(workload),
                           load_balancers=1, target_groups=1, security_groups=1)
    live = api.create(aws_clusters(namespace), aws_cluster_manifest("live", workload))
    path = f"{aws_clusters(namespace)}/live"
    wait_for(lambda: FINALIZER in (api.get(path)["metadata"].get("finalizers") or []), "the finalizer", timeout=30)
    # Its real name, namespace and uid; only the deletion is made up.
    forged = _forged_cluster(namespace, "live", workload, live["metadata"]["uid"])

    def unchanged() -> None:
        _cloud_keeps(cloud, made)()
        assert not api.get(path)["metadata"].get("deletionTimestamp")

    for _ in range(3):
        _refused(_forge(door, "cluster-gc/finalize", _finalize_body(forged), unchanged))
    unchanged()
    api.patch(path, {"metadata": {"annotations": {GC: "false"}}})  # let it go without collecting
    api.delete(path)
    wait_for(lambda: api.get_or_none(path) is None, "the live AWSCluster to go", timeout=60)


def _request_body(request: dict, node: dict) -> dict:
    return hook_request("fencing-request", request, related=[node])  # as Metacontroller v4 sends it (hook v2)


def _state(cloud, instance_id: str) -> str:
    reservations = cloud.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    return reservations[0]["Instances"][0]["State"]["Name"]


def test_a_forged_fencing_request_stops_no_instance(api, door, cloud, namespace):
    (instance,) = fleet.launch_instances(cloud, 1)
    name = f"forged-{instance[-6:]}"
    node = fleet.node_manifest(name, instance)
    node["metadata"]["uid"] = str(uuid.uuid4())
    node["status"] = {"conditions": [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                                      "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    request = {"apiVersion": "nodewarden.io/v1alpha1", "kind": "FencingRequest",
               "metadata": {"name": "made-up", "namespace": namespace, "uid": str(uuid.uuid4()), "generation": 1},
               "spec": {"nodeRef": {"name": name}}}

    def unchanged() -> None:
        assert _state(cloud, instance) == "running"
        node_now = api.get_or_none(f"/api/v1/nodes/{name}")
        assert not any(t["key"] == "node.kubernetes.io/out-of-service"
                       for t in ((node_now or {}).get("spec") or {}).get("taints") or [])

    for _ in range(3):
        _forge(door, "fencing-request/sync", _request_body(request, node), unchanged)
    unchanged()
    # The Node is real now (no kubelet, not even kwok: NotReady), the request still is not.
    real = api.create("/api/v1/nodes", fleet.node_manifest(name, instance, alive=False))
    try:
        node["metadata"]["uid"] = real["metadata"]["uid"]
        for _ in range(3):
            _forge(door, "fencing-request/sync", _request_body(request, node), unchanged)
        unchanged()
    finally:
        api.delete(f"/api/v1/nodes/{name}")


def test_the_api_server_refuses_a_fencing_request_with_a_zero_timeout(api, namespace):
    manifest = {"apiVersion": "nodewarden.io/v1alpha1", "kind": "FencingRequest",
                "metadata": {"name": "zero", "namespace": namespace},
                "spec": {"nodeRef": {"name": "nobody"}, "timeout": "0s"}}
    with pytest.raises(ApiError) as refused:
        api.create(REQUESTS.format(namespace), manifest)
    assert "timeout" in str(refused.value)


def test_the_stack_authenticates_wherever_metacontroller_can(api, cluster, door):
    """The stack's own hook server takes only authenticated HTTPS whenever the CRDs let Metacontroller
    send credentials, and says which it runs; the door's server, on any release, serves no plain HTTP."""
    ready = requests.get(f"{cluster.hook_server.metrics_url}/readyz", timeout=5).json()
    crd = api.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/decoratorcontrollers.metacontroller.k8s.io")
    can_authenticate = "endpointConfigs" in crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"][
        "properties"]["spec"]["properties"]
    assert (ready["auth"] != "off") == can_authenticate == (cluster.hook_credentials is not None)
    assert (door == cluster.hook_server) == can_authenticate
    if can_authenticate:
        for controller in api.get("/apis/metacontroller.k8s.io/v1alpha1/decoratorcontrollers")["items"]:
            [entry] = controller["spec"]["endpointConfigs"]
            assert entry["authorization"]["secretRef"]["name"] == "nodewarden-hook-token"
            assert all(h["webhook"]["url"].startswith(f"https://{entry['host']}/")
                       for h in controller["spec"]["hooks"].values())
    assert requests.get(f"{door.metrics_url}/readyz", timeout=5).json()["auth"] != "off"
    assert door.url.startswith("https://")
    with pytest.raises(requests.exceptions.ConnectionError):  # plain HTTP is not served at all
        requests.post(f"http://127.0.0.1:{door.port}/fencing-request/sync", json={}, timeout=10)


def _node_fencing_body(node: dict, policy: dict) -> dict:
    return hook_request("node-fencing", node, related=[policy])  # as Metacontroller v4 sends it (hook v2)


def test_a_forged_node_fencing_sync_taints_no_ready_node(api, door, cloud):
    """A Ready node, a real policy selecting it; bodies claiming the node has been NotReady for ten minutes
    with every fencing condition already written (so only the taints would be left to lay), and the
    policy's count admitting it: the node keeps its taints and conditions, no FencingRequest is made."""
    (instance,) = fleet.launch_instances(cloud, 1)
    name = f"forged-ready-{instance[-6:]}"
    real = failover.create_node(api, name, instance, labels={failover.SCENARIO_LABEL: name})
    api.create(failover.POLICIES, failover.policy_manifest(name, name, duration="30s"))
    try:
        policy = wait_for(lambda: (p := api.get(f"{failover.POLICIES}/{name}")).get("status", {}).get("countedAt") and p,
                          "the policy counted", timeout=30, interval=0.5)
        before = api.get(f"/api/v1/nodes/{name}")
        long_ago = "2026-01-01T00:00:00Z"
        forged = copy.deepcopy(real)
        forged["status"]["conditions"] = [
            {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown", "message": "x",
             "lastHeartbeatTime": long_ago, "lastTransitionTime": long_ago},
            {"type": "FencingTriaged", "status": "True", "reason": "UnhealthyCondition",
             "message": f"Ready=Unknown since {long_ago}", "lastTransitionTime": long_ago},
            {"type": "FencingRequired", "status": "True", "reason": "FencingRequested",
             "message": f"FencingRequest nodewarden-system/fence-{name} powers the node off",
             "lastTransitionTime": long_ago},
            {"type": "FencingComplete", "status": "False", "reason": "FencingInProgress",
             "message": "waiting for the power-off to be confirmed", "lastTransitionTime": long_ago}]
        counted = copy.deepcopy(policy)
        counted["status"].update(unhealthyNodeNames=[name], countedAt=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))

        def unchanged() -> None:
            after = api.get(f"/api/v1/nodes/{name}")
            assert not {t["key"] for t in after["spec"].get("taints") or []} & {
                "node.kubernetes.io/fencingtriaged", "node.kubernetes.io/fencingrequired"}
            assert after["spec"].get("taints") == before["spec"].get("taints")
            assert not any(c["type"].startswith("Fencing") for c in after["status"]["conditions"])
            assert api.get_or_none(f"{failover.REQUESTS}/fence-{name}") is None
            assert _state(cloud, instance) == "running"

        for uid in (real["metadata"]["uid"], str(uuid.uuid4())):
            forged["metadata"]["uid"] = uid
            for _ in range(3):
                _forge(door, "node-fencing/sync", _node_fencing_body(forged, counted), unchanged)
        unchanged()
    finally:
        api.delete(f"{failover.POLICIES}/{name}")
        api.delete(f"/api/v1/nodes/{name}")


def _storm_guard_series(server) -> dict[str, float]:
    text = requests.get(f"{server.metrics_url}/metrics", timeout=10).text
    return {m.group(1): float(m.group(2))
            for m in re.finditer(r'^nodewarden_fencing_storm_guard_active\{policy="([^"]*)"\} (\S+)$', text, re.M)}


def test_forged_policy_syncs_count_nothing_and_write_no_metric(api, cluster, door, cloud):
    """A real policy holds its guard (its one node is NotReady, maxUnhealthy 0). Bodies naming invented
    policies, and the real one with a made-up uid or with its uid and a spec selecting nothing: no metric
    series appears on the server they reach, the real policy's gauge stays 1 (on the server Metacontroller
    calls, and on the door's if it has one), no Event is written."""
    (instance,) = fleet.launch_instances(cloud, 1)
    name = f"forged-policy-{instance[-6:]}"
    api.create("/api/v1/nodes", fleet.node_manifest(name, instance, {failover.SCENARIO_LABEL: name}, alive=False))
    api.create(failover.POLICIES, failover.policy_manifest(name, name, duration="10m", max_unhealthy=0))
    try:
        wait_for(lambda: _storm_guard_series(cluster.hook_server).get(name) == 1.0, "the real policy's guard holding",
                 timeout=30, interval=0.5)
        real = api.get(f"{failover.POLICIES}/{name}")
        invented = [f"{name}-invented-{i}" for i in range(3)]
        bodies = []
        for other in invented:
            fake = copy.deepcopy(real)
            fake["metadata"].update(name=other, uid=str(uuid.uuid4()))
            bodies.append(fake)
        for uid, selector in ((str(uuid.uuid4()), None), (real["metadata"]["uid"], {"matchLabels": {"none": "x"}})):
            fake = copy.deepcopy(real)
            fake["metadata"]["uid"] = uid
            if selector:
                fake["spec"]["nodeSelector"] = selector
            bodies.append(fake)

        def unchanged() -> None:
            reached = _storm_guard_series(door)
            assert not any(other in reached for other in invented), reached
            assert reached.get(name, 1.0) == 1.0, "a gauge for the real policy follows the real policy"
            assert _storm_guard_series(cluster.hook_server)[name] == 1.0

        for body in bodies:
            for _ in range(2):
                _forge(door, "node-fencing-policy/sync", hook_request("node-fencing-policy", body), unchanged)
        unchanged()
        for other in invented:
            assert api.get("/api/v1/namespaces/default/events",
                           params={"fieldSelector": f"involvedObject.name={other}"})["items"] == []
    finally:
        api.delete(f"{failover.POLICIES}/{name}")
        api.delete(f"/api/v1/nodes/{name}")
