"""Fast failover (the NooBaa case), made safe.

Pods chosen by the policy's ``spec.failover`` or labelled
``nodewarden.io/failover=immediate`` are force-deleted as soon as their node
has been unhealthy for the policy's duration, without waiting for fencing.
A pod that writes to a single-writer volume (ReadWriteOnce/ReadWriteOncePod,
or an inline block device) is never force-deleted before the node is fenced:
a second writer is how NooBaa corrupted its own database.
"""
from __future__ import annotations

from dataclasses import dataclass

from hooks import fencing_names, objects
from hooks.fencing import selectors
from hooks.fencing.policy import Policy

SINGLE_WRITER_MODES = ("ReadWriteOnce", "ReadWriteOncePod")
# Inline volume sources that are block devices attached to one node at a time.
INLINE_BLOCK_SOURCES = (
    "awsElasticBlockStore", "gcePersistentDisk", "azureDisk", "cinder", "rbd", "iscsi", "fc",
    "portworxVolume", "photonPersistentDisk", "vsphereVolume", "scaleIO", "storageos", "flocker",
)


def key(pod: dict) -> str:
    meta = pod["metadata"]
    return f"{meta.get('namespace', '')}/{meta['name']}"


def summarize(pod: dict) -> dict:
    """What the rules read from a pod: keeps fixtures and hook logs small."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    out = {
        "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "labels", "ownerReferences", "deletionTimestamp")
                     if meta.get(k) is not None},
        "spec": {"nodeName": spec.get("nodeName"), "volumes": spec.get("volumes") or []},
        "status": {"phase": (pod.get("status") or {}).get("phase")},
    }
    if objects.MIRROR_ANNOTATION in (meta.get("annotations") or {}):
        out["metadata"]["annotations"] = {objects.MIRROR_ANNOTATION: meta["annotations"][objects.MIRROR_ANNOTATION]}
    return out


def chosen(pod: dict, policy: Policy) -> str | None:
    """Why this pod may fail over without fencing, or None."""
    meta = pod["metadata"]
    labels = meta.get("labels") or {}
    if labels.get(fencing_names.FAILOVER_LABEL) == fencing_names.FAILOVER_IMMEDIATE:
        return f"label {fencing_names.FAILOVER_LABEL}={fencing_names.FAILOVER_IMMEDIATE}"
    if policy.failover_selector is None:
        return None
    if policy.failover_namespaces and meta.get("namespace") not in policy.failover_namespaces:
        return None
    if selectors.matches(policy.failover_selector, labels):
        return f"spec.failover of NodeFencingPolicy {policy.name}"
    return None


def _skipped(pod: dict) -> str | None:
    """Pods that failing over would not help: they stay, or are gone already."""
    meta = pod["metadata"]
    if objects.MIRROR_ANNOTATION in (meta.get("annotations") or {}):
        return "a static (mirror) pod"
    if objects.daemonset_of(pod):
        return "a DaemonSet pod"
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return "already finished"
    return None


def claim_keys(pod: dict) -> list[str]:
    """``namespace/claim`` of every PersistentVolumeClaim the pod mounts."""
    ns = pod["metadata"].get("namespace", "")
    return sorted({f"{ns}/{v['persistentVolumeClaim']['claimName']}"
                   for v in pod["spec"].get("volumes") or []
                   if isinstance(v.get("persistentVolumeClaim"), dict) and v["persistentVolumeClaim"].get("claimName")})


def single_writer(pod: dict, claims: dict) -> str | None:
    """Why the pod may hold a single-writer volume, or None. Unknown counts as single-writer."""
    ns = pod["metadata"].get("namespace", "")
    for vol in pod["spec"].get("volumes") or []:
        name = vol.get("name", "?")
        pvc = vol.get("persistentVolumeClaim")
        if isinstance(pvc, dict):
            claim = claims.get(f"{ns}/{pvc.get('claimName')}")
            if claim is None or claim.get("error"):
                return f"volume {name}: claim {pvc.get('claimName')} could not be read"
            modes = set(claim.get("accessModes") or [])
            if modes & set(SINGLE_WRITER_MODES) or not modes:
                return f"volume {name}: claim {pvc.get('claimName')} is {'/'.join(sorted(modes)) or 'of unknown access mode'}"
            continue
        ephemeral = vol.get("ephemeral")
        if isinstance(ephemeral, dict):
            modes = set((((ephemeral.get("volumeClaimTemplate") or {}).get("spec") or {}).get("accessModes")) or [])
            if modes & set(SINGLE_WRITER_MODES) or not modes:
                return f"volume {name}: ephemeral claim is {'/'.join(sorted(modes)) or 'of unknown access mode'}"
            continue
        for source in INLINE_BLOCK_SOURCES:
            if source in vol:
                return f"volume {name}: inline {source}"
    return None


@dataclass(frozen=True)
class Choice:
    pod: dict
    why: str


def select(pods: list[dict], policy: Policy, claims: dict, fenced: bool) -> tuple[list[Choice], list[Choice]]:
    """(pods to force-delete now, chosen pods held back until the node is fenced)."""
    go, held = [], []
    for pod in sorted(pods, key=key):
        why = chosen(pod, policy)
        if why is None or _skipped(pod):
            continue
        writer = single_writer(pod, claims)
        if writer and not fenced:
            held.append(Choice(pod, writer))
        else:
            go.append(Choice(pod, why))
    return go, held
