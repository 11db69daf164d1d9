"""node-detacher: a leaving Node leaves every load balancer before its pods stop.

DecoratorController on Nodes (sync + finalize); a managed ingress DaemonSet's
terminating pod asks for a detach through node-detacher-pods. Each call walks
one step of hooks.detacher.assess's phases:

  exclude     label node.kubernetes.io/exclude-from-external-load-balancers
              and annotate (the hook's own write, so the label lands before
              any deregistration and no controller registers the node
              again), then deregister in the background: the call answers
              at once and the record is written when the calls succeed
  deregister  one batched call per target group / classic ELB, for what
              the exclude step's background calls did not record
  drain       NodeBeingDetached=True; poll target state until every target
              is gone or 'unused', once no registration of ours sent before
              can still land; one read registered again is deregistered again
  shutdown    evict priority-annotated pods, highest priority first, each
              group only on a reading of every target out
  reattach    write what is about to be registered on the Node, then register
              exactly what was deregistered, remove what is ours
  rejoin      register it once more when no deregistration sent before the
              re-attach can still land, then forget it once that registration
              has landed

Progress lives in the Node's annotations, so a failed step never loses what
already happened and the next call resumes where this one stopped.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import sys
import threading
import time

from hooks import bounds, conditions, events, fields, objects, pipeline, runtime, templates, timefmt
from hooks.aws import elb as elb_api
from hooks.aws.lb_discovery import CACHE as LB_INDEX
from hooks.config import Settings
from hooks.contract import HookRequest, decorator_response
from hooks.detacher import assess as phases
from hooks.detacher import names, shutdown, targets
from hooks.detacher import pod_trigger
from hooks.kube import daemonsets, fresh, pods
from hooks.plan import Action, Change, Outcome, Plan, backoff, error_text, failure_text, unverified_text

NAME = "node-detacher"
FAILURE_REASON = events.DETACH_FAILED
log = logging.getLogger(__name__)

_REASONS = {
    "cordoned": "Cordoned",
    "deleting": "NodeDeleting",
    "daemonset-pod": "DaemonSetPodTerminating",
    "annotation": "DetachRequested",
}
# Look again this soon after the exclude step: by then its background deregistrations have usually been
# recorded; if not (they failed, or their process went), the deregister step makes them within the call.
_LABEL_SETTLE_SECONDS = 1.0
# How long after the exclude step its background deregistrations are taken to be under way: a deregister step
# within it waits for their record instead of making the same calls again (the label write's own watch event
# brings that step at once). Past it, the step makes what is unrecorded itself, where failures are reported.
_BACKGROUND_GRACE_SECONDS = 10.0
# Pause before looking again for kube-controller-manager's unschedulable taint.
_TAINT_SETTLE_SECONDS = 0.2
# A (de)registration goes out within this long of the call that decided it on the Node it read, or not at all
# (elb.NotSent): one held up on the way (a busy target group, a slow AWS) never goes out long after the node
# may have come back, or begun to leave again. Shorter than _BACKGROUND_GRACE_SECONDS, so none of the exclude
# step's calls still goes out once the deregister step may make them itself.
_SEND_SECONDS = 5.0
# Every call decided before a re-attach has landed this long after it: sent within _SEND_SECONDS of its
# decision and answered within elb.CALL_SECONDS, with room for two processes' clocks, timestamps to the second
# and the re-attach's own read of the Node (hooks.detacher.assess, which a detach's steps wait on).
_REJOIN_AFTER_SECONDS = phases.LANDED_SECONDS


class _FirstSeen:
    """When this process first saw each node waiting for its unschedulable taint (bounds that wait)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._seen: dict[str, float] = {}

    def seconds(self, key: str) -> float:
        now = time.monotonic()
        with self._lock:
            self._seen = {k: t for k, t in self._seen.items() if now - t < 120}
            return now - self._seen.setdefault(key, now)


_TAINT_PENDING = _FirstSeen()


def _unschedulable_taint_pending(node: dict) -> bool:
    """spec.unschedulable and kube-controller-manager's taint disagree: the controller has yet to write the Node."""
    unschedulable = fields.mapping(node, "spec").get("unschedulable") is True
    tainted = any(t.get("key") == names.UNSCHEDULABLE_TAINT for t in fields.objects(node, "spec", "taints"))
    return unschedulable != tainted


# --------------------------------------------------------------------------- decide


def decide(request: HookRequest, settings: Settings, now: dt.datetime, observed: dict) -> Plan:
    ended = observed.get("podRequestEnded")
    if ended:
        request = pod_trigger.without_node_request(request)
    sit = phases.assess(request, settings, now)
    waited = observed.get("unschedulableTaintPendingSeconds")
    if sit.phase == phases.REATTACH and waited is not None and waited < settings.unschedulable_taint_wait_seconds:
        # kube-controller-manager is about to write this Node (its unschedulable
        # taint): a write of ours now would be refused as a conflict and redone.
        return Plan(decorator_response(attachments=_attachment(request, sit, settings, observed),
                                       resync_after=_TAINT_SETTLE_SECONDS,
                                       finalized=False if request.finalizing else None))
    plan = _DECIDERS[sit.phase](request, sit, settings, now, observed)
    if ended:
        return pod_trigger.withdraw_node_request(plan, ended)
    response = pod_trigger.keep_node_request_clock(request, plan.response, settings, now)
    return dataclasses.replace(plan, response=response)


