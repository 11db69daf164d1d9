"""Forged hook requests, sent straight to the hook server by a caller that gets through the door.

Two lines stand before these: the NetworkPolicy (not enforced here, the local
stack has no network plugin) and, where Metacontroller can send one, the
bearer token (test_a_request_without_credentials_changes_nothing). These
tests prove the line behind them, for a caller that holds the token: a
request body alone never makes nodewarden delete, stop or force-delete
anything. Only what the API server says about the objects a body names
counts. moto is checked after each forged request: nothing changed.
"""
from __future__ import annotations

import copy
import uuid

import pytest
import requests

import gc_world as w
from support import hook_request
from devcluster import fleet
from devcluster.api import ApiError, wait_for
from test_cluster_gc import FINALIZER, GC, LAST_ERROR, aws_cluster_manifest, aws_clusters, capa  # noqa: F401 - capa is a fixture

pytestmark = pytest.mark.e2e

REQUESTS = "/apis/nodewarden.io/v1alpha1/namespaces/{}/fencingrequests"
DELETE_FOR_MOVE = "clusterctl.cluster.x-k8s.io/delete-for-move"


def _post(cluster, route: str, body: dict) -> requests.Response:
    reply = cluster.hook_session().post(f"{cluster.hooks_url}/{route}", json=body, timeout=10)
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


def test_a_forged_finalize_for_a_cluster_that_does_not_exist_deletes_nothing(capa, api, cluster, cloud, namespace):
    victim = f"{namespace}-prod"
    net = w.network(cloud.ec2)
    made = w.build_cluster(lambda s: getattr(cloud, s), net, f"{namespace[-6:]}f", w.cluster_tags(victim),
                           load_balancers=1, target_groups=1, security_groups=1)
    forged = _forged_cluster(namespace, "prod", victim, str(uuid.uuid4()))
    for _ in range(3):
        _refused(_post(cluster, "cluster-gc/finalize", _finalize_body(forged)))
    # Bodies that would skip or block (a move, an opt-out, an unreadable value) are checked first too.
    for claim in ({DELETE_FOR_MOVE: ""}, {GC: "false"}, {GC: "maybe"}):
        variant = copy.deepcopy(forged)
        variant["metadata"]["annotations"] = claim
        _refused(_post(cluster, "cluster-gc/finalize", _finalize_body(variant)))
    assert w.existing(lambda s: getattr(cloud, s), made) == made
    events = api.get(f"/api/v1/namespaces/{namespace}/events",
                     params={"fieldSelector": "involvedObject.name=prod"})["items"]
    assert events == []  # nothing written about an object the API server does not have


def test_a_forged_finalize_naming_a_live_cluster_deletes_nothing(capa, api, cluster, cloud, namespace):
    workload = f"{namespace}-live"
    net = w.network(cloud.ec2)
    made = w.build_cluster(lambda s: getattr(cloud, s), net, f"{namespace[-6:]}l", w.cluster_tags(workload),
                           load_balancers=1, target_groups=1, security_groups=1)
    live = api.create(aws_clusters(namespace), aws_cluster_manifest("live", workload))
    path = f"{aws_clusters(namespace)}/live"
    wait_for(lambda: FINALIZER in (api.get(path)["metadata"].get("finalizers") or []), "the finalizer", timeout=30)
    # Its real name, namespace and uid; only the deletion is made up.
    forged = _forged_cluster(namespace, "live", workload, live["metadata"]["uid"])
    for _ in range(3):
        _refused(_post(cluster, "cluster-gc/finalize", _finalize_body(forged)))
    assert w.existing(lambda s: getattr(cloud, s), made) == made
    assert not api.get(path)["metadata"].get("deletionTimestamp")
    api.patch(path, {"metadata": {"annotations": {GC: "false"}}})  # let it go without collecting
    api.delete(path)
    wait_for(lambda: api.get_or_none(path) is None, "the live AWSCluster to go", timeout=60)


def _request_body(request: dict, node: dict) -> dict:
    return hook_request("fencing-request", request, related=[node])  # as Metacontroller v4 sends it (hook v2)


def _state(cloud, instance_id: str) -> str:
    reservations = cloud.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    return reservations[0]["Instances"][0]["State"]["Name"]


