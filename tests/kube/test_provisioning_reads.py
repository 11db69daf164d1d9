"""A provisioning round's reads (hooks/kube/provisioning_reads.py): what each asks the API server for, and
what comes back."""
from __future__ import annotations

import pytest
from lightkube.core.selector import build_selector

from hooks import machine_names
from hooks.kube import machine_api, provisioning_reads
from hooks.kube.client import KubeUnavailable
from tests.fixtures.make_machines import child, pool_obj
from worlds.fake_kube import FakeKube


def _pod(name: str, phase: str, node: str = "", namespace: str = "default") -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
            "spec": {"nodeName": node} if node else {}, "status": {"phase": phase}}


def _node(name: str, labels: dict) -> dict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "uid": f"uid-{name}", "labels": labels},
            "spec": {}}


def _names(objects: list[dict]) -> list[str]:
    return sorted(o["metadata"]["name"] for o in objects)


@pytest.fixture
def kube() -> FakeKube:
    kube = FakeKube()
    for pod in (_pod("waiting", "Pending"), _pod("waiting-elsewhere", "Pending", namespace="batch"),
                _pod("bound-not-started", "Pending", node="n1"), _pod("running", "Running", node="n1"),
                _pod("done", "Succeeded", node="n1"), _pod("crashed", "Failed", node="n2"),
                _pod("unknown", "Unknown", node="n2")):
        kube.add_pod(pod)
    kube.add_node(_node("n1", {machine_names.POOL_LABEL: "web"}))
    kube.add_node(_node("n2", {machine_names.POOL_LABEL: "batch"}))
    kube.add_node(_node("n3", {"team": "web"}))
    static, provisioning, other = pool_obj(2), pool_obj(None), pool_obj(0)
    provisioning["metadata"]["name"], other["metadata"]["name"] = "general", "empty-static"
    for obj in (static, provisioning, other):
        kube.add_object(obj)
    kube.add_object({"apiVersion": "apps/v1", "kind": "DaemonSet",
                     "metadata": {"name": "agent", "namespace": "kube-system"},
                     "spec": {"template": {"spec": {"containers": [{"name": "a", "image": "agent"}]}}}})
    kube.add_object({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "logs", "namespace": "ops"},
                     "spec": {"template": {"spec": {"containers": [{"name": "l", "image": "logs"}]}}}})
    for name in ("web-a", "other-b"):
        machine = child(name)
        machine["metadata"]["labels"][machine_names.POOL_LABEL] = name.split("-")[0]
        kube.add_object(machine)
    return kube


def _selector(kube: FakeKube) -> str:
    [call] = [c for c in kube.calls if c[0] == "list"]
    return build_selector(call[3], for_fields=True)


def test_pending_pods_are_those_of_every_namespace_bound_to_no_node(kube):
    assert _names(provisioning_reads.pending(kube)) == ["waiting", "waiting-elsewhere"]
    assert _selector(kube) == "status.phase=Pending,spec.nodeName="
    assert kube.calls[0][2] == "*"


def test_pods_on_nodes_are_those_bound_that_have_not_ended(kube):
    found = provisioning_reads.running_on_nodes(kube)
    assert _names(found) == ["bound-not-started", "running", "unknown"]
    assert _selector(kube) == "spec.nodeName!=,status.phase!=Failed,status.phase!=Succeeded"
    assert all(isinstance(p, dict) and p["spec"]["nodeName"] for p in found)


def test_provisioning_pools_are_those_without_replicas(kube):
    assert _names(provisioning_reads.provisioning_pools(kube)) == ["general"]


def test_pool_nodes_are_those_labelled_with_any_pool(kube):
    found = provisioning_reads.pool_nodes(kube)
    assert _names(found) == ["n1", "n2"]
    assert all(isinstance(n, dict) for n in found)


def test_daemonsets_of_every_namespace_with_their_pod_templates(kube):
    found = provisioning_reads.daemonsets(kube)
    assert _names(found) == ["agent", "logs"]
    assert found[0]["spec"]["template"]["spec"]["containers"][0]["image"] == "agent"


def test_the_machines_of_every_pool_are_machine_apis_listing(kube):
    assert _names(machine_api.listed(kube)) == ["other-b", "web-a"]


def _with_claim(pod: dict) -> dict:
    pod = {**pod, "spec": {**pod["spec"], "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "d"}}]}}
    pod["status"] = {**pod["status"], "conditions": [{"type": "PodScheduled", "status": "False",
                                                      "reason": "Unschedulable"}]}
    return pod


def test_storage_is_read_only_for_a_pending_pod_with_a_claim(kube):
    pending = provisioning_reads.pending(kube)
    assert provisioning_reads.storage(kube, pending) == {}
    assert [c for c in kube.calls if c[0] == "list"] == [("list", "Pod", "*", {"status.phase": "Pending",
                                                                                 "spec.nodeName": ""})]
    kube.add_object({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "d", "namespace": "batch"},
                     "spec": {"storageClassName": "gp3"}})
    kube.add_object({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": {"name": "n1"},
                     "spec": {"drivers": []}})
    found = provisioning_reads.storage(kube, [_with_claim(p) for p in pending])
    assert {k: _names(v) for k, v in found.items()} == {"claims": ["d"], "volumes": [], "storageClasses": [],
                                                         "csiNodes": ["n1"]}
    assert [c[1] for c in kube.calls[-4:]] == ["PersistentVolumeClaim", "PersistentVolume", "StorageClass", "CSINode"]
    assert kube.calls[-4][2] == "*", "claims of every namespace"


def test_a_failed_storage_read_raises_for_the_caller_to_report(kube):
    kube.refused.add(("list", "StorageClass"))
    with pytest.raises(Exception, match="refused"):
        provisioning_reads.storage(kube, [_with_claim(_pod("waiting", "Pending"))])


@pytest.mark.parametrize("read", [provisioning_reads.pending, provisioning_reads.running_on_nodes,
                                  provisioning_reads.provisioning_pools, provisioning_reads.pool_nodes,
                                  provisioning_reads.daemonsets])
def test_a_failed_read_raises_for_the_caller_to_report(read):
    with pytest.raises(KubeUnavailable):
        read(FakeKube(unavailable=True))