def _attachment(request: HookRequest, sit: phases.Situation, settings: Settings, observed: dict) -> list[dict]:
    """The desired Attachment of a detaching node: the load balancers it was in as the detach began, with any
    found since, frozen until it is back. A node that is not detaching has none."""
    if sit.instance_id is None or sit.phase in (phases.SKIP, phases.IDLE, phases.REJOIN):
        return []
    kept = sit.memberships or []
    discovery = observed.get("discovery")
    if discovery is not None:
        known = set(kept)
        memberships = kept + [m for m in (tuple(m) for m in discovery["memberships"]) if m not in known]
        # Nothing new: the Attachment as it is, so Metacontroller writes nothing (each write would also sync
        # the Node again, its owner).
        discovered_at = sit.attachment.get("discoveredAt") if sit.attachment is not None \
            and len(memberships) == len(kept) else discovery["discoveredAt"]
    elif sit.attachment is not None:
        memberships, discovered_at = kept, sit.attachment.get("discoveredAt")
    else:
        return []
    spec = targets.to_attachment_spec(memberships)
    return [
        templates.render(
            "attachment.json.j2",
            node=request.name,
            namespace=settings.namespace,
            instance_id=sit.instance_id,
            region=sit.region or "",
            targets=spec["awsTargets"],
            classic_elbs=[lb["name"] for lb in spec["awsLoadBalancers"]],
            discovered_at=discovered_at,
        )
    ]


def _clear_error(annotations: dict, request: HookRequest) -> None:
    for key in (names.ERROR, names.ATTEMPTS):
        if key in request.annotations:
            annotations[key] = None


def _deletion_deadline_passed(request: HookRequest, settings: Settings, now: dt.datetime) -> bool:
    """A deleting node is held at most NODEWARDEN_FINALIZE_DRAIN_TIMEOUT_SECONDS, whatever fails meanwhile."""
    if not request.finalizing:
        return False
    starts = [t for t in (timefmt.parse(request.meta.get("deletionTimestamp")),
                          timefmt.parse(request.annotations.get(names.SINCE))) if t is not None]
    return bool(starts) and (now - min(starts)).total_seconds() >= settings.finalize_drain_timeout_seconds


def _released(request: HookRequest, message: str, attachments: list[dict]) -> Plan:
    """A deleting node let go at its deadline: the node is leaving whatever is left undone."""
    return Plan(decorator_response(attachments=attachments, finalized=True),
                events=[events.warning(events.DETACH_ABANDONED,
                                       f"Deadline for a deleting node passed; letting it go: {message}")])


def _failure(request: HookRequest, settings: Settings, now: dt.datetime, message: str, attachments: list[dict],
             **extra) -> Plan:
    """A step that cannot proceed yet: say why on the node and retry with backoff."""
    if _deletion_deadline_passed(request, settings, now):
        return _released(request, message, attachments)
    attempt = bounds.counter(request.annotations, names.ATTEMPTS) + 1
    annotations = {names.ERROR: message, names.ATTEMPTS: str(attempt), **extra}
    return Plan(
        decorator_response(
            annotations=annotations,
            attachments=attachments,
            resync_after=backoff(settings, attempt),
            finalized=False if request.finalizing else None,
        ),
        events=[events.warning(events.DETACH_FAILED, message)],
    )


def _skip(request, sit, settings, now, observed) -> Plan:
    return Plan(decorator_response(attachments=[], finalized=True if request.finalizing else None))


def _idle(request, sit, settings, now, observed) -> Plan:
    # A serving node has no Attachment: its load balancers are looked up as a detach begins. Metacontroller
    # reads every Attachment of the cluster on each Node sync, so one per healthy Node made every sync cost
    # as much as the cluster is large.
    annotations: dict = {}
    _clear_error(annotations, request)
    return Plan(decorator_response(annotations=annotations, attachments=[],
                                   finalized=True if request.finalizing else None))


