"""Termination: the finalizer's steps, each resumable, none repeated once done (pure).

1. ``Terminating=True``; taint the Node ``nodewarden.io/disrupted:NoSchedule``
   and cordon it, in one patch (node-detacher treats both as "leaving" and
   takes the Node out of every load balancer first).
2. Wait for node-detacher to report the Node detached, at most
   NODEWARDEN_MACHINE_DETACH_WAIT_SECONDS (0 when it is not deployed).
3. Evict the Node's pods through the Eviction API (PodDisruptionBudgets are
   the API server's to enforce), highest deletion priority first, until none
   is left or ``drainTimeout`` has passed since termination began. A Machine
   its pool chose to disrupt (drift, expiry, a notice, consolidation) never
   goes through a PodDisruptionBudget: past ``drainTimeout`` it keeps
   draining while a budget refuses the eviction of a pod still there.
4. Wait for the Node's VolumeAttachments to go, at most
   NODEWARDEN_MACHINE_VOLUME_DETACH_TIMEOUT_SECONDS.
5. TerminateInstances, then confirm ``terminated``, asking again every
   NODEWARDEN_MACHINE_TERMINATE_RETRY_SECONDS. The instance must be the
   Machine's: tagged with its UID, or the one its status records and tagged
   for this cluster. One that is neither is left running (Warning
   ``InstanceNotOwned``) once NODEWARDEN_LEAKED_INSTANCE_GRACE_SECONDS have
   passed since termination began. EC2 not knowing an instance counts as
   terminated only once it was launched longer ago than the launch-visibility
   window: right after RunInstances, DescribeInstances may not show it yet.
6. Delete the Node (only the uid joined), then ``finalized``, once every
   other instance tagged with the Machine's UID is gone too and none can
   still appear: the recorded instance was launched longer ago than the
   launch-visibility window (a launch whose result was lost came before it),
   or, with none recorded, the last launch request is older than the call
   window plus the launch-visibility window.

The Node is the one the Machine recorded when it joined (by name and uid,
whatever its labels), else the only labelled Node naming the instance. When
the Node cannot be read, nothing goes on: a Node not seen is not a Node gone.
"""
from __future__ import annotations

from hooks import conditions, events, machine_names, objects, timefmt
from hooks.detacher import shutdown
from hooks.detacher_names import DETACHED_AT
from hooks.ec2_names import SHUTTING_DOWN, TERMINATED
from hooks.machines import disrupted, launch, pod_budgets
from hooks.machines.registration import Sight
from hooks.machines.view import MachineView, Progress
from hooks.plan import Action, Change, InstanceOf, SameObject


def evictable(pods: list[dict]) -> list[dict]:
    """Pods an eviction would move: not DaemonSet-owned, not static, not finished."""
    found = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        if objects.daemonset_of(pod) or objects.MIRROR_ANNOTATION in (meta.get("annotations") or {}):
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


def step(view: MachineView, progress: Progress, seen: Sight, settings) -> None:
    status = view.status
    term = dict(status.get("termination") or {})
    status["termination"] = term
    observed = view.observed
    started = progress.stamp("startedAt", term)
    if progress.condition(machine_names.TERMINATING, "True", "Deleted", "the Machine is being deleted"):
        progress.events.append(events.normal(events.MACHINE_TERMINATING, "terminating the Machine"))
    if observed.get("instanceError"):
        progress.error(f"instance look-up: {observed['instanceError']}", settings.error_backoff_seconds)
        return
    if observed.get("nodeError"):
        progress.error(f"Node: {observed['nodeError']}", settings.error_backoff_seconds)
        return
    if seen.unseen:
        progress.error(f"Node {status.get('nodeName')} not confirmed by the API server", settings.error_backoff_seconds)
        return
    launch.terminate_duplicates(view, progress, settings)
    node = seen.node
    instance_id = view.instance_id or (view.instance or {}).get("instanceID")
    if instance_id:
        if node is not None and not _node_phase(view, progress, node, settings, term, started):
            return
        if not (_done(term, "instanceTerminatedAt") or _done(term, "instanceReleasedAt")):
            _terminate(view, progress, settings, term, instance_id)
            if not (_done(term, "instanceTerminatedAt") or _done(term, "instanceReleasedAt")):
                return
    if not _node_gone(view, progress, node, settings, term):
        return
    if any(d.get("state") != TERMINATED for d in observed.get("duplicates") or []):
        progress.again_in(settings.machine_poll_seconds)  # a second instance of the Machine is still going
        return
    left = _recently_launched(view, settings)
    if left is not None:
        progress.again_in(max(0.5, left))  # an instance of a lost launch may yet show up
        return
    progress.finalized = True