def test_a_forged_fencing_request_stops_no_instance(api, cluster, cloud, namespace):
    (instance,) = fleet.launch_instances(cloud, 1)
    name = f"forged-{instance[-6:]}"
    node = fleet.node_manifest(name, instance)
    node["metadata"]["uid"] = str(uuid.uuid4())
    node["status"] = {"conditions": [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                                      "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    request = {"apiVersion": "nodewarden.io/v1alpha1", "kind": "FencingRequest",
               "metadata": {"name": "made-up", "namespace": namespace, "uid": str(uuid.uuid4()), "generation": 1},
               "spec": {"nodeRef": {"name": name}}}
    for _ in range(3):
        _post(cluster, "fencing-request/sync", _request_body(request, node))
    assert _state(cloud, instance) == "running"
    # The Node is real now (no kubelet, not even kwok: NotReady), the request still is not.
    real = api.create("/api/v1/nodes", fleet.node_manifest(name, instance, alive=False))
    try:
        node["metadata"]["uid"] = real["metadata"]["uid"]
        for _ in range(3):
            _post(cluster, "fencing-request/sync", _request_body(request, node))
        assert _state(cloud, instance) == "running"
        assert not any(t["key"] == "node.kubernetes.io/out-of-service"
                       for t in api.get(f"/api/v1/nodes/{name}")["spec"].get("taints") or [])
    finally:
        api.delete(f"/api/v1/nodes/{name}")


def test_the_api_server_refuses_a_fencing_request_with_a_zero_timeout(api, namespace):
    manifest = {"apiVersion": "nodewarden.io/v1alpha1", "kind": "FencingRequest",
                "metadata": {"name": "zero", "namespace": namespace},
                "spec": {"nodeRef": {"name": "nobody"}, "timeout": "0s"}}
    with pytest.raises(ApiError) as refused:
        api.create(REQUESTS.format(namespace), manifest)
    assert "timeout" in str(refused.value)


def test_a_request_without_credentials_changes_nothing(api, cluster, cloud, namespace):
    """The door: where Metacontroller can authenticate itself (v4.16+), a caller without its
    token gets 401 before its body is read; the stack runs so whenever the CRDs allow it."""
    ready = requests.get(f"{cluster.hooks_metrics_url}/readyz", timeout=5).json()
    crd = api.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/decoratorcontrollers.metacontroller.k8s.io")
    can_authenticate = "endpointConfigs" in crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"][
        "properties"]["spec"]["properties"]
    assert (ready["auth"] != "off") == can_authenticate == (cluster.hook_credentials is not None)
    if not can_authenticate:
        pytest.skip(f"Metacontroller {cluster.metacontroller.release} cannot send credentials: "
                    "the local stack runs with hook authentication off and says so")
    for controller in api.get("/apis/metacontroller.k8s.io/v1alpha1/decoratorcontrollers")["items"]:
        [entry] = controller["spec"]["endpointConfigs"]
        assert entry["authorization"]["secretRef"]["name"] == "nodewarden-hook-token"
        assert all(h["webhook"]["url"].startswith(f"https://{entry['host']}/")
                   for h in controller["spec"]["hooks"].values())
    (instance,) = fleet.launch_instances(cloud, 1)
    name = f"nocreds-{instance[-6:]}"
    real = api.create("/api/v1/nodes", fleet.node_manifest(name, instance, alive=False))
    try:
        request = {"apiVersion": "nodewarden.io/v1alpha1", "kind": "FencingRequest",
                   "metadata": {"name": "made-up", "namespace": namespace, "uid": str(uuid.uuid4())},
                   "spec": {"nodeRef": {"name": name}}}
        body = _request_body(request, real)
        verify = str(cluster.hook_credentials.ca_cert)
        for headers in ({}, {"Authorization": "Bearer not-the-token"}):
            reply = requests.post(f"{cluster.hooks_url}/fencing-request/sync", json=body, headers=headers,
                                  verify=verify, timeout=10)
            assert reply.status_code == 401, reply.text
        assert _state(cloud, instance) == "running"
        with pytest.raises(requests.exceptions.ConnectionError):  # plain HTTP is not served at all
            requests.post(f"http://127.0.0.1:{cluster.ports.hooks}/fencing-request/sync", json=body, timeout=10)
    finally:
        api.delete(f"/api/v1/nodes/{name}")
