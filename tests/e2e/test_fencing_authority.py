"""Who may order a power-off, and of what: on the real local control plane.

A FencingRequest is an order to power a machine off. It is honoured only in
the controller's own namespace (nodewarden-system here), where only cluster
operators may write; never for a control-plane node without the request's
spec.allowControlPlane; and only for an instance tagged for this cluster,
whatever the Node's providerID claims. moto is checked after each request:
nothing was stopped that should not have been.
"""
from __future__ import annotations

import pytest

from devcluster import failover, fleet
from devcluster.api import AdminApi, ApiError, wait_for
from devcluster.cluster import CLUSTER_NAME

from tests.e2e.conftest import unique

pytestmark = pytest.mark.e2e

API = "nodewarden.io/v1alpha1"
OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"


def _requests(namespace: str) -> str:
    return f"/apis/{API}/namespaces/{namespace}/fencingrequests"


def _state(cloud, instance_id: str) -> str:
    reservations = cloud.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    return reservations[0]["Instances"][0]["State"]["Name"]


def _request(name: str, node: str, **spec) -> dict:
    return {"apiVersion": API, "kind": "FencingRequest", "metadata": {"name": name},
            "spec": {"nodeRef": {"name": node}, **spec}}


def _failed(api: AdminApi, path: str, reason: str) -> dict:
    def check():
        status = (api.get_or_none(path) or {}).get("status") or {}
        return status if status.get("phase") == "Failed" and status.get("errorReason") == reason else None
    return wait_for(check, f"{path} Failed with {reason}", timeout=30, interval=0.5)


def _taints(api: AdminApi, node: str) -> set[str]:
    return {t["key"] for t in api.get(f"/api/v1/nodes/{node}")["spec"].get("taints") or []}


@pytest.fixture
def tenant(api, namespace):
    """A user whose only right is to create (and read) FencingRequests in its own namespace."""
    user = f"tenant-{namespace}"
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    api.create(f"{rbac}/namespaces/{namespace}/roles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "fencer"},
        "rules": [{"apiGroups": ["nodewarden.io"], "resources": ["fencingrequests"],
                   "verbs": ["create", "get", "list"]}]})
    api.create(f"{rbac}/namespaces/{namespace}/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "fencer"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "fencer"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]})
    return api.impersonating(user)


def test_a_tenant_cannot_power_off_any_node(api, cloud, namespace, tenant):
    """The tenant names a control-plane Node NotReady for seconds, with another namespace's pod on it: the
    request is refused, saying where requests are honoured, and nothing happens."""
    (instance,) = fleet.launch_instances(cloud, 1)
    node = f"cp-{instance[-6:]}"
    manifest = fleet.node_manifest(node, instance, {"node-role.kubernetes.io/control-plane": ""}, alive=False)
    api.create("/api/v1/nodes", manifest)  # no kubelet: NotReady
    other = unique("e2e-other")
    api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}})
    pod = f"/api/v1/namespaces/{other}/pods/victim"
    try:
        api.create(f"/api/v1/namespaces/{other}/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "victim"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": failover.PAUSE}]}})
        with pytest.raises(ApiError) as forbidden:  # RBAC keeps the tenant out of the controller's namespace
            tenant.create(failover.REQUESTS, _request("mine", node))
        assert forbidden.value.status == 403
        tenant.create(_requests(namespace), _request("power-off", node))
        status = _failed(api, f"{_requests(namespace)}/power-off", "NotHonouredHere")
        assert "nodewarden-system" in status["errorMessage"]
        assert not status.get("providerStatus"), "nothing was even looked up"
        events = api.get(f"/api/v1/namespaces/{namespace}/events",
                         params={"fieldSelector": "involvedObject.name=power-off"})["items"]
        assert any(e["reason"] == "FencingFailed" and "nodewarden-system" in e["message"] for e in events)
        assert _state(cloud, instance) == "running"
        assert api.get_or_none(pod) is not None and OUT_OF_SERVICE not in _taints(api, node)
    finally:
        api.delete(f"{_requests(namespace)}/power-off")
        api.delete(f"/api/v1/namespaces/{other}")
        api.delete(f"/api/v1/nodes/{node}")


def test_a_control_plane_node_is_fenced_only_with_the_opt_in(api, cloud):
    """An operator's request in the controller's namespace: refused for a control-plane node, carried out
    with spec.allowControlPlane: true."""
    (instance,) = fleet.launch_instances(cloud, 1)
    node = f"cp-{instance[-6:]}"
    api.create("/api/v1/nodes", fleet.node_manifest(node, instance, {"node-role.kubernetes.io/control-plane": ""},
                                                    alive=False))
    refused, allowed = f"{node}-refused", f"{node}-allowed"
    try:
        api.create(failover.REQUESTS, _request(refused, node))
        status = _failed(api, f"{failover.REQUESTS}/{refused}", "ControlPlaneNode")
        assert "allowControlPlane" in status["errorMessage"] and _state(cloud, instance) == "running"
        api.create(failover.REQUESTS, _request(allowed, node, allowControlPlane=True))
        wait_for(lambda: _state(cloud, instance) == "stopped", "the opted-in request's power-off", timeout=30,
                 interval=0.5)
    finally:
        for name in (refused, allowed):
            api.delete(f"{failover.REQUESTS}/{name}")
        wait_for(lambda: all(api.get_or_none(f"{failover.REQUESTS}/{n}") is None for n in (refused, allowed)),
                 "the requests gone", timeout=30)
        api.delete(f"/api/v1/nodes/{node}")


def test_a_node_claiming_another_clusters_instance_never_gets_it_stopped(api, cloud):
    """A Node registered with a node's own credential (system:node:<name>) and a providerID naming an
    instance tagged for another cluster: an operator's request for it stops nothing."""
    (theirs,) = fleet.launch_instances(cloud, 1, cluster_name="someone-else")
    node = f"claims-{theirs[-6:]}"
    user = f"system:node:{node}"
    binding = f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/e2e-{node}"
    api.create("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": f"e2e-{node}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]})
    name = f"fence-{node}"
    try:
        api.impersonating(user, "system:nodes").create("/api/v1/nodes", fleet.node_manifest(node, theirs, alive=False))
        api.create(failover.REQUESTS, _request(name, node))
        status = _failed(api, f"{failover.REQUESTS}/{name}", "NotClusterInstance")
        assert f"kubernetes.io/cluster/{CLUSTER_NAME}" in status["errorMessage"]
        assert _state(cloud, theirs) == "running"
        assert OUT_OF_SERVICE not in _taints(api, node)
    finally:
        api.delete(f"{failover.REQUESTS}/{name}")
        api.delete(f"/api/v1/nodes/{node}")
        api.delete(binding)