def _exclude(request, sit, settings, now, observed) -> Plan:
    reasons = ",".join(sit.reasons)
    labels = {} if names.EXCLUDE_LABEL in request.labels else {names.EXCLUDE_LABEL: names.EXCLUDE_VALUE}
    annotations = {
        names.DETACHING: "true",
        names.SINCE: request.annotations.get(names.SINCE) or timefmt.fmt(now),
        names.REASON: reasons,
    }
    if phases.began_before_registering(timefmt.parse(request.annotations.get(names.SINCE)), sit.registering_since):
        # The detach on record began before a re-attach began registering: it is over. This one begins after
        # those registrations were decided, and what the other recorded as left, or drained, is not so now.
        annotations.update({names.SINCE: timefmt.fmt(max(now, sit.registering_since + dt.timedelta(seconds=1))),
                            names.DEREGISTERED: None, names.DETACHED_AT: None})
    if observed.get("discoveryError"):
        # The label goes on all the same: the node must stop taking traffic. Its load balancers are looked
        # up again at the next step (those of the controllers that drop it on the label may be gone by then).
        log.warning("discovery failed as the detach began", extra={"node": request.name,
                                                                    "error": observed["discoveryError"]})
    attachments = _attachment(request, sit, settings, observed)
    said = [events.normal(events.DETACHING, f"Leaving load balancers: {reasons}")]
    response = decorator_response(attachments=attachments, resync_after=_LABEL_SETTLE_SECONDS,
                                  finalized=False if request.finalizing else None)
    memberships, done, pending = _left(sit, attachments)
    if pending:  # with the label, before any of them is sent
        annotations[names.DEREGISTERING] = targets.encode(set(sit.deregistering) | set(pending))
    uid = request.meta.get("uid")
    if not uid:  # no Node to write by uid: Metacontroller writes the label, the next call deregisters
        return Plan(dict(response, labels=labels, annotations=annotations), events=said)
    # The hook writes the label itself (checked against the Node it read, retried on a conflict), so the
    # deregistrations may follow at once instead of one pass through Metacontroller's queue later. Nothing
    # else is left for Metacontroller to write on the Node in this call: its update, made from the Node as
    # its cache had it, would conflict with ours.
    deregistrations = _membership_actions("deregister", pending, sit, record=True, background=True,
                                          send_by=now + dt.timedelta(seconds=_SEND_SECONDS)) \
        if sit.instance_id is not None else []
    if deregistrations:  # said with the label, so the next step knows they are under way
        annotations[names.DEREGISTERING_SINCE] = timefmt.fmt(now)
    elif sit.instance_id is not None and observed.get("discovery") is not None:
        # Looked up, and in no load balancer not already left: recorded with the label, so no deregister step
        # (a sync and a write) follows for nothing. Never when the look-up failed: unknown is not none.
        annotations[names.DEREGISTERED] = targets.encode(done | set(memberships))
    # What the call read of the Node (the API server's copy once verified): the write is tested against it.
    seen = {key: request.meta.get(key) for key in ("uid", "resourceVersion", "labels", "annotations")}
    actions = [Action("kube.label-node", request.name, {"labels": labels, "annotations": annotations, "uid": uid,
                                                        "seen": seen})]
    background_said = [_deregistered_event(sit, deregistrations)] if deregistrations else []
    return Plan(response, actions + deregistrations, said, background_events=background_said)


def _left(sit: phases.Situation, attachments: list[dict]) -> tuple[list, set, list]:
    """The memberships the desired Attachment lists, those recorded as deregistered, and those left to go."""
    memberships = targets.from_attachment_spec(attachments[0]["spec"]) if attachments else []
    done = set(sit.deregistered or ())
    return memberships, done, [m for m in memberships if m not in done]


def _deregistered_event(sit: phases.Situation, actions: list[Action]) -> events.Event:
    return events.normal(events.DEREGISTERED, f"Deregistered {sit.instance_id} from {len(actions)} load balancer(s)")


def _detaching_status(request: HookRequest, sit: phases.Situation, now: dt.datetime) -> dict | None:
    """The Node's status with NodeBeingDetached=True, or None when it already says so. Written once per
    detach, not per reason (every Node status write races the kubelet's), and in a step where the hook
    writes nothing on the Node itself, which Metacontroller's status write would conflict with."""
    node_status = fields.mapping(request.parent, "status")
    if conditions.is_true(node_status, names.CONDITION):
        return None
    reasons = ",".join(sit.reasons)
    status, _ = conditions.set(node_status, names.CONDITION, "True", _REASONS.get(sit.reasons[0], "LeavingTaint"),
                               f"node-detacher is taking the node out of its load balancers ({reasons})",
                               timefmt.fmt(now), heartbeat=True)
    return status