def _node_phase(view: MachineView, progress: Progress, node: dict, settings, term: dict, started: str) -> bool:
    """Cordon, wait for the detach, drain, wait for volumes; True once the Node is ready to lose its instance."""
    observed = view.observed
    meta = node["metadata"]
    name, uid = meta["name"], meta.get("uid") or ""
    spec = node.get("spec") or {}
    tainted = any(isinstance(t, dict) and t.get("key") == machine_names.DISRUPTED_TAINT for t in spec.get("taints") or [])
    why = disrupted.reason(view)
    because = why.reason if why is not None else "Deleted"
    if not (tainted and spec.get("unschedulable")):
        progress.actions.append(Action(
            "kube.cordon-disrupted", name, {"uid": uid, "reason": because},
            reports=events.normal(events.NODE_CORDONED, f"Node {name} cordoned and tainted {machine_names.DISRUPTED_TAINT}: "
                                                        f"{because}", about=events.node_ref(name, uid))))
        progress.again_in(settings.machine_poll_seconds)
        return False
    progress.stamp("cordonedAt", term)
    if not _done(term, "drainedAt"):
        annotations = meta.get("annotations") or {}
        waited = view.since("cordonedAt", term) or 0.0
        detached = bool(annotations.get(DETACHED_AT))
        drain_limit = disrupted.drain_limit(view, view.since("startedAt", term))
        if not detached and waited < min(settings.machine_detach_wait_seconds, drain_limit):
            progress.again_in(settings.machine_poll_seconds)
            return False
        if observed.get("podsError"):
            progress.error(f"pods on {name}: {observed['podsError']}", settings.error_backoff_seconds)
            return False
        left = evictable(observed.get("pods") or [])
        drained_for = view.since("startedAt", term) or 0.0
        held = bool(left) and drained_for >= drain_limit and _held_by_budgets(view, progress, settings, node,
                                                                               left, drain_limit)
        if held or _still_waiting(progress, settings, left, drained_for, drain_limit,
                                  events.warning(events.DRAIN_TIMED_OUT,
                                                 f"{len(left)} pods still on {name} after draining for "
                                                 f"{drain_limit:g}s: terminating anyway")):
            for pod in eviction_order(left):
                pmeta = pod["metadata"]
                progress.actions.append(Action(
                    "kube.evict", f"{pmeta.get('namespace', '')}/{pmeta['name']}",
                    record=(Change(("status", "termination", "evictions"), add=1),),
                    requires=(SameObject(machine_names.MACHINE_KIND, view.name, view.uid),)))
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


