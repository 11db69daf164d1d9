"""Recovery: the powered-off node's pods and volumes go to others.

OutOfServiceTaint: taint the node out-of-service, then force-delete the pods
kube-controller-manager would remove (no wait for pod GC's next pass) and
leave the volumes to the attach/detach controller. ResourceDeletion:
force-delete every pod of the node and delete its VolumeAttachments. Either
way, wait until nothing is left, bounded by the recovery timeout. Every
destructive step rests on the instance still being off and the Node still
the fenced one, read again right before it runs.
"""
from __future__ import annotations

from hooks import bounds, events, fencing_names, timefmt
from hooks.ec2_names import OFF_STATES
from hooks.fencing import request_rules
from hooks.fencing.request_phases import ownership
from hooks.fencing.request_phases.locate import locate
from hooks.fencing.request_phases.power import observe_instance
from hooks.fencing.request_phases.state import Step, reboots
from hooks.plan import Action, Change, PoweredOff, SameObject, backoff


def fenced_node(step: Step) -> tuple:
    """What every destructive recovery step rests on, read again right before it runs:
    the instance is still powered off, and the Node is still the one this request fenced."""
    ps = step.provider
    requires: list = [PoweredOff(ps["instanceID"], ps.get("region") or None)]
    if ps.get("nodeUID"):
        requires.append(SameObject("Node", step.spec.node_name, ps["nodeUID"]))
    return tuple(requires)


def still_fenced(step: Step) -> bool:
    """Re-confirmed right before a destructive recovery step: same node, instance this cluster's and still
    powered off."""
    if not locate(step):
        return False
    state = observe_instance(step)
    if state in OFF_STATES:
        return ownership.ours(step)
    if state is None:  # unreadable: no step now; the recovery timeout bounds the wait
        step.recovery["lastError"] = f"power state of {step.provider.get('instanceID')} not confirmed: " \
                                     f"{step.provider.get('lastDescribeError', 'not read')}"
        step.resync(backoff(step.settings, 1))
        return False
    step.fail("PowerRestored", f"instance {step.provider.get('instanceID')} is {state} again: the node may "
                               "write, so its pods and volumes are not taken from it")
    return False


def recover(step: Step) -> None:
    rec = step.recovery
    rec["strategy"] = step.spec.strategy
    rec.setdefault("startTime", step.stamp())
    waited = timefmt.seconds_since(rec.get("startTime"), step.now) or 0
    if waited >= step.settings.fencing_recovery_timeout_seconds:
        rec["timedOut"] = True
        waiting = request_rules.waiting_pods(step.observed.get("nodePods") or [], step.spec.strategy)
        message = (f"gave up waiting after {waited:.0f}s: {len(waiting)} pod(s) and "
                   f"{len(step.observed.get('volumeAttachments') or [])} VolumeAttachment(s) still on the node")
        step.event("RecoveryTimedOut", message, warning=True)
        return recovered(step, "TimedOut", message)
    if step.spec.strategy == fencing_names.OUT_OF_SERVICE and rec.get("outOfServiceTaint") != fencing_names.TAINT_APPLIED:
        if not still_fenced(step):
            return
        return taint(step)
    error = step.observed.get("podsError") or step.observed.get("volumeAttachmentsError")
    if error or "nodePods" not in step.observed or "volumeAttachments" not in step.observed:
        rec["lastError"] = error or "the node's pods and VolumeAttachments were not observed"
        return step.resync(backoff(step.settings, 1))
    node_pods = step.observed["nodePods"]
    attachments = step.observed["volumeAttachments"]
    if step.spec.strategy == fencing_names.RESOURCE_DELETION and (node_pods or any(not v["deleting"] for v in attachments)):
        if not still_fenced(step):
            return
        delete_resources(step, node_pods, attachments)
        return step.resync(step.settings.fencing_recovery_poll_seconds)
    waiting = request_rules.waiting_pods(node_pods, step.spec.strategy)
    rec["remainingPods"] = len(waiting)
    rec["remainingVolumeAttachments"] = len(attachments)
    if not waiting and not attachments:
        return recovered(step, "Recovered", "no pod or VolumeAttachment of the node is left")
    doomed = request_rules.removed_with_the_taint(waiting) if step.spec.strategy == fencing_names.OUT_OF_SERVICE else []
    if doomed:
        # What kube-controller-manager would do, without waiting up to 20 s for pod GC's
        # next pass: the power-off and the node are confirmed again right before each delete.
        if not still_fenced(step):
            return
        delete_pods(step, doomed, "the out-of-service taint removes them; deleted without waiting for pod GC")
    step.resync(step.settings.fencing_recovery_poll_seconds)