def _deregister(request, sit, settings, now, observed) -> Plan:
    attachments = _attachment(request, sit, settings, observed)
    if sit.instance_id is None:
        if request.finalizing:  # nothing we can act on; never hold a deletion forever
            return Plan(decorator_response(attachments=[], finalized=True),
                        events=[events.normal(events.DETACH_SKIPPED, f"cannot detach: {sit.provider_error}")])
        return _failure(request, settings, now, f"cannot detach: {sit.provider_error}", attachments)
    if observed.get("discoveryError"):
        return _failure(request, settings, now, f"load balancer discovery failed: {observed['discoveryError']}", attachments)
    memberships, done, pending = _left(sit, attachments)
    handed = timefmt.seconds_since(request.annotations.get(names.DEREGISTERING_SINCE), now)
    if pending and handed is not None and 0 <= handed < _BACKGROUND_GRACE_SECONDS \
            and not _deletion_deadline_passed(request, settings, now):
        # The exclude step's calls are under way, in this process or another: their record comes within
        # seconds. (The annotation can only delay this step; the calls themselves are the exclude step's.)
        # Its Attachment is not asked for again while Metacontroller's cache may not show it yet: created
        # twice, the second create fails the whole sync.
        return Plan(decorator_response(attachments=attachments if sit.attachment is not None else [],
                                       resync_after=_LABEL_SETTLE_SECONDS,
                                       finalized=False if request.finalizing else None))
    listed = set(sit.deregistering)
    if any(m not in listed for m in pending):
        return _list_before_leaving(request, attachments, listed | set(pending))
    # Each recorded as deregistered only once its call succeeded; the record is
    # written by this call, so a conflict on Metacontroller's write cannot lose it.
    actions = _membership_actions("deregister", pending, sit, record=True,
                                  send_by=now + dt.timedelta(seconds=_SEND_SECONDS))
    annotations = {names.DEREGISTERED: targets.encode(done | (set(memberships) - set(pending)))}
    _clear_error(annotations, request)
    said = [_deregistered_event(sit, actions)]
    return Plan(
        decorator_response(
            annotations=annotations,
            attachments=attachments,
            resync_after=settings.drain_poll_seconds,
            finalized=False if request.finalizing else None,
        ),
        actions,
        said,
        persist=(names.DEREGISTERED,),
    )


def _list_before_leaving(request: HookRequest, attachments: list[dict], listed: set) -> Plan:
    """Memberships about to leave that the Node does not list yet (looked up again at this step) are written
    on it first, by the hook itself; the next call deregisters them. So a re-attach knows every membership a
    call may have taken out, whatever becomes of the call, its record or its process."""
    return _written_first(request, attachments, {names.DEREGISTERING: targets.encode(listed)})


def _written_first(request: HookRequest, attachments: list[dict], annotations: dict) -> Plan:
    """``annotations`` written on the Node by the hook itself, tested against its uid, before any call they
    announce; the next call (brought at once by the write) makes the calls."""
    finalized = False if request.finalizing else None
    uid = request.meta.get("uid")
    if not uid:
        return Plan(decorator_response(annotations=annotations, attachments=attachments,
                                       resync_after=_LABEL_SETTLE_SECONDS, finalized=finalized))
    return Plan(decorator_response(attachments=attachments, resync_after=_LABEL_SETTLE_SECONDS, finalized=finalized),
                [Action("kube.annotate-node", request.name, {"annotations": annotations, "uid": uid})])


def _membership_actions(verb: str, memberships, sit: phases.Situation, record: bool = False,
                        background: bool = False, send_by: dt.datetime | None = None) -> list[Action]:
    """One batched (de)register call per target group or classic ELB, with every port of the instance; each
    goes out by ``send_by`` or not at all."""
    actions = []
    deadline = {"sendBy": timefmt.fmt(send_by)} if send_by is not None else {}
    for (lb_type, lb), ports in targets.group_by_load_balancer(memberships).items():
        covered = [m for m in memberships if (m[0], m[1]) == (lb_type, lb)]
        actions.append(Action(
            f"{'elbv2' if lb_type == 'tg' else 'elb'}.{verb}", lb,
            {"instance": sit.instance_id, "region": sit.region, "ports": ports,
             "memberships": [list(m) for m in covered], **deadline},
            record=(Change(("annotations", names.DEREGISTERED), union=tuple(covered)),) if record else (),
            background=background))
    return actions


def _drain_waited(request: HookRequest, settings: Settings, now: dt.datetime) -> tuple[float, bool]:
    """How long the node has been leaving, and whether the wait for its targets to drain is over."""
    waited = timefmt.seconds_since(request.annotations.get(names.SINCE), now) or 0
    limit = settings.finalize_drain_timeout_seconds if request.finalizing else settings.drain_timeout_seconds
    return waited, waited >= limit or _deletion_deadline_passed(request, settings, now)


def _read_states(sit: phases.Situation, observed: dict) -> dict[tuple, str]:
    """The state each membership the node left was read in (elb.UNREAD when there is no reading of it)."""
    states = observed.get("targetStates") or {}
    return {m: states.get(targets.state_key(m), elb_api.UNREAD) for m in sit.deregistered or ()}


def _in_service(read: dict[tuple, str]) -> list[tuple]:
    return sorted(m for m, state in read.items() if state in elb_api.IN_SERVICE_STATES)


