"""devcluster/workloads.py's pure parts: the manifests it makes and reserved utilization."""
from __future__ import annotations

import pytest

from devcluster import workloads


def _node(name: str, cpu: str, memory: str) -> dict:
    return {"metadata": {"name": name}, "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "58"}}}


def _pod(node: str | None, *, phase="Running", containers=(), init=(), overhead=None) -> dict:
    spec = {"containers": [{"name": f"c{i}", "resources": {"requests": r}} for i, r in enumerate(containers)],
            "initContainers": [{"name": f"i{i}", "resources": {"requests": r}} for i, r in enumerate(init)]}
    if node:
        spec["nodeName"] = node
    if overhead:
        spec["overhead"] = overhead
    return {"metadata": {"name": "p"}, "spec": spec, "status": {"phase": phase}}


def test_a_pods_requests_are_its_containers_summed_or_its_largest_init_container_plus_overhead():
    pod = _pod("n", containers=[{"cpu": "500m", "memory": "1Gi"}, {"cpu": "250m"}],
               init=[{"cpu": "2", "memory": "256Mi"}, {"cpu": "100m", "memory": "2Gi"}],
               overhead={"cpu": "100m", "memory": "64Mi"})
    assert workloads.pod_requests(pod) == pytest.approx({"cpu": 2.1, "memory": 2 * 2**30 + 64 * 2**20})


def test_utilization_counts_only_the_pods_bound_to_the_nodes_and_not_done():
    nodes = [_node("a", "3920m", "14Gi"), _node("b", "4", "2Gi")]
    pods = [_pod("a", containers=[{"cpu": "1", "memory": "1Gi"}]),
            _pod("b", containers=[{"cpu": "1500m"}], phase="Pending"),  # bound, not started: reserved
            _pod("b", containers=[{"cpu": "4"}], phase="Succeeded"),
            _pod("elsewhere", containers=[{"cpu": "8"}]),
            _pod(None, containers=[{"cpu": "8"}], phase="Pending")]
    usage = workloads.utilization(nodes, pods)
    assert (usage.nodes, usage.pods) == (2, 2)
    assert usage.cpu == pytest.approx(2.5 / 7.92)
    assert usage.memory == pytest.approx(1 / 16)
    assert usage.ratio("nvidia.com/gpu") == 0.0


def test_no_nodes_is_no_utilization():
    usage = workloads.utilization([], [_pod("a", containers=[{"cpu": "1"}])])
    assert (usage.nodes, usage.pods, usage.cpu, usage.memory) == (0, 0, 0.0, 0.0)


def test_the_deployment_selects_its_pods_and_spreads_them_over_zones_when_asked():
    manifest = workloads.deployment_manifest("web", replicas=3, requests={"cpu": "1"}, node_selector={"pool": "a"},
                                             zone_spread=True, min_domains=2)
    template = manifest["spec"]["template"]
    assert manifest["spec"]["selector"]["matchLabels"] == template["metadata"]["labels"] == {workloads.APP_LABEL: "web"}
    (container,) = template["spec"]["containers"]
    assert container["resources"] == {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}
    assert template["spec"]["nodeSelector"] == {"pool": "a"}
    (spread,) = template["spec"]["topologySpreadConstraints"]
    assert (spread["topologyKey"], spread["whenUnsatisfiable"], spread["minDomains"]) == \
        ("topology.kubernetes.io/zone", "DoNotSchedule", 2)
    assert spread["labelSelector"]["matchLabels"] == {workloads.APP_LABEL: "web"}
    assert workloads.pod_requests(template) == {"cpu": 1.0}


def test_a_daemonset_has_no_replicas():
    manifest = workloads.daemonset_manifest("agent", requests={"cpu": "100m"})
    assert manifest["kind"] == "DaemonSet" and "replicas" not in manifest["spec"]
    assert "topologySpreadConstraints" not in manifest["spec"]["template"]["spec"]