def taint(step: Step) -> None:
    """The out-of-service taint, on the Node of the uid this request fenced only (never on a namesake)."""
    uid = step.provider.get("nodeUID")
    step.actions.append(Action(
        "kube.taint", step.spec.node_name,
        {"key": fencing_names.OUT_OF_SERVICE_TAINT, "value": fencing_names.OUT_OF_SERVICE_VALUE,
         "effect": fencing_names.OUT_OF_SERVICE_EFFECT, **({"uid": uid} if uid else {})},
        record=(Change(("status", "recovery", "outOfServiceTaint"), fencing_names.TAINT_APPLIED),),
        requires=fenced_node(step),
        reports=events.normal(
            events.OUT_OF_SERVICE_TAINT_APPLIED,
            f"Tainted node {step.spec.node_name} {fencing_names.OUT_OF_SERVICE_TAINT}={fencing_names.OUT_OF_SERVICE_VALUE}:"
            f"{fencing_names.OUT_OF_SERVICE_EFFECT}: kube-controller-manager recovers its pods and volumes")))
    step.resync(step.settings.fencing_recovery_poll_seconds)


def delete_pods(step: Step, node_pods: list[dict], why: str = "") -> None:
    """Force-delete each pod, only the one with its uid, only while the node is still the fenced one
    and its instance still powered off."""
    rec = step.recovery
    rec["podsDeleted"] = bounds.status_counter(rec, "podsDeleted")
    requires = fenced_node(step)
    for pod in sorted(node_pods, key=lambda p: (p["namespace"], p["name"])):
        step.actions.append(Action(
            "kube.force-delete-pod", f"{pod['namespace']}/{pod['name']}",
            {"uid": pod.get("uid"), "node": step.spec.node_name},
            record=(Change(("status", "recovery", "podsDeleted"), add=1),), requires=requires,
            reports=events.normal(events.RESOURCES_DELETED,
                                  f"Force-deleted from powered-off node {step.spec.node_name} "
                                  f"(FencingRequest {step.request.meta.get('namespace')}/{step.request.name})"
                                  + (f": {why}" if why else ""),
                                  about=events.pod_ref(pod["namespace"], pod["name"], pod.get("uid")))))


def delete_resources(step: Step, node_pods: list[dict], attachments: list[dict]) -> None:
    rec = step.recovery
    delete_pods(step, node_pods)
    rec["volumeAttachmentsDeleted"] = bounds.status_counter(rec, "volumeAttachmentsDeleted")
    requires = fenced_node(step)
    for va in (v for v in attachments if not v["deleting"]):
        step.actions.append(Action(
            "kube.delete-volume-attachment", va["name"], {"node": step.spec.node_name},
            record=(Change(("status", "recovery", "volumeAttachmentsDeleted"), add=1),), requires=requires,
            reports=events.normal(events.RESOURCES_DELETED, f"Deleted VolumeAttachment {va['name']} of "
                                                            f"powered-off node {step.spec.node_name}")))


def recovered(step: Step, reason: str, message: str) -> None:
    step.recovery["completionTime"] = step.stamp()
    step.condition(fencing_names.RECOVERED, "True", reason, message)
    if reboots(step.status, step.spec):
        step.phase = fencing_names.POWERING_ON
    else:
        step.succeed()