def _deregister_again(request: HookRequest, sit: phases.Situation, settings: Settings, now: dt.datetime,
                      serving: list[tuple], status: dict | None, attachments: list[dict]) -> Plan:
    """Memberships the node left, read registered again since (a registration of ours that landed late,
    another process's, a controller's that saw the node before its exclude label): out again at once, decided
    on the Node read again right before, rather than waited for as draining; no pod is evicted meanwhile."""
    actions = _membership_actions("deregister", serving, sit, send_by=now + dt.timedelta(seconds=_SEND_SECONDS))
    said = [events.warning(events.DEREGISTERED, f"{sit.instance_id} was registered again with {len(actions)} load "
                                                "balancer(s) while leaving: deregistered again")]
    # A deleting node past its deadline is let go all the same: it is taken out on the way.
    finalized = True if _deletion_deadline_passed(request, settings, now) else False if request.finalizing else None
    return Plan(decorator_response(status=status, attachments=attachments, resync_after=settings.drain_poll_seconds,
                                   finalized=finalized), actions, said)


def _drain(request, sit, settings, now, observed) -> Plan:
    attachments = _attachment(request, sit, settings, observed)
    waited, timed_out = _drain_waited(request, settings, now)
    # The deadline is checked first: it fires whatever error reading the state gives meanwhile.
    if observed.get("targetStatesError") and not timed_out:
        return _failure(request, settings, now, f"reading target state failed: {observed['targetStatesError']}",
                        attachments)
    read = _read_states(sit, observed) if not observed.get("targetStatesError") else {}
    status = _detaching_status(request, sit, now)
    serving = _in_service(read)
    if serving:  # whatever the time: a node in service is never let go to stop its pods
        return _deregister_again(request, sit, settings, now, serving, status, attachments)
    land_by = sit.registrations_land_by
    if land_by is not None and now < land_by and not _deletion_deadline_passed(request, settings, now):
        # A registration of ours sent before the detach began may still land: no reading taken before then
        # proves the node out. Read meanwhile, so one that lands is taken out at once.
        return Plan(decorator_response(status=status, attachments=attachments,
                                       resync_after=min(settings.drain_poll_seconds, (land_by - now).total_seconds()),
                                       finalized=False if request.finalizing else None))
    draining = sorted(targets.state_key(m) for m, state in read.items() if state not in elb_api.GONE_STATES)
    if observed.get("targetStatesError"):
        draining = draining or ["(state unreadable)"]
    if draining and not timed_out:
        return Plan(decorator_response(status=status, attachments=attachments,
                                       resync_after=settings.drain_poll_seconds,
                                       finalized=False if request.finalizing else None))
    annotations = {names.DETACHED_AT: timefmt.fmt(now)}
    _clear_error(annotations, request)
    message = "Every target finished draining" if not draining else \
        f"Gave up waiting for {len(draining)} draining target(s) after {waited:.0f}s"
    return Plan(
        decorator_response(annotations=annotations, status=status, attachments=attachments,
                           finalized=True if request.finalizing else None),
        events=[events.Event(events.DETACHED, message, warning=bool(draining))],
    )


def _shutdown(request, sit, settings, now, observed) -> Plan:
    attachments = _attachment(request, sit, settings, observed)
    if request.finalizing:  # the node is going; its pods go with it
        return Plan(decorator_response(attachments=attachments, finalized=True))
    if not _node_leaving(sit):  # a DaemonSet roll or a bare request: the node stays, so do its pods
        # Our taint is for a leaving node only; kept here it would block the very
        # DaemonSet replacement a pod-triggered detach waits for.
        return Plan(decorator_response(attachments=attachments), _untaint_unless_leaving(request, sit))
    if observed.get("podsError"):
        return _failure(request, settings, now, f"listing pods failed: {observed['podsError']}", attachments)
    refs = shutdown.prioritized(observed.get("pods") or [], observed.get("daemonsets") or {})
    annotations: dict = {}
    _clear_error(annotations, request)
    if not refs:
        return Plan(decorator_response(annotations=annotations, attachments=attachments))
    priority, group = shutdown.next_group(refs)
    if group:
        held = _held_for_memberships(request, sit, settings, now, observed, attachments)
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


def _held_for_memberships(request: HookRequest, sit: phases.Situation, settings: Settings, now: dt.datetime,
                          observed: dict, attachments: list[dict]) -> Plan | None:
    """No pod is evicted while a membership the node left is not read out, as read right before: one read in
    service is deregistered again, whatever the time; within the drain timeout, one draining, not read yet or
    unreadable is waited for. None when the pods may go."""
    _, timed_out = _drain_waited(request, settings, now)
    if observed.get("targetStatesError") and not timed_out:
        return _failure(request, settings, now, f"reading target state failed: {observed['targetStatesError']}",
                        attachments)
    read = _read_states(sit, observed) if not observed.get("targetStatesError") else {}
    serving = _in_service(read)
    if serving:
        return _deregister_again(request, sit, settings, now, serving, None, attachments)
    if not timed_out and any(state not in elb_api.GONE_STATES for state in read.values()):
        return Plan(decorator_response(attachments=attachments, resync_after=settings.drain_poll_seconds))
    return None


