"""What fencing does through the Kubernetes API: force deletes, VolumeAttachments,
claims' access modes, the FencingRequests of every namespace (and one made as a Node's attachment),
and the API server's own addresses."""
from __future__ import annotations

from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import PersistentVolumeClaim, Pod
from lightkube.resources.discovery_v1 import EndpointSlice
from lightkube.resources.storage_v1 import VolumeAttachment

from hooks.contract import DECORATOR_CLAIM
from hooks.fencing import names
from hooks.kube import fresh
from hooks.kube.deletes import delete_exact
from hooks.kube.client import is_not_found

FencingRequest = fresh.resource(names.REQUEST_KIND)


def force_delete_pod(kube, namespace: str, name: str, uid: str | None) -> bool:
    """Delete now (grace period 0), only the pod with this uid; False if already gone."""
    return delete_exact(kube, Pod, name, uid, namespace=namespace, grace_period=0)


def volume_attachments_on(kube, node_name: str) -> list[dict]:
    """VolumeAttachments of the node (the API has no field selector for spec.nodeName)."""
    found = []
    for va in kube.list(VolumeAttachment):
        obj = va.to_dict() if hasattr(va, "to_dict") else va
        if (obj.get("spec") or {}).get("nodeName") != node_name:
            continue
        meta = obj.get("metadata") or {}
        found.append({
            "name": meta.get("name"),
            "deleting": bool(meta.get("deletionTimestamp")),
            "attached": bool((obj.get("status") or {}).get("attached")),
            "persistentVolumeName": ((obj.get("spec") or {}).get("source") or {}).get("persistentVolumeName"),
        })
    return sorted(found, key=lambda v: v["name"])


def delete_volume_attachment(kube, name: str) -> bool:
    try:
        kube.delete(VolumeAttachment, name)
        return True
    except Exception as exc:  # noqa: BLE001
        if is_not_found(exc):
            return False
        raise


def claim_access_modes(kube, namespace: str, name: str) -> list[str]:
    """The access modes a claim asked for and got (spec and status together)."""
    claim = kube.get(PersistentVolumeClaim, name, namespace=namespace)
    obj = claim.to_dict() if hasattr(claim, "to_dict") else claim
    modes = set((obj.get("spec") or {}).get("accessModes") or [])
    modes |= set((obj.get("status") or {}).get("accessModes") or [])
    return sorted(modes)


def fencing_requests(kube, namespace: str = "*") -> list[dict]:
    """FencingRequests of one namespace, or of every namespace (the default)."""
    items = kube.list(FencingRequest, namespace=namespace)
    found = [i.to_dict() if hasattr(i, "to_dict") else i for i in items]
    return [i for i in found if isinstance(i, dict)]


def create_node_attachment(kube, obj: dict, node: dict, decorator: str) -> bool:
    """Create the FencingRequest ``obj`` as the DecoratorController ``decorator`` makes a Node's attachment:
    owned by the Node (its controller reference, by uid) and claimed by that decorator, so Metacontroller
    takes it for the Node's own on its next sync. False when one of that name exists already."""
    meta = node["metadata"]
    owner = {"apiVersion": "v1", "kind": "Node", "name": meta["name"], "uid": meta["uid"], "controller": True,
             "blockOwnerDeletion": True}
    annotations = {**(obj["metadata"].get("annotations") or {}), DECORATOR_CLAIM: decorator}
    body = {**obj, "metadata": {**obj["metadata"], "ownerReferences": [owner], "annotations": annotations}}
    try:
        kube.create(FencingRequest.from_dict(body), namespace=body["metadata"]["namespace"])
    except ApiError as exc:
        if exc.status.code == 409:  # AlreadyExists: made meanwhile (by the Node's own sync)
            return False
        raise
    return True


def api_server_addresses(kube) -> list[str]:
    """The addresses the API servers serve from: the ``kubernetes`` EndpointSlice in ``default``, which the
    API servers write themselves (none when it does not exist)."""
    try:
        found = kube.get(EndpointSlice, "kubernetes", namespace="default")
    except Exception as exc:  # noqa: BLE001
        if is_not_found(exc):
            return []
        raise
    obj = found.to_dict() if hasattr(found, "to_dict") else found
    addresses = set()
    for endpoint in obj.get("endpoints") or []:
        if isinstance(endpoint, dict):
            addresses.update(a for a in endpoint.get("addresses") or [] if isinstance(a, str))
    return sorted(addresses)
