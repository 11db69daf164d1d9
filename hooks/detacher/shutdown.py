"""Ordered pod shutdown: which pods to evict next (pure).

Pods carry ``deletion-priority`` themselves, or inherit their DaemonSet's
``pod-deletion-priority``. Highest priority goes first, one group at a time;
the next group starts only once every pod of the current one is gone. Pods
without a priority are left to whatever drains the node.
"""
from __future__ import annotations

from dataclasses import dataclass

from hooks import objects
from hooks.detacher import names


@dataclass(frozen=True)
class PodRef:
    namespace: str
    name: str
    priority: int
    terminating: bool

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _priority(value) -> int | None:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None




def prioritized(pods: list[dict], daemonsets: dict[str, dict]) -> list[PodRef]:
    """Pods that have a deletion priority, from their own or their DaemonSet's annotation."""
    refs = []
    for pod in pods:
        meta = pod.get("metadata", {})
        priority = _priority((meta.get("annotations") or {}).get(names.POD_PRIORITY))
        if priority is None:
            ds = objects.daemonset_of(pod)
            ds_annotations = (daemonsets.get(ds) or {}).get("annotations") or {} if ds else {}
            priority = _priority(ds_annotations.get(names.DAEMONSET_POD_PRIORITY))
        if priority is None:
            continue
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            continue  # already stopped
        refs.append(PodRef(meta.get("namespace", ""), meta["name"], priority, bool(meta.get("deletionTimestamp"))))
    return refs


def next_group(refs: list[PodRef]) -> tuple[int | None, list[PodRef]]:
    """The highest remaining priority and the pods of it still to evict.

    Evicting an already-terminating pod is skipped; the group stays current
    until all its pods are gone, so a lower group never starts early.
    """
    if not refs:
        return None, []
    top = max(r.priority for r in refs)
    group = sorted((r for r in refs if r.priority == top), key=lambda r: r.key)
    return top, [r for r in group if not r.terminating]