def _untaint_unless_leaving(request: HookRequest, sit: phases.Situation) -> list[Action]:
    if _node_leaving(sit) or not any(t.get("key") == names.DETACHING_TAINT
                                     for t in fields.objects(request.parent, "spec", "taints")):
        return []
    return [Action("kube.untaint", request.name, {"key": names.DETACHING_TAINT})]


def _node_leaving(sit: phases.Situation) -> bool:
    """Ordered pod shutdown is for nodes on their way out, not for DaemonSet rolls."""
    return any(r == "cordoned" or r.startswith("taint:") for r in sit.reasons)


def _reattach(request, sit, settings, now, observed) -> Plan:
    attachments = _attachment(request, sit, settings, observed)
    deregistered = set(sit.deregistered or ())
    if request.annotations.get(names.SINCE):
        # A deregistration may have happened whose record never landed (Metacontroller's
        # Node update lost a race with the uncordon): restore all the frozen Attachment
        # lists too. Registering a registered target changes nothing.
        deregistered |= set(sit.memberships or ())
    # What was said to be about to leave (a call may have taken it out whatever became of its record), and
    # what an earlier re-attach still had to register once more.
    deregistered |= set(sit.deregistering) | set(sit.rejoin)
    deregistered = sorted(deregistered)
    actions = []
    said = []
    failing_for = timefmt.seconds_since(request.annotations.get(names.REATTACH_FAILING_SINCE), now)
    if failing_for is not None and failing_for >= settings.reattach_timeout_seconds:
        # Holding our exclude label any longer would keep the node out of every
        # load balancer for good; the controllers that register nodes take it from here.
        deregistered = []
        said.append(events.warning(events.REATTACH_ABANDONED,
                                   f"Re-attaching failed for {failing_for:.0f}s "
                                   f"({request.annotations.get(names.ERROR, 'unknown error')}); our exclude label "
                                   "comes off and the load balancers' own controllers register the node"))
    if deregistered and sit.instance_id is None:
        return _failure(request, settings, now, f"cannot re-attach: {sit.provider_error}", attachments)
    if deregistered and not _listed_to_join(request, sit, deregistered):
        return _list_before_joining(request, attachments, deregistered, now)
    actions.extend(_membership_actions("register", deregistered, sit,
                                       send_by=now + dt.timedelta(seconds=_SEND_SECONDS)))
    if any(t.get("key") == names.DETACHING_TAINT for t in fields.objects(request.parent, "spec", "taints")):
        actions.append(Action("kube.untaint", request.name, {"key": names.DETACHING_TAINT}))
    labels = {names.EXCLUDE_LABEL: None} if request.labels.get(names.EXCLUDE_LABEL) == names.EXCLUDE_VALUE else {}
    annotations = {key: None for key in names.OUR_ANNOTATIONS + names.REJOIN_ANNOTATIONS if key in request.annotations}
    if deregistered:
        # A deregistration sent before this call may still land after these registrations (held up on the
        # way; its record and its process may be gone by then): all of it is registered once more when none
        # can still land.
        annotations.update({names.REJOIN: targets.encode(deregistered),
                            names.REJOIN_AT: timefmt.fmt(now + dt.timedelta(seconds=_REJOIN_AFTER_SECONDS))})
    status, changed = conditions.remove(fields.mapping(request.parent, "status"), names.CONDITION)
    registered = sum(1 for a in actions if a.kind.endswith(".register"))
    said.append(events.normal(events.REATTACHED, f"Registered again with {registered} load balancer(s)"
                              if registered else "Back in service"))
    # A node leaving our selector is let go only after its rejoin: no call of ours would come after.
    finalized = not deregistered if request.finalizing else None
    return Plan(
        decorator_response(labels=labels, annotations=annotations, status=status if changed else None,
                           attachments=attachments, resync_after=_REJOIN_AFTER_SECONDS if deregistered else None,
                           finalized=finalized),
        actions,
        said,
    )


def _listed_to_join(request: HookRequest, sit: phases.Situation, joining: list) -> bool:
    """Whether the Node lists ``joining`` in nodewarden.io/rejoin, written since the detach on record began."""
    since = timefmt.parse(request.annotations.get(names.SINCE))
    return set(joining) <= set(sit.rejoin) and sit.registering_since is not None \
        and (since is None or phases.began_before_registering(since, sit.registering_since))


def _list_before_joining(request: HookRequest, attachments: list[dict], joining: list, now: dt.datetime) -> Plan:
    """What is about to be registered is written on the Node first, with rejoin-at; the next call registers
    it. So a call that finds the node leaving again, whatever became of this re-attach's call and its answer,
    knows registrations may have been sent since the detach on record began: that detach is over, a new one
    begins, and its drain waits until they have landed (hooks.detacher.assess)."""
    return _written_first(request, attachments, {
        names.REJOIN: targets.encode(joining),
        names.REJOIN_AT: timefmt.fmt(now + dt.timedelta(seconds=_REJOIN_AFTER_SECONDS))})


