"""Pods on a node: list them, evict them through policy/v1."""
from __future__ import annotations

from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Pod
from lightkube.resources.policy_v1 import PodDisruptionBudget

from hooks.kube.fencing_api import volume_attachments_on
from hooks.plan import error_text


def on_node(kube, node_name: str) -> list[dict]:
    """Every pod bound to the node (the API filters; our payload never grows with the cluster)."""
    return [p.to_dict() for p in kube.list(Pod, namespace="*", fields={"spec.nodeName": node_name})]


def daemonset_annotations(kube, keys: set[str]) -> dict[str, dict]:
    """Annotations of the named DaemonSets (``namespace/name``)."""
    found = {}
    for ns in sorted({k.split("/", 1)[0] for k in keys}):
        for ds in kube.list(DaemonSet, namespace=ns):
            key = f"{ns}/{ds.metadata.name}"
            if key in keys:
                found[key] = {"annotations": dict(ds.metadata.annotations or {})}
    return found


def disruption_budgets(kube, namespaces: set[str]) -> list[dict]:
    """The PodDisruptionBudgets of ``namespaces``."""
    return [b.to_dict() for namespace in sorted(namespaces) for b in kube.list(PodDisruptionBudget, namespace=namespace)]


def evict(kube, namespace: str, name: str) -> None:
    """Ask for an eviction; PodDisruptionBudgets are honoured by the API server."""
    kube.create(Pod.Eviction(metadata=ObjectMeta(name=name, namespace=namespace)), name=name, namespace=namespace)


def whats_on(kube, node_name: str, summarize, pods_key: str = "pods") -> dict:
    """The node's pods (each through ``summarize``) and VolumeAttachments, for a controller's ``observed``.

    A failed list is recorded as ``podsError``/``volumeAttachmentsError``,
    never raised: the controller decides what not knowing means.
    """
    observed: dict = {}
    try:
        observed[pods_key] = [summarize(p) for p in on_node(kube, node_name)]
    except Exception as exc:  # noqa: BLE001
        observed["podsError"] = error_text(exc)
    try:
        observed["volumeAttachments"] = volume_attachments_on(kube, node_name)
    except Exception as exc:  # noqa: BLE001
        observed["volumeAttachmentsError"] = error_text(exc)
    return observed
