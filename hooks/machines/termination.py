"""Termination: the finalizer's steps, each resumable, none repeated once done (pure).

1. ``Terminating=True``; taint the Node ``nodewarden.io/disrupted:NoSchedule``
   and cordon it, in one patch (node-detacher treats both as "leaving" and
   takes the Node out of every load balancer first).
2. Wait for node-detacher to report the Node detached, at most
   NODEWARDEN_MACHINE_DETACH_WAIT_SECONDS (0 when it is not deployed).
3. Evict the Node's pods through the Eviction API (PodDisruptionBudgets are
   the API server's to enforce), highest deletion priority first, until none
   is left or ``drainTimeout`` has passed since termination began.
4. Wait for the Node's VolumeAttachments to go, at most
   NODEWARDEN_MACHINE_VOLUME_DETACH_TIMEOUT_SECONDS.
5. TerminateInstances (only an instance still tagged with our UID), then
   confirm ``terminated`` (an instance EC2 no longer knows counts), asking
   again every NODEWARDEN_MACHINE_TERMINATE_RETRY_SECONDS.
6. Delete the Node (only the uid joined), then ``finalized``.

A Machine that never launched is finalized once no instance with its UID can
still appear: no launch request recorded, or the last one older than the
launch-visibility window.
"""
from __future__ import annotations

from hooks import events, objects, timefmt
from hooks.detacher import names as detacher
from hooks.detacher import shutdown
from hooks.machines import names
from hooks.machines.launch import CALL_WINDOW_SECONDS
from hooks.machines.view import MachineView, Progress
from hooks.plan import Action, Change, InstanceOf, SameObject

_MIRROR = "kubernetes.io/config.mirror"


def evictable(pods: list[dict]) -> list[dict]:
    """Pods an eviction would move: not DaemonSet-owned, not static, not finished."""
    found = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        if objects.daemonset_of(pod) or _MIRROR in (meta.get("annotations") or {}):
            continue
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        found.append(pod)
    return found


def eviction_order(pods: list[dict]) -> list[dict]:
    """The pods to evict now: node-detacher's highest priority group first, unprioritized pods last."""
    refs = shutdown.prioritized(pods, {})
    top, group = shutdown.next_group(refs)
    by_key = {f"{p['metadata'].get('namespace', '')}/{p['metadata']['name']}": p for p in pods}
    if top is not None:
        return [by_key[r.key] for r in group if r.key in by_key]
    prioritized = {r.key for r in refs}
    return [p for k, p in sorted(by_key.items())
            if k not in prioritized and not p["metadata"].get("deletionTimestamp")]


def _done(term: dict, key: str) -> bool:
    return bool(term.get(key))


def step(view: MachineView, progress: Progress, node: dict | None, settings) -> None:
    status = view.status
    term = dict(status.get("termination") or {})
    status["termination"] = term
    observed = view.observed
    started = progress.stamp("startedAt", term)
    if progress.condition(names.TERMINATING, "True", "Deleted", "the Machine is being deleted"):
        progress.events.append(events.normal(events.MACHINE_TERMINATING, "terminating the Machine"))
    if observed.get("instanceError"):
        progress.error(f"instance look-up: {observed['instanceError']}", settings.error_backoff_seconds)
        return
    if not view.instance_id and view.instance is None:
        requested = view.since("launchRequestedAt")
        window = CALL_WINDOW_SECONDS + settings.machine_launch_visibility_seconds
        if requested is not None and 0 <= requested < window:
            progress.again_in(max(0.5, window - requested))  # a launch may yet show up
            return
        progress.finalized = _node_gone(view, progress, node, settings, term)
        return
    instance_id = view.instance_id or view.instance["instanceID"]
    if node is not None and not _node_phase(view, progress, node, settings, term, started):
        return
    if not _done(term, "instanceTerminatedAt"):
        _terminate(view, progress, settings, term, instance_id)
        if not _done(term, "instanceTerminatedAt"):
            return
    progress.finalized = _node_gone(view, progress, node, settings, term)