def _rejoin(request, sit, settings, now, observed) -> Plan:
    """Back in service: once no deregistration sent before the re-attach can still land, what it registered
    is registered once more (a target that is in stays as it is), and forgotten; rejoin-at stays until these
    registrations have landed, so a detach beginning meanwhile waits for them."""
    due = phases.rejoin_at(request.annotations, now)
    if due is not None and now < due:
        return Plan(decorator_response(attachments=[], resync_after=(due - now).total_seconds(),
                                       finalized=False if request.finalizing else None))
    annotations = {key: None for key in names.REJOIN_ANNOTATIONS if key in request.annotations}
    _clear_error(annotations, request)
    said = []
    if sit.rejoin and sit.instance_id is None:
        said.append(events.warning(events.REATTACH_ABANDONED, f"cannot register again: {sit.provider_error}"))
    actions = _membership_actions("register", sit.rejoin, sit, send_by=now + dt.timedelta(seconds=_SEND_SECONDS)) \
        if sit.instance_id is not None else []
    if actions and not request.finalizing:  # a node leaving our selector: no detach of ours comes after
        annotations[names.REJOIN_AT] = timefmt.fmt(now + dt.timedelta(seconds=_REJOIN_AFTER_SECONDS))
        return Plan(decorator_response(annotations=annotations, attachments=[], resync_after=_REJOIN_AFTER_SECONDS),
                    actions, said)
    return Plan(decorator_response(annotations=annotations, attachments=[],
                                   finalized=True if request.finalizing else None), actions, said)


_DECIDERS = {
    phases.SKIP: _skip,
    phases.IDLE: _idle,
    phases.EXCLUDE: _exclude,
    phases.DEREGISTER: _deregister,
    phases.DRAIN: _drain,
    phases.SHUTDOWN: _shutdown,
    phases.REATTACH: _reattach,
    phases.REJOIN: _rejoin,
}


# --------------------------------------------------------------------------- observe


def gather(request: HookRequest, ctx: runtime.Context, now: dt.datetime) -> dict:
    """The look-ups this call's phase needs; failures are recorded, never raised."""
    settings = ctx.settings
    observed: dict = {}
    ended = daemonsets.end_of_node_request(request, ctx, now)
    if ended:
        observed["podRequestEnded"] = ended
        request = pod_trigger.without_node_request(request)
    sit = phases.assess(request, settings, now)
    if sit.phase == phases.REATTACH and _unschedulable_taint_pending(request.parent):
        observed["unschedulableTaintPendingSeconds"] = _TAINT_PENDING.seconds(
            f"{request.meta.get('uid')}/{request.name}/{sit.phase}")
    if sit.needs_discovery():
        try:
            index = LB_INDEX.get(ctx.aws, sit.region or ctx.aws.region(), settings)
            observed["discovery"] = {
                "memberships": [list(m) for m in index.memberships(sit.instance_id)],
                # When the index was read, so that two calls served by one index ask for the same Attachment.
                "discoveredAt": timefmt.fmt(index.listed_at),
            }
        except Exception as exc:  # noqa: BLE001 - any AWS/transport failure is reported, not raised
            observed["discoveryError"] = error_text(exc)
    if sit.phase == phases.DRAIN:
        _observe_memberships(observed, ctx, sit, request, now)
    if sit.phase == phases.SHUTDOWN and not request.finalizing and _node_leaving(sit):
        try:
            node_pods = pods.on_node(ctx.kube, request.name)
            owners = {objects.daemonset_of(p) for p in node_pods} - {None}
            observed["pods"] = node_pods
            observed["daemonsets"] = pods.daemonset_annotations(ctx.kube, owners) if owners else {}
        except Exception as exc:  # noqa: BLE001
            observed["podsError"] = error_text(exc)
        else:
            if shutdown.next_group(shutdown.prioritized(node_pods, observed["daemonsets"]))[1]:
                _observe_memberships(observed, ctx, sit, request, now)  # read right before any pod is evicted
    return observed


def _observe_memberships(observed: dict, ctx: runtime.Context, sit: phases.Situation, request: HookRequest,
                         now: dt.datetime) -> None:
    try:
        observed["targetStates"] = _target_states(ctx, sit, request, now)
    except Exception as exc:  # noqa: BLE001 - any AWS/transport failure is reported, not raised
        observed["targetStatesError"] = error_text(exc)


