"""Whether a node is control plane, on any evidence (pure).

A Node's labels are its own claim: a node registered by its kubelet carries
none of the installer's, and a node may claim any instance as its
providerID. So besides the Node's labels and taints, the instance behind it
speaks too, with what the node cannot write: its EC2 tags (the role tags
Cluster API's AWS provider and kops put on control-plane instances), and
its private address among the API server's own endpoints (the ``kubernetes``
EndpointSlice in ``default``, written by the API servers themselves). Any one
of them is enough: a control-plane node may look like a worker, never the
other way round.
"""
from __future__ import annotations

from hooks import fields, objects

CONTROL_PLANE_TAINTS = objects.CONTROL_PLANE_LABELS  # kubeadm taints its control-plane nodes with the same keys
# Instance tags that mark a control-plane instance: (key, values; empty means any value).
CONTROL_PLANE_TAGS = (
    ("sigs.k8s.io/cluster-api-provider-aws/role", ("control-plane",)),  # Cluster API Provider AWS
    ("k8s.io/role/control-plane", ()),  # kops
    ("k8s.io/role/master", ()),  # kops, before it said control-plane
)


def of_node(node: dict, where: str = "related.Node") -> str:
    """What on the Node says control plane ("" when nothing does)."""
    labels = fields.mapping(node, "metadata", "labels", where=where)
    found = [f"label {k}" for k in objects.CONTROL_PLANE_LABELS if k in labels]
    found += [f"taint {t.get('key')}" for t in fields.objects(node, "spec", "taints", where=where)
              if t.get("key") in CONTROL_PLANE_TAINTS]
    return ", ".join(found)


def of_instance(instance: dict, api_servers: list[str]) -> str:
    """What on the instance says control plane ("" when nothing does): its role tags, or its
    private address serving the API server."""
    tags = instance.get("tags") if isinstance(instance.get("tags"), dict) else {}
    found = [f"instance tag {key}={tags[key]}" for key, values in CONTROL_PLANE_TAGS
             if key in tags and (not values or tags[key] in values)]
    address = instance.get("privateIp")
    if isinstance(address, str) and address and address in api_servers:
        found.append(f"instance address {address} serves the API server")
    return ", ".join(found)
