"""What a provisioning round reads from the API server, each time afresh: the pending pods, the pods bound to
Nodes, the provisioning NodePools, the Nodes of every pool, the DaemonSets, the PodDisruptionBudgets, and
when a pending pod has volumes, the claims, volumes, StorageClasses and CSINodes (the Machines of every pool
are ``machine_api.listed(kube)``).

Each answers the objects as plain dicts, filtered by the API server where a selector can say it; a failed
read raises, for the caller to report.
"""
from __future__ import annotations

from lightkube import operators
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Node, PersistentVolume, PersistentVolumeClaim, Pod
from lightkube.resources.policy_v1 import PodDisruptionBudget
from lightkube.resources.storage_v1 import CSINode, StorageClass

from hooks import machine_names
from hooks.kube import fresh
from hooks.provisioning import volumes


def pending(kube) -> list[dict]:
    """Pods of every namespace not bound to a Node yet, in phase Pending."""
    return [fresh.as_dict(p) for p in kube.list(Pod, namespace="*",
                                                fields={"status.phase": "Pending", "spec.nodeName": ""})]


def running_on_nodes(kube) -> list[dict]:
    """Pods of every namespace bound to a Node that have not ended (what a Node's room is counted from)."""
    return [fresh.as_dict(p) for p in kube.list(Pod, namespace="*", fields={
        "spec.nodeName": operators.not_equal(""), "status.phase": operators.not_in(["Succeeded", "Failed"])})]


def provisioning_pools(kube) -> list[dict]:
    """The NodePools without ``spec.replicas``: every one, as their weights decide between them."""
    pools = [fresh.as_dict(p) for p in kube.list(fresh.resource(machine_names.NODEPOOL_KIND))]
    return [p for p in pools if not isinstance(p.get("spec"), dict) or p["spec"].get("replicas") is None]


def pool_nodes(kube) -> list[dict]:
    """The Nodes labelled with a NodePool, of any pool."""
    return [fresh.as_dict(n) for n in kube.list(Node, labels={machine_names.POOL_LABEL: operators.exists()})]


def daemonsets(kube) -> list[dict]:
    """Every DaemonSet: the pods their templates make land on every new Node they tolerate."""
    return [fresh.as_dict(d) for d in kube.list(DaemonSet, namespace="*")]


def pod_disruption_budgets(kube) -> list[dict]:
    """Every PodDisruptionBudget: which pods an eviction would be refused for now."""
    return [fresh.as_dict(b) for b in kube.list(PodDisruptionBudget, namespace="*")]


def storage(kube, raw_pending: list[dict]) -> dict:
    """When a pending pod provisioning may place has a claim: every PersistentVolumeClaim, PersistentVolume,
    StorageClass and CSINode, one list each (hooks.provisioning.volumes.Storage.of reads them); otherwise
    nothing is read and nothing answered."""
    if not volumes.claimed(raw_pending):
        return {}
    return {"claims": [fresh.as_dict(c) for c in kube.list(PersistentVolumeClaim, namespace="*")],
            "volumes": [fresh.as_dict(v) for v in kube.list(PersistentVolume)],
            "storageClasses": [fresh.as_dict(c) for c in kube.list(StorageClass)],
            "csiNodes": [fresh.as_dict(n) for n in kube.list(CSINode)]}