def _target_states(ctx: runtime.Context, sit: phases.Situation, request: HookRequest,
                   now: dt.datetime) -> dict[str, str]:
    """The instance's state in every target group and classic ELB it was deregistered from, each read at most
    once per poll interval for all nodes (hooks.aws.elb.HealthBoard), by a reading begun after the node's
    deregistrations were recorded, and once no registration of ours sent before the detach can still land,
    after that."""
    settings = ctx.settings
    states = {}
    began = timefmt.parse(request.annotations.get(names.SINCE)) or now
    land_by = sit.registrations_land_by
    settled = land_by.timestamp() if land_by is not None and now >= land_by else None
    # Reading for longer than a poll interval would hold the hook thread for nothing: the rest is
    # answered from the readings at hand and looked at again on the next poll.
    reading_until = time.monotonic() + settings.drain_poll_seconds
    for (lb_type, name), ports in targets.group_by_load_balancer(sit.deregistered or ()).items():
        if lb_type == "tg":
            client, read = ctx.aws.client("elbv2", sit.region), elb_api.target_states
        else:  # a classic ELB: registered or not (it stops sending to an instance as it is deregistered)
            client, read, ports = ctx.aws.client("elb", sit.region), elb_api.instance_states, [0]
        found = elb_api.HEALTH.states(client, sit.region or "", name, sit.instance_id, ports,
                                      max_age=settings.drain_poll_seconds, not_before=began.timestamp(),
                                      after=settled, may_read=time.monotonic() < reading_until,
                                      clock=lambda: ctx.now().timestamp(), read=read)
        for port, state in found.items():
            states[targets.state_key(("tg", name, port) if lb_type == "tg" else ("elb", name))] = state
    return states


# --------------------------------------------------------------------------- act


def settle(request: HookRequest, plan: Plan, outcomes: list[Outcome], settings: Settings,
           now: dt.datetime) -> Plan:
    """What failed steps mean: the error on the node, a backoff, and for a re-attach, the detach state kept.

    A failed deregistration needs nothing here: it is recorded as deregistered
    only when it succeeds. The plan's Events are not sent: DetachFailed says it.
    """
    failed = [o for o in outcomes if not o.ok]
    response = plan.response
    if _deletion_deadline_passed(request, settings, now):
        # A deleting node is never held past its deadline.
        return Plan(dict(response, finalized=True), persist=plan.persist)
    annotations = dict(response.get("annotations") or {})
    for o in failed:
        if o.action.kind == "kube.label-node":
            # Not written by the hook: Metacontroller writes them, and the next call deregisters (nothing was
            # handed over, so nothing is said to be under way).
            response = dict(response, labels={**(response.get("labels") or {}), **o.action.params["labels"]})
            annotations.update({k: v for k, v in o.action.params["annotations"].items()
                                if k != names.DEREGISTERING_SINCE})
    if any(o.action.kind.endswith(".register") for o in failed):
        # Re-attach incomplete: keep detach state, remember what still needs registering.
        failed_memberships = {tuple(m) for o in failed for m in o.action.params.get("memberships", [])}
        response = dict(response, labels={}, status=None)
        annotations = {names.DEREGISTERED: targets.encode(failed_memberships),
                       names.REATTACH_FAILING_SINCE: request.annotations.get(names.REATTACH_FAILING_SINCE)
                       or timefmt.fmt(now),
                       **{k: v for k, v in annotations.items() if k in (names.FOR_POD, names.FOR_POD_SINCE)}}
        if "finalized" in response:
            response["finalized"] = False
    attempt = bounds.counter(request.annotations, names.ATTEMPTS) + 1
    annotations[names.ERROR] = failure_text(outcomes)
    annotations[names.ATTEMPTS] = str(attempt)
    return Plan(dict(response, annotations=annotations, resyncAfterSeconds=backoff(settings, attempt)),
                persist=plan.persist)


# --------------------------------------------------------------------------- hooks


# Steps that take a node out of service: decided again on the Node as the API server has it.
_VERIFIED_KINDS = ("elbv2.deregister", "elb.deregister", "kube.evict", "kube.taint", "kube.annotate-node",
                   "kube.label-node")


def needs_verification(request: HookRequest, plan: Plan) -> bool:
    return any(a.kind in _VERIFIED_KINDS for a in plan.actions)


def verify(request: HookRequest, ctx: runtime.Context) -> HookRequest:
    """The request with the Node re-read from the API server: same uid, or Unverified."""
    return fresh.same_parent(request, ctx.kube)


def unverified(request: HookRequest, plan: Plan, ctx: runtime.Context, reason: str) -> Plan:
    """Nothing disruptive without the API server's word; the Attachment stays (omitting it would delete it),
    and the node's error annotation says why nothing moved."""
    log.warning("node-detacher did not act", extra={"object": request.name, "reason": reason})
    attachments = plan.response.get("attachments") or []
    message = unverified_text(reason)[:1024]
    annotations = {names.ERROR: message} if request.annotations.get(names.ERROR) != message else {}
    return Plan(decorator_response(annotations=annotations, attachments=attachments,
                                   resync_after=backoff(ctx.settings, 1),
                                   finalized=False if request.finalizing else None))


def sync(request: HookRequest, ctx: runtime.Context | None = None) -> dict:
    return pipeline.run(sys.modules[__name__], request, ctx)


def finalize(request: HookRequest, ctx: runtime.Context | None = None) -> dict:
    return pipeline.run(sys.modules[__name__], request, ctx)