def _node_phase(view: MachineView, progress: Progress, node: dict, settings, term: dict, started: str) -> bool:
    """Cordon, wait for the detach, drain, wait for volumes; True once the Node is ready to lose its instance."""
    observed = view.observed
    meta = node["metadata"]
    name, uid = meta["name"], meta.get("uid") or ""
    spec = node.get("spec") or {}
    tainted = any(isinstance(t, dict) and t.get("key") == names.DISRUPTED_TAINT for t in spec.get("taints") or [])
    if not (tainted and spec.get("unschedulable")):
        progress.actions.append(Action(
            "kube.cordon-disrupted", name, {"uid": uid},
            reports=events.normal(events.NODE_CORDONED, f"Node {name} cordoned and tainted {names.DISRUPTED_TAINT}")))
        progress.again_in(settings.machine_poll_seconds)
        return False
    progress.stamp("cordonedAt", term)
    if not _done(term, "drainedAt"):
        annotations = meta.get("annotations") or {}
        waited = view.since("cordonedAt", term) or 0.0
        detached = bool(annotations.get(detacher.DETACHED_AT))
        if not detached and waited < min(settings.machine_detach_wait_seconds, view.spec.drain_timeout):
            progress.again_in(settings.machine_poll_seconds)
            return False
        if observed.get("podsError"):
            progress.error(f"pods on {name}: {observed['podsError']}", settings.error_backoff_seconds)
            return False
        left = evictable(observed.get("pods") or [])
        if _still_waiting(progress, settings, left, view.since("startedAt", term), view.spec.drain_timeout,
                          events.warning(events.DRAIN_TIMED_OUT,
                                         f"{len(left)} pods still on {name} after the drainTimeout of "
                                         f"{view.spec.drain_timeout:g}s: terminating anyway")):
            for pod in eviction_order(left):
                pmeta = pod["metadata"]
                progress.actions.append(Action(
                    "kube.evict", f"{pmeta.get('namespace', '')}/{pmeta['name']}",
                    record=(Change(("status", "termination", "evictions"), add=1),),
                    requires=(SameObject(names.MACHINE_KIND, view.name, view.uid),)))
            return False
        progress.stamp("drainedAt", term)
    if not _done(term, "volumesDetachedAt"):
        if observed.get("volumeAttachmentsError"):
            progress.error(f"VolumeAttachments of {name}: {observed['volumeAttachmentsError']}",
                           settings.error_backoff_seconds)
            return False
        attached = observed.get("volumeAttachments") or []
        limit = settings.machine_volume_detach_timeout_seconds
        if _still_waiting(progress, settings, attached, view.since("drainedAt", term), limit,
                          events.warning(events.VOLUME_DETACH_TIMED_OUT,
                                         f"{len(attached)} VolumeAttachments of {name} still there after {limit:g}s")):
            return False
        progress.stamp("volumesDetachedAt", term)
    return True


def _still_waiting(progress: Progress, settings, left: list, waited: float | None, limit: float,
                   timed_out) -> bool:
    """True while something is ``left`` and the wait is within its ``limit``; past it, the Warning is sent."""
    if left and (waited or 0.0) < limit:
        progress.again_in(settings.machine_poll_seconds)
        return True
    if left:
        progress.events.append(timed_out)
    return False


def _terminate(view: MachineView, progress: Progress, settings, term: dict, instance_id: str) -> None:
    found = view.instance
    if found is None or found.get("state") == "terminated":
        progress.stamp("instanceTerminatedAt", term)
        progress.events.append(events.normal(events.INSTANCE_TERMINATED, f"instance {instance_id} is terminated"))
        progress.actions.append(Action("metric.machine", view.pool, {"event": "terminated"}))
        return
    asked = view.since("terminateRequestedAt", term)
    if found.get("state") == "shutting-down" and asked is not None and asked < settings.machine_terminate_retry_seconds:
        progress.again_in(settings.machine_poll_seconds)
        return
    progress.actions.append(Action(
        "ec2.terminate", instance_id, {"region": settings.aws_region},
        record=(Change(("status", "termination", "terminateRequestedAt"), timefmt.fmt(view.now)),),
        requires=(InstanceOf(instance_id, view.uid, settings.aws_region or None),),
        reports=events.normal(events.INSTANCE_TERMINATE_REQUESTED, f"terminating instance {instance_id}")))
    progress.again_in(settings.machine_poll_seconds)


def _node_gone(view: MachineView, progress: Progress, node: dict | None, settings, term: dict) -> bool:
    """Delete the joined Node; True once the API server says it is gone or going."""
    if view.observed.get("nodeError"):
        progress.error(f"Node: {view.observed['nodeError']}", settings.error_backoff_seconds)
        return False
    if node is None:
        if not view.verified:
            progress.verify = True  # only a fresh read proves it gone
        return view.verified
    meta = node["metadata"]
    if meta.get("deletionTimestamp"):
        return True
    progress.actions.append(Action(
        "kube.delete-node", meta["name"], {"uid": meta.get("uid")},
        record=(Change(("status", "termination", "nodeDeletedAt"), timefmt.fmt(view.now)),),
        requires=(SameObject("Node", meta["name"], meta.get("uid") or ""),),
        reports=events.normal(events.NODE_DELETED, f"Node {meta['name']} deleted")))
    progress.again_in(settings.machine_poll_seconds)
    return False


