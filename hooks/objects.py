"""Facts read off Kubernetes objects (pure): who owns a pod, whether a node is control plane.

Every controller asks these the same way, so a node is control plane, or a
pod a DaemonSet's, for all of them or for none.
"""
from __future__ import annotations

from typing import Mapping

from hooks import fields

CONTROL_PLANE_LABELS = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")
# The kubelet's copy of a static pod: the kubelet runs it, whatever the API server is told.
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


def is_control_plane(labels: Mapping | None) -> bool:
    return any(key in (labels or {}) for key in CONTROL_PLANE_LABELS)


def daemonset_of(pod: dict) -> str | None:
    """``namespace/name`` of the DaemonSet that controls the pod, or None.

    A DaemonSet owner reference without ``controller`` counts: the DaemonSet
    controller always sets it, and counting it keeps such a pod out of any
    step meant for pods that would not come straight back.
    """
    for i, ref in enumerate(fields.objects(pod, "metadata", "ownerReferences", where="pod")):
        if ref.get("kind") == "DaemonSet" and ref.get("controller") is not False:
            name = fields.item_string(ref, "name", f"pod.metadata.ownerReferences[{i}]")
            if name:
                return f"{fields.string(pod, 'metadata', 'namespace', where='pod') or ''}/{name}"
    return None
