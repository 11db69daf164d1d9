"""The local control plane itself: real components, real RBAC, real controllers."""
from __future__ import annotations

import pytest
import requests

from devcluster import manifests
from devcluster import metacontroller as mc
from devcluster.api import ApiError, wait_for

pytestmark = pytest.mark.e2e


def test_api_server_reports_the_pinned_release(api):
    version = api.get("/version")
    assert version["gitVersion"].startswith("v1.35.")
    assert version["major"] == "1" and version["minor"] == "35"


def _established(api, crd: str) -> bool:
    obj = api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}")
    return any(c["type"] == "Established" and c["status"] == "True"
               for c in obj.get("status", {}).get("conditions", []))


@pytest.mark.parametrize("crd", [
    "decoratorcontrollers.metacontroller.k8s.io",
    "compositecontrollers.metacontroller.k8s.io",
    "controllerrevisions.metacontroller.k8s.io",
    "attachments.nodewarden.io",
])
def test_crds_are_established(api, crd):
    assert _established(api, crd)


def test_controllers_point_at_the_local_hook_server(api, cluster):
    decorators = api.get("/apis/metacontroller.k8s.io/v1alpha1/decoratorcontrollers")["items"]
    assert decorators, "the dev overlay applied no DecoratorController"
    for controller in decorators:
        for hook in controller["spec"]["hooks"].values():
            assert hook["webhook"]["url"].startswith(cluster.hook_server.url + "/")


def test_metacontroller_and_hook_server_answer(cluster):
    assert requests.get(f"http://127.0.0.1:{cluster.ports.metacontroller_metrics}/metrics", timeout=5).ok
    assert requests.get(f"{cluster.hook_server.metrics_url}/readyz", timeout=5).ok
    if not cluster.metacontroller.legacy_flags:
        assert requests.get(f"http://127.0.0.1:{cluster.ports.metacontroller_health}/readyz", timeout=5).ok


def test_the_running_metacontroller_is_the_recorded_one(cluster):
    """The launcher ran the release build.sh recorded, with that release's flags."""
    assert cluster.metacontroller == mc.read(cluster.layout.bin_dir)
    argv = " ".join(next(c.argv for c in cluster.supervisor.children if c.name == "metacontroller"))
    if cluster.metacontroller.legacy_flags:
        assert "--client-config-path=" in argv and "--debug-addr=" in argv
    else:
        assert "--kubeconfig=" in argv and "--metrics-address=" in argv and "--zap-log-level=" in argv
    log = (cluster.layout.logs / "metacontroller.log").read_text()
    assert "flag provided but not defined" not in log


def test_hooks_keep_version_v2_exactly_when_the_installed_crds_allow_it(api, cluster):
    """Our controllers ship `version: v2` hooks; v1.5.20's CRDs lack the field, v4's have it."""
    crd = api.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/decoratorcontrollers.metacontroller.k8s.io")
    v2 = [{"kind": "DecoratorController", "metadata": {"name": "probe"},
           "spec": {"hooks": {"sync": {"version": "v2", "webhook": {"url": "http://x/y/sync"}}}}}]
    allowed = manifests.drop_unknown_fields(v2, [crd]) == []
    assert allowed == (cluster.metacontroller.major >= 4)
    hooks = [(c["metadata"]["name"], name, hook)
             for plural in ("decoratorcontrollers", "compositecontrollers")
             for c in api.get(f"/apis/metacontroller.k8s.io/v1alpha1/{plural}")["items"]
             for name, hook in c["spec"]["hooks"].items()]
    assert hooks
    for controller, name, hook in hooks:
        if allowed:
            assert hook.get("version") == "v2", f"{controller} {name}"
        else:
            assert "version" not in hook, f"{controller} {name}"


def _can_i(cluster, verb: str, resource: str, *, subresource: str = "", namespace: str = "") -> bool:
    """Ask the API server as the hook server's ServiceAccount (its own token)."""
    args = ["auth", "can-i", verb, resource]
    args += [f"--subresource={subresource}"] if subresource else []
    args += [f"--namespace={namespace}"] if namespace else []
    result = cluster.kubectl(*args, check=False, kubeconfig_path=cluster.layout.hooks_kubeconfig)
    assert result.stdout.strip() in ("yes", "no"), result.stderr
    return result.stdout.strip() == "yes"


def test_hook_server_runs_with_the_service_account_rbac(cluster):
    assert _can_i(cluster, "patch", "nodes")
    assert _can_i(cluster, "create", "pods", subresource="eviction", namespace="default")
    # Nothing the manifests do not grant.
    assert not _can_i(cluster, "delete", "namespaces")
    assert not _can_i(cluster, "create", "secrets", namespace="kube-system")


def test_deployment_gets_a_pod_and_the_scheduler_sees_it(api, namespace):
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                         "spec": {"containers": [{"name": "web", "image": "registry.k8s.io/pause:3.10"}]}},
        },
    }
    api.create(f"/apis/apps/v1/namespaces/{namespace}/deployments", deployment)

    def scheduled_condition():
        pods = api.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
        conditions = [c for p in pods for c in p.get("status", {}).get("conditions", [])]
        return [c for c in conditions if c["type"] == "PodScheduled"]

    # Deployment and ReplicaSet controllers made the pod; the scheduler judged it.
    assert wait_for(scheduled_condition, "a PodScheduled condition", timeout=30)


def test_deleting_a_namespace_empties_and_removes_it(api):
    name = "e2e-ns-deletion"
    api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    api.create(f"/api/v1/namespaces/{name}/configmaps",
               {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}})
    api.delete(f"/api/v1/namespaces/{name}")
    wait_for(lambda: api.get_or_none(f"/api/v1/namespaces/{name}") is None, "namespace deleted", timeout=60)
    with pytest.raises(ApiError):
        api.get(f"/api/v1/namespaces/{name}/configmaps/c")


def test_the_api_server_accepts_the_hook_network_policy(api):
    """The base's NetworkPolicy is valid for the real API server (no network plugin enforces it here)."""
    policy = api.get("/apis/networking.k8s.io/v1/namespaces/nodewarden-system/networkpolicies/nodewarden-hooks")
    ports = sorted(rule["ports"][0]["port"] for rule in policy["spec"]["ingress"])
    assert ports == ["https", "metrics"]
