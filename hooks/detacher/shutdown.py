"""The shutdown phase: ordered pod shutdown on a detached node (pure).

Pods carry ``deletion-priority`` themselves, or inherit their DaemonSet's
``pod-deletion-priority``. Highest priority goes first, one group at a time;
the next group starts only once every pod of the current one is gone, and
each group only on a reading of every target out (hooks.detacher.drain).
Pods without a priority are left to whatever drains the node. Only a node
on its way out shuts its pods down; a DaemonSet roll's does not.
"""
from __future__ import annotations

from dataclasses import dataclass

from hooks import events, fields, objects
from hooks.contract import HookRequest, decorator_response
from hooks.detacher import names
from hooks.detacher.assess import Situation
from hooks.detacher.attachment import desired
from hooks.detacher.drain import held_for_memberships
from hooks.detacher.step import clear_error, failure
from hooks.plan import Action, Plan


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


def node_leaving(sit: Situation) -> bool:
    """Ordered pod shutdown is for nodes on their way out, not for DaemonSet rolls."""
    return any(r == "cordoned" or r.startswith("taint:") for r in sit.reasons)


def untaint_unless_leaving(request: HookRequest, sit: Situation) -> list[Action]:
    if node_leaving(sit) or not any(t.get("key") == names.DETACHING_TAINT
                                    for t in fields.objects(request.parent, "spec", "taints")):
        return []
    return [Action("kube.untaint", request.name, {"key": names.DETACHING_TAINT})]


def shutdown(request, sit, settings, now, observed) -> Plan:
    attachments = desired(request, sit, settings, observed)
    if request.finalizing:  # the node is going; its pods go with it
        return Plan(decorator_response(attachments=attachments, finalized=True))
    if not node_leaving(sit):  # a DaemonSet roll or a bare request: the node stays, so do its pods
        # Our taint is for a leaving node only; kept here it would block the very
        # DaemonSet replacement a pod-triggered detach waits for.
        return Plan(decorator_response(attachments=attachments), untaint_unless_leaving(request, sit))
    if observed.get("podsError"):
        return failure(request, settings, now, f"listing pods failed: {observed['podsError']}", attachments)
    refs = prioritized(observed.get("pods") or [], observed.get("daemonsets") or {})
    annotations: dict = {}
    clear_error(annotations, request)
    if not refs:
        return Plan(decorator_response(annotations=annotations, attachments=attachments))
    priority, group = next_group(refs)
    if group:
        held = held_for_memberships(request, sit, settings, now, observed, attachments)
        if held is not None:
            return held
    actions = []
    node_taints = fields.objects(request.parent, "spec", "taints")
    if not any(t.get("key") == names.DETACHING_TAINT for t in node_taints):
        # Keeps DaemonSet controllers from putting evicted pods straight back.
        actions.append(Action("kube.taint", request.name, {"key": names.DETACHING_TAINT, "effect": "NoSchedule"}))
    actions.extend(Action("kube.evict", r.key, {"priority": r.priority}) for r in group)
    said = [events.normal(events.EVICTING_PODS, f"Evicting {len(group)} pod(s) of deletion priority {priority}: "
                                                + ", ".join(r.key for r in group))] if group else []
    return Plan(decorator_response(annotations=annotations, attachments=attachments,
                                   resync_after=settings.drain_poll_seconds), actions, said)