def _held_by_budgets(view: MachineView, progress: Progress, settings, node: dict, left: list[dict],
                     drain_limit: float) -> bool:
    """Past the drain's bound, a Machine its pool chose to disrupt (nothing forces it) keeps draining while
    a PodDisruptionBudget refuses the eviction of a pod still there: True while it waits, with a Warning
    naming the budgets. A notice's deadline that cut the drain short governs instead: the instance goes
    then whatever we do."""
    if not disrupted.keeps_to_pod_budgets(view.obj) or drain_limit < view.spec.drain_timeout:
        return False
    if not conditions.is_true(node.get("status"), "Ready"):
        return False  # its pods serve nothing a budget protects: waiting would only keep a dead Machine
    if view.observed.get("disruptionBudgetsError"):
        progress.error(f"PodDisruptionBudgets: {view.observed['disruptionBudgetsError']}",
                       settings.error_backoff_seconds)
        return True  # not read is not "none in the way"
    held = pod_budgets.blocked(left, pod_budgets.Budgets(view.observed.get("disruptionBudgets") or []))
    if not held:
        return False
    names = sorted({b for found in held.values() for b in found})
    progress.events.append(events.warning(events.DRAIN_BLOCKED, (
        f"{len(held)} pods on {node['metadata']['name']} still wait for their PodDisruptionBudget ({', '.join(names[:5])}) after "
        f"{drain_limit:g}s: the Machine goes only once they are evicted")))
    progress.again_in(settings.machine_poll_seconds)
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


def _recently_launched(view: MachineView, settings) -> float | None:
    """Seconds left of the window in which EC2 may not show an instance of the Machine yet (None when past).

    Counted from the recorded instance's launch: any launch whose result was
    lost came before it. With none recorded, from the last launch request,
    which a launch follows within the call window.
    """
    visible = settings.machine_launch_visibility_seconds
    launched = view.since("launchedAt") if view.instance_id else None
    if launched is not None:
        left = visible - launched
    else:
        requested = view.since("launchRequestedAt")
        left = launch.CALL_WINDOW_SECONDS + visible - requested if requested is not None else 0.0
    return left if left > 0 else None


def _owned(view: MachineView, settings, found: dict) -> bool:
    """The instance is the Machine's: its UID tag, or our record of it and this cluster's tag."""
    recorded = found.get("instanceID") == view.instance_id
    return machine_names.machines_instance(found.get("tags") or {}, view.uid, settings.cluster_name if recorded else "")


def _terminate(view: MachineView, progress: Progress, settings, term: dict, instance_id: str) -> None:
    found = view.instance
    if found is None:
        left = _recently_launched(view, settings)
        if left is not None:
            progress.again_in(max(0.5, min(left, settings.machine_poll_seconds)))  # not shown yet is not gone
            return
    if found is None or found.get("state") == TERMINATED:
        progress.stamp("instanceTerminatedAt", term)
        progress.events.append(events.normal(events.INSTANCE_TERMINATED, f"instance {instance_id} is terminated"))
        progress.actions.append(Action("metric.machine", view.pool, {"event": "terminated"}))
        return
    if not _owned(view, settings, found):
        waited = view.since("startedAt", term) or 0.0
        message = (f"instance {instance_id} carries neither {machine_names.TAG_MACHINE_UID}={view.uid} nor this cluster's "
                   f"tag: not terminated")
        if waited < settings.leaked_instance_grace_seconds:
            progress.error(message, settings.error_backoff_seconds)
            return
        progress.stamp("instanceReleasedAt", term)
        progress.events.append(events.warning(events.INSTANCE_NOT_OWNED, f"{message}; left running"))
        return
    asked = view.since("terminateRequestedAt", term)
    if found.get("state") == SHUTTING_DOWN and asked is not None and asked < settings.machine_terminate_retry_seconds:
        progress.again_in(settings.machine_poll_seconds)
        return
    recorded = found.get("instanceID") == view.instance_id
    progress.actions.append(Action(
        "ec2.terminate", instance_id, {"region": settings.aws_region},
        record=(Change(("status", "termination", "terminateRequestedAt"), timefmt.fmt(view.now)),),
        requires=(InstanceOf(instance_id, view.uid, settings.aws_region or None,
                             settings.cluster_name if recorded else ""),),
        reports=events.normal(events.INSTANCE_TERMINATE_REQUESTED, f"terminating instance {instance_id}")))
    progress.again_in(settings.machine_poll_seconds)


def _node_gone(view: MachineView, progress: Progress, node: dict | None, settings, term: dict) -> bool:
    """Delete the joined Node; True once the API server says it is gone or going."""
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


