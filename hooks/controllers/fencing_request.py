"""fencing-request: power a node off through AWS, confirm it, recover its workloads.

CompositeController on FencingRequest (no children; the Node is related by
name through customize). The status is the whole record, Job-like as the KEP
writes it, and each call moves one step:

  Pending/PoweringOff  StopInstances(Force=True), then DescribeInstances until
                       the state is stopped or terminated: only that sets
                       FencingSucceeded. Each attempt has a timeout; after the
                       last one fails, errorReason/errorMessage, Failed, and
                       nothing is recovered.
  Recovering           OutOfServiceTaint: taint the node out-of-service, then
                       force-delete the pods kube-controller-manager would (no
                       wait for pod GC's pass) and let it detach the volumes.
                       ResourceDeletion: force-delete every pod on
                       the node and delete its VolumeAttachments. Either way,
                       wait until nothing is left (bounded by a timeout).
  PoweringOn           Reboot only: StartInstances until the state is running.
  Succeeded            and, whatever the phase, the out-of-service taint comes
                       off once the node is Ready again with no terminating pod
                       and no VolumeAttachment left (bounded by the release
                       timeout), unless an unfinished request for the node in
                       any namespace still holds it.

The finalize hook takes the out-of-service taint off when a request is
deleted half-way, unless another live request for the node still holds it.

Every call that would act (or fail the request on what its Node says) is
decided again on the FencingRequest and Node read fresh from the API server;
when they cannot be read, nothing is done but Verified=False and a backoff.
"""
from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import logging
import sys

from hooks import bounds, conditions, events, fields, pipeline, runtime, timefmt
from hooks.aws import power
from hooks.aws import providerid
from hooks.aws.clients import describe_error as aws_error
from hooks.config import Settings
from hooks.contract import HookRequest, ObjectGroups, RequestError, composite_response, parse_object
from hooks.fencing import health, names
from hooks.fencing import request as fr
from hooks.kube import fresh, pods
from hooks.kube import fencing as kube_fencing
from hooks.kube.client import describe_error as kube_error
from hooks.plan import Action, Change, Outcome, Plan, PoweredOff, SameObject, backoff

NAME = "fencing-request"
FAILURE_REASON = events.FENCING_ACTION_FAILED
log = logging.getLogger(__name__)

_OP = {"stop": ("Stop", "PowerOff", names.POWERING_OFF), "start": ("Start", "PowerOn", names.POWERING_ON)}


# --------------------------------------------------------------------------- customize


def customize(parent: dict, ctx: runtime.Context | None = None) -> dict:
    """The one Node the request names."""
    try:
        spec = fr.parse_spec(parent)
    except RequestError:
        return {"relatedResources": []}
    return {"relatedResources": [{"apiVersion": "v1", "resource": "nodes", "names": [spec.node_name]}]}


# --------------------------------------------------------------------------- situation


def _node(request: HookRequest, spec: fr.Spec, observed: dict | None = None) -> dict | None:
    """The Node from the request, else as the API server answered when the request lacked it."""
    return request.related.get("Node", spec.node_name) or (observed or {}).get("node")


def _node_gone(observed: dict) -> bool:
    """Only the API server's 404 proves a Node is gone; its absence from one request does not."""
    return bool(observed.get("nodeGone"))


def _has_out_of_service_taint(node: dict | None) -> bool:
    return any(t.get("key") == names.OUT_OF_SERVICE_TAINT
               for t in fields.objects(node or {}, "spec", "taints", where="related.Node"))


def _ours_to_remove(status: dict, spec: fr.Spec, node: dict | None) -> bool:
    """Whether this request put the out-of-service taint that the node carries.

    Also true when the taint went on but the status saying so was never
    written (the request was deleted in between): fenced, strategy taint,
    and not recorded as removed.
    """
    return _has_out_of_service_taint(node) and _may_hold(status, spec)


def _may_hold(status: dict, spec: fr.Spec) -> bool:
    """Whether this request may have put the out-of-service taint on its node (see _ours_to_remove)."""
    recorded = _recorded(status, "recovery").get("outOfServiceTaint")
    if recorded == names.TAINT_APPLIED:
        return True
    fenced = (conditions.find(status, names.FENCING_SUCCEEDED) or {}).get("status") == "True"
    return fenced and spec.strategy == names.OUT_OF_SERVICE and recorded != names.TAINT_REMOVED


def _in_aftercare(status: dict, node: dict | None) -> bool:
    """Recovered, our taint on, and the node Ready *again*: it turned Ready after the power-off
    (a Ready=True from before the node was fenced is stale, not a return)."""
    rec = _recorded(status, "recovery")
    if rec.get("outOfServiceTaint") != names.TAINT_APPLIED or not rec.get("completionTime") or node is None:
        return False
    node_status = fields.mapping(node, "status", where="related.Node")
    if not health.is_ready(node_status):
        return False
    ready_since = timefmt.parse((conditions.find(node_status, "Ready") or {}).get("lastTransitionTime"))
    powered_off = timefmt.parse(_recorded(status, "providerStatus").get("poweredOffTime"))
    return ready_since is None or powered_off is None or ready_since >= powered_off


def _own_status(parent: dict) -> dict:
    """A working copy of the status; a field of ours with the wrong type is dropped, never trusted."""
    status = copy.deepcopy(fields.mapping(parent, "status"))
    for key in ("providerStatus", "recovery"):
        if key in status and not isinstance(status[key], dict):
            del status[key]
    if "conditions" in status and not isinstance(status["conditions"], list):
        del status["conditions"]
    for key in ("phase", "startTime", "completionTime", "errorReason", "errorMessage"):
        if key in status and not isinstance(status[key], str):
            del status[key]
    if status.get("phase") not in (None, *names.PHASES):
        del status["phase"]
    return status


# Our own timestamps that start a deadline or mark a step done. One that does
# not parse restarts from now: a deadline must still fire, never wait forever.
_DEADLINE_STAMPS = ((None, ("startTime", "completionTime")),
                    ("providerStatus", ("lastStopTime", "lastStartTime")),
                    ("recovery", ("startTime", "completionTime", "nodeReadyAgainTime")))


def _restamp(status: dict, now: dt.datetime) -> None:
    for section, keys in _DEADLINE_STAMPS:
        holder = status if section is None else _recorded(status, section)
        for key in keys:
            if holder.get(key) and timefmt.parse(holder[key]) is None:
                holder[key] = timefmt.fmt(now)


def _recorded(status: dict, section: str) -> dict:
    value = status.get(section)
    return value if isinstance(value, dict) else {}


# --------------------------------------------------------------------------- decide


class _Step:
    """One call's walk through the phases: a working copy of the status, actions, resyncs."""

    def __init__(self, request: HookRequest, spec: fr.Spec, settings: Settings, now: dt.datetime, observed: dict):
        self.request, self.spec, self.settings, self.now, self.observed = request, spec, settings, now, observed
        self.status = _own_status(request.parent)
        generation = request.meta.get("generation")
        self.status["observedGeneration"] = generation if isinstance(generation, int) and generation >= 0 else 0
        _restamp(self.status, now)
        self.node = _node(request, spec, observed)
        self.actions: list[Action] = []
        self.events: list[events.Event] = []
        self.resyncs: list[float] = []

    # small helpers ------------------------------------------------------
    @property
    def phase(self) -> str:
        return self.status.get("phase") or names.PENDING

    @phase.setter
    def phase(self, value: str) -> None:
        self.status["phase"] = value

    @property
    def provider(self) -> dict:
        return self.status.setdefault("providerStatus", {})

    @property
    def recovery(self) -> dict:
        return self.status.setdefault("recovery", {})

    def stamp(self) -> str:
        return timefmt.fmt(self.now)

    def resync(self, seconds: float) -> None:
        self.resyncs.append(max(1.0, seconds))

    def event(self, reason: str, message: str, warning: bool = False) -> None:
        self.events.append(events.Event(reason, message[:events.MESSAGE_LIMIT], warning))

    def condition(self, ctype: str, status: str, reason: str, message: str) -> None:
        self.status, _ = conditions.set(self.status, ctype, status, reason, message, self.stamp())

    def fenced_node(self) -> tuple:
        """What every destructive recovery step rests on, read again right before it runs:
        the instance is still powered off, and the Node is still the one this request fenced."""
        ps = self.provider
        requires: list = [PoweredOff(ps["instanceID"], ps.get("region") or None)]
        if ps.get("nodeUID"):
            requires.append(SameObject("Node", self.spec.node_name, ps["nodeUID"]))
        return tuple(requires)

    def fail(self, reason: str, message: str) -> None:
        self.phase = names.FAILED
        self.status["errorReason"] = reason
        self.status["errorMessage"] = message
        self.status["completionTime"] = self.stamp()
        self.condition(names.FAILED_CONDITION, "True", reason, message)
        self.event("FencingFailed", f"{reason}: {message}", warning=True)

    def succeed(self) -> None:
        self.phase = names.SUCCEEDED
        self.status["completionTime"] = self.stamp()
        what = "powered off, recovered" + (" and powered on again" if self.spec.action == names.ACTION_REBOOT else "")
        self.condition(names.COMPLETE_CONDITION, "True", "Fenced", f"node {self.spec.node_name} {what}")
        self.event("FencingComplete", f"Node {self.spec.node_name} {what}")

    # phases -------------------------------------------------------------
    def start(self) -> None:
        if not self.status.get("startTime"):
            self.status["startTime"] = self.stamp()
        if not self.status.get("phase"):
            self.phase = names.PENDING
            self.event("FencingStarted", f"Fencing node {self.spec.node_name}: action {self.spec.action}, "
                                         f"recovery {self.spec.strategy}")

    def locate(self) -> bool:
        """Instance and region from the node; False when it cannot be located (Failed only when proven)."""
        if self.node is None:
            if _node_gone(self.observed):
                self.fail("NodeNotFound", f"Node {self.spec.node_name} does not exist")
            else:  # missing from this request is not proof: the API server is asked again next time
                self.provider["lastDescribeError"] = self.observed.get("nodeError") or \
                    f"Node {self.spec.node_name} was not in the request and could not be looked up"
                self.unlocated()
            return False
        uid = self.node["metadata"].get("uid")
        for expected in (self.spec.node_uid, _recorded(self.status, "providerStatus").get("nodeUID")):
            if expected and uid != expected:
                self.fail("NodeReplaced", f"Node {self.spec.node_name} is now uid {uid}, not the {expected} "
                                          "this request was made for")
                return False
        try:
            pid = providerid.parse(fields.string(self.node, "spec", "providerID", where="related.Node"))
        except providerid.ProviderIDError as exc:
            self.fail("InvalidProviderID", str(exc))
            return False
        recorded = self.provider.get("instanceID")
        if recorded and recorded != pid.instance_id:
            self.fail("NodeReplaced", f"Node {self.spec.node_name} now runs on instance {pid.instance_id}, "
                                      f"not the {recorded} this request fences")
            return False
        self.provider["instanceID"] = pid.instance_id
        self.provider["region"] = pid.region or self.settings.aws_region
        if uid:
            self.provider["nodeUID"] = uid
        return True

    def unlocated(self) -> None:
        """Wait for the Node to be readable, but not for ever: a power operation that cannot start or go on
        fails NODEWARDEN_FENCING_QUEUE_TIMEOUT_SECONDS after its last step (recovery has its own timeout)."""
        if self.phase == names.RECOVERING:
            return self.resync(backoff(self.settings, 1))
        provider, rec = _recorded(self.status, "providerStatus"), _recorded(self.status, "recovery")
        steps = [timefmt.parse(v) for v in (self.status.get("startTime"), provider.get("lastStopTime"),
                                            provider.get("lastStartTime"), rec.get("completionTime"))]
        last = max((m for m in steps if m is not None), default=None)
        waited = (self.now - last).total_seconds() if last else 0
        if waited >= self.settings.fencing_queue_timeout_seconds:
            return self.fail("NodeUnavailable", f"Node {self.spec.node_name} could not be read for {waited:.0f}s: "
                                                f"{self.provider.get('lastDescribeError')}")
        self.resync(backoff(self.settings, 1))

    def observe_instance(self) -> str | None:
        seen = self.observed.get("instance")
        seen = seen if isinstance(seen, dict) else {}
        if isinstance(seen.get("state"), str) and seen["state"]:
            self.provider["instanceState"] = seen["state"]
            self.provider.pop("lastDescribeError", None)
            return seen["state"]
        if seen.get("error"):
            # Unreadable is not confirmed: keep polling; the attempt timeout decides.
            self.provider["lastDescribeError"] = str(seen["error"])[:1000]
        return None

    def attempt(self, op: str) -> None:
        """One step of a power operation with the spec's retries, interval and timeout."""
        title, what, phase = _OP[op]
        ps = self.provider
        count = bounds.status_counter(ps, f"{op}Attempts", fr.MAX_RETRIES)
        last = timefmt.parse(ps.get(f"last{title}Time"))
        error = ps.get(f"last{title}Error")
        elapsed = (self.now - last).total_seconds() if last else None
        if count == 0 or elapsed is None:
            return self.issue(op, count + 1)
        if error:
            if count >= self.spec.retries:
                return self.fail(f"{what}Failed", f"{op} of instance {ps.get('instanceID')} failed "
                                                  f"{count} time(s); last: {error}")
            if elapsed >= self.spec.retry_interval:
                return self.issue(op, count + 1)
            return self.resync(self.spec.retry_interval - elapsed)
        if elapsed >= self.spec.timeout:
            if count >= self.spec.retries:
                return self.fail(f"{what}Timeout", f"instance {ps.get('instanceID')} still "
                                                   f"{ps.get('instanceState', 'unknown')} {self.spec.timeout:g}s after "
                                                   f"attempt {count} of {self.spec.retries}")
            return self.issue(op, count + 1)
        self.phase = phase
        self.resync(min(self.settings.fencing_poll_seconds, self.spec.timeout - elapsed))

    def issue(self, op: str, number: int) -> None:
        title, _, phase = _OP[op]
        ps = self.provider
        if op == "stop" and health.is_ready(fields.mapping(self.node, "status", where="related.Node")):
            # Fencing is for a node that stopped answering; a Ready node is serving and writing.
            return self.fail("NodeReady", f"Node {self.spec.node_name} is Ready: only a NotReady node is powered off")
        ps[f"{op}Attempts"] = number
        ps[f"last{title}Time"] = self.stamp()
        ps.pop(f"last{title}Error", None)
        self.phase = phase
        verb = "Force-stopping" if op == "stop" else "Starting"
        self.actions.append(Action(
            f"aws.{op}", ps["instanceID"], {"region": ps.get("region"), "attempt": number},
            reports=events.normal(f"{title}Requested",
                                  f"{verb} instance {ps['instanceID']} (attempt {number} of {self.spec.retries})")))
        self.resync(self.settings.fencing_poll_seconds)

    def queued(self) -> bool:
        """True while an older live request for the same node goes first (or that cannot be known)."""
        if bounds.status_counter(_recorded(self.status, "providerStatus"), "stopAttempts") or self.status.get("phase") not in (
                None, names.PENDING):
            return False  # fencing in flight is never interrupted
        ahead = self.observed.get("olderRequests")
        if isinstance(ahead, list) and not ahead:
            if conditions.find(self.status, names.QUEUED_CONDITION):
                self.condition(names.QUEUED_CONDITION, "False", "First", "no other request fences the node")
            return False
        if isinstance(ahead, list):
            message = f"FencingRequest {', '.join(map(str, ahead))} fences node {self.spec.node_name} first"
        else:
            message = f"cannot tell whether another request fences node {self.spec.node_name}: " \
                      f"{self.observed.get('requestsError') or 'not looked up'}"
        waited = timefmt.seconds_since(self.status.get("startTime"), self.now) or 0
        if waited >= self.settings.fencing_queue_timeout_seconds:
            self.fail("AnotherFenceActive", f"{message}; gave up after waiting {waited:.0f}s")
            return True
        if (conditions.find(self.status, names.QUEUED_CONDITION) or {}).get("message") != message:
            self.event("FencingQueued", message)
        self.condition(names.QUEUED_CONDITION, "True", "AnotherFenceActive", message)
        self.resync(self.settings.fencing_resync_seconds if isinstance(ahead, list) else backoff(self.settings, 1))
        return True

    def power_off(self) -> None:
        if self.queued() or not self.locate():
            return
        state = self.observe_instance()
        if state in power.OFF_STATES:
            self.provider["poweredOffTime"] = self.stamp()
            self.condition(names.FENCING_SUCCEEDED, "True", "PoweredOff",
                           f"instance {self.provider['instanceID']} is {state}")
            self.phase = names.RECOVERING
            self.event("PoweredOff", f"Instance {self.provider['instanceID']} is {state}: node "
                                     f"{self.spec.node_name} can no longer write")
            return
        self.attempt("stop")

    def still_fenced(self) -> bool:
        """Re-confirmed right before a destructive recovery step: same node, instance still powered off."""
        if not self.locate():
            return False
        state = self.observe_instance()
        if state in power.OFF_STATES:
            return True
        if state is None:  # unreadable: no step now; the recovery timeout bounds the wait
            self.recovery["lastError"] = f"power state of {self.provider.get('instanceID')} not confirmed: " \
                                         f"{self.provider.get('lastDescribeError', 'not read')}"
            self.resync(backoff(self.settings, 1))
            return False
        self.fail("PowerRestored", f"instance {self.provider.get('instanceID')} is {state} again: the node may "
                                   "write, so its pods and volumes are not taken from it")
        return False

    def recover(self) -> None:
        rec = self.recovery
        rec["strategy"] = self.spec.strategy
        rec.setdefault("startTime", self.stamp())
        waited = timefmt.seconds_since(rec.get("startTime"), self.now) or 0
        if waited >= self.settings.fencing_recovery_timeout_seconds:
            rec["timedOut"] = True
            waiting = fr.waiting_pods(self.observed.get("nodePods") or [], self.spec.strategy)
            message = (f"gave up waiting after {waited:.0f}s: {len(waiting)} pod(s) and "
                       f"{len(self.observed.get('volumeAttachments') or [])} VolumeAttachment(s) still on the node")
            self.event("RecoveryTimedOut", message, warning=True)
            return self.recovered("TimedOut", message)
        if self.spec.strategy == names.OUT_OF_SERVICE and rec.get("outOfServiceTaint") != names.TAINT_APPLIED:
            if not self.still_fenced():
                return
            uid = self.provider.get("nodeUID")  # the taint goes on this Node only, never on a namesake
            self.actions.append(Action(
                "kube.taint", self.spec.node_name,
                {"key": names.OUT_OF_SERVICE_TAINT, "value": names.OUT_OF_SERVICE_VALUE,
                 "effect": names.OUT_OF_SERVICE_EFFECT, **({"uid": uid} if uid else {})},
                record=(Change(("status", "recovery", "outOfServiceTaint"), names.TAINT_APPLIED),),
                requires=self.fenced_node(),
                reports=events.normal(
                    events.OUT_OF_SERVICE_TAINT_APPLIED,
                    f"Tainted node {self.spec.node_name} {names.OUT_OF_SERVICE_TAINT}={names.OUT_OF_SERVICE_VALUE}:"
                    f"{names.OUT_OF_SERVICE_EFFECT}: kube-controller-manager recovers its pods and volumes")))
            return self.resync(self.settings.fencing_recovery_poll_seconds)
        error = self.observed.get("podsError") or self.observed.get("volumeAttachmentsError")
        if error or "nodePods" not in self.observed or "volumeAttachments" not in self.observed:
            rec["lastError"] = error or "the node's pods and VolumeAttachments were not observed"
            return self.resync(backoff(self.settings, 1))
        node_pods = self.observed["nodePods"]
        attachments = self.observed["volumeAttachments"]
        if self.spec.strategy == names.RESOURCE_DELETION and (node_pods or any(not v["deleting"] for v in attachments)):
            if not self.still_fenced():
                return
            self.delete_resources(node_pods, attachments)
            return self.resync(self.settings.fencing_recovery_poll_seconds)
        waiting = fr.waiting_pods(node_pods, self.spec.strategy)
        rec["remainingPods"] = len(waiting)
        rec["remainingVolumeAttachments"] = len(attachments)
        if not waiting and not attachments:
            return self.recovered("Recovered", "no pod or VolumeAttachment of the node is left")
        doomed = fr.removed_with_the_taint(waiting) if self.spec.strategy == names.OUT_OF_SERVICE else []
        if doomed:
            # What kube-controller-manager would do, without waiting up to 20 s for pod GC's
            # next pass: the power-off and the node are confirmed again right before each delete.
            if not self.still_fenced():
                return
            self.delete_pods(doomed, "the out-of-service taint removes them; deleted without waiting for pod GC")
        self.resync(self.settings.fencing_recovery_poll_seconds)

    def delete_pods(self, node_pods: list[dict], why: str = "") -> None:
        """Force-delete each pod, only the one with its uid, only while the node is still the fenced one
        and its instance still powered off."""
        rec = self.recovery
        rec["podsDeleted"] = bounds.status_counter(rec, "podsDeleted")
        requires = self.fenced_node()
        for pod in sorted(node_pods, key=lambda p: (p["namespace"], p["name"])):
            self.actions.append(Action(
                "kube.force-delete-pod", f"{pod['namespace']}/{pod['name']}",
                {"uid": pod.get("uid"), "node": self.spec.node_name},
                record=(Change(("status", "recovery", "podsDeleted"), add=1),), requires=requires,
                reports=events.normal(events.RESOURCES_DELETED,
                                      f"Force-deleted from powered-off node {self.spec.node_name} "
                                      f"(FencingRequest {self.request.meta.get('namespace')}/{self.request.name})"
                                      + (f": {why}" if why else ""),
                                      about=events.pod_ref(pod["namespace"], pod["name"], pod.get("uid")))))

    def delete_resources(self, node_pods: list[dict], attachments: list[dict]) -> None:
        rec = self.recovery
        self.delete_pods(node_pods)
        rec["volumeAttachmentsDeleted"] = bounds.status_counter(rec, "volumeAttachmentsDeleted")
        requires = self.fenced_node()
        for va in (v for v in attachments if not v["deleting"]):
            self.actions.append(Action(
                "kube.delete-volume-attachment", va["name"], {"node": self.spec.node_name},
                record=(Change(("status", "recovery", "volumeAttachmentsDeleted"), add=1),), requires=requires,
                reports=events.normal(events.RESOURCES_DELETED, f"Deleted VolumeAttachment {va['name']} of "
                                                                f"powered-off node {self.spec.node_name}")))

    def recovered(self, reason: str, message: str) -> None:
        self.recovery["completionTime"] = self.stamp()
        self.condition(names.RECOVERED, "True", reason, message)
        if self.spec.action == names.ACTION_REBOOT:
            self.phase = names.POWERING_ON
        else:
            self.succeed()

    def power_on(self) -> None:
        if not self.locate():
            return
        state = self.observe_instance() if self.observed.get("instance") else None
        if state == "running" and bounds.status_counter(self.provider, "startAttempts", fr.MAX_RETRIES) > 0:
            self.provider["poweredOnTime"] = self.stamp()
            self.event("PoweredOn", f"Instance {self.provider['instanceID']} is running again")
            return self.succeed()
        self.attempt("start")

    def aftercare(self) -> None:
        """Take the out-of-service taint off once the node is back and nothing is left to recover."""
        rec = _recorded(self.status, "recovery")
        if rec.get("outOfServiceTaint") != names.TAINT_APPLIED or not rec.get("completionTime"):
            return
        if self.node is None:
            if _node_gone(self.observed):
                rec["outOfServiceTaint"] = names.TAINT_REMOVED  # the API server has no such node: no taint
            else:
                self.resync(backoff(self.settings, 1))  # missing from this request only: look again
            return
        if not _in_aftercare(self.status, self.node):
            rec.pop("nodeReadyAgainTime", None)
            return self.resync(self.settings.fencing_resync_seconds)
        # The wait is ours to time: a Ready transition time that does not parse must not make it endless.
        rec.setdefault("nodeReadyAgainTime", self.stamp())
        back_for = max(_ready_for(self.node, self.now),
                       timefmt.seconds_since(rec["nodeReadyAgainTime"], self.now) or 0.0)
        seen = "nodePods" in self.observed and "volumeAttachments" in self.observed
        terminating = fr.terminating_pods(self.observed["nodePods"]) if seen else []
        attachments = self.observed["volumeAttachments"] if seen else []
        if back_for < self.settings.fencing_release_timeout_seconds:
            if not seen:  # not knowing what is left is not "nothing left"; the release timeout still fires
                return self.resync(backoff(self.settings, 1))
            if terminating or attachments:
                return self.resync(self.settings.fencing_recovery_poll_seconds)
        holders = self.observed.get("otherHolders")
        if holders:
            # An unfinished request for the node still counts on the taint: ours lets go, it takes it off.
            rec["outOfServiceTaint"] = names.TAINT_REMOVED
            self.event("OutOfServiceTaintKept", f"Node {self.spec.node_name} is Ready again; the out-of-service "
                                                f"taint stays for {', '.join(holders)}")
            return
        if holders is None and back_for < self.settings.fencing_release_timeout_seconds:
            # Not knowing whether another request holds it is not "no one"; the release timeout still fires.
            self.recovery["lastError"] = "cannot list FencingRequests: " \
                                         f"{self.observed.get('holdersError') or 'not looked up'}"
            return self.resync(backoff(self.settings, 1))
        if not seen:
            said = events.warning(events.OUT_OF_SERVICE_TAINT_REMOVED,
                                  f"Node {self.spec.node_name} has been Ready again for {back_for:.0f}s: "
                                  "out-of-service taint removed; its pods and VolumeAttachments could not be listed")
        elif terminating or attachments:
            # A Ready node must not stay out of service forever for a pod stuck on a finalizer.
            said = events.warning(events.OUT_OF_SERVICE_TAINT_REMOVED,
                                  f"Node {self.spec.node_name} has been Ready again for {back_for:.0f}s: out-of-service "
                                  f"taint removed with {len(terminating)} pod(s) still terminating and "
                                  f"{len(attachments)} VolumeAttachment(s) left")
        else:
            said = events.normal(events.OUT_OF_SERVICE_TAINT_REMOVED,
                                 f"Node {self.spec.node_name} is Ready again with nothing left to recover: "
                                 "out-of-service taint removed")
        self.untaint(said)

    def untaint(self, said: events.Event, *extra: Change) -> None:
        """Take the out-of-service taint off; recorded (and said) only once it is off."""
        self.actions.append(Action(
            "kube.untaint", self.spec.node_name, {"key": names.OUT_OF_SERVICE_TAINT},
            record=(Change(("status", "recovery", "outOfServiceTaint"), names.TAINT_REMOVED), *extra),
            reports=said))

    def plan(self, finalized: bool | None = None) -> Plan:
        resync = min(self.resyncs) if self.resyncs else None
        if self.status.get("phase") in names.FINISHED_PHASES:
            self.status = _without_unverified(self.status)
        return Plan(composite_response(status=self.status, resync_after=resync, finalized=finalized),
                    self.actions, self.events)


def _ready_for(node: dict, now: dt.datetime) -> float:
    ready = conditions.find(fields.mapping(node, "status", where="related.Node"), "Ready") or {}
    return timefmt.seconds_since(ready.get("lastTransitionTime"), now) or 0.0


def decide(request: HookRequest, settings: Settings, now: dt.datetime, observed: dict) -> Plan:
    try:
        spec = fr.parse_spec(request.parent)
    except RequestError as exc:
        return _invalid_spec(request, now, exc)
    step = _Step(request, spec, settings, now, observed)
    step.recovery.pop("lastError", None) if "recovery" in step.status else None
    if request.finalizing:
        return _finalize(step)
    step.start()
    if step.phase in (names.PENDING, names.POWERING_OFF):
        step.power_off()
    if step.phase == names.RECOVERING:
        step.recover()
    if step.phase == names.POWERING_ON:
        step.power_on()
    step.aftercare()
    return step.plan()


def _invalid_spec(request: HookRequest, now: dt.datetime, problem: RequestError) -> Plan:
    """A spec that cannot be read is reported on the request itself, once, and nothing is done."""
    status = _own_status(request.parent)
    generation = request.meta.get("generation")
    status["observedGeneration"] = generation if isinstance(generation, int) and generation >= 0 else 0
    if request.finalizing:
        return Plan(composite_response(status=status, finalized=True))
    said = []
    if status.get("phase") not in names.FINISHED_PHASES:
        stamp = timefmt.fmt(now)
        status.update(phase=names.FAILED, errorReason="InvalidSpec", errorMessage=str(problem), completionTime=stamp)
        status, _ = conditions.set(status, names.FAILED_CONDITION, "True", "InvalidSpec", str(problem), stamp)
        said.append(events.warning(events.FENCING_FAILED, f"InvalidSpec: {problem}"))
    return Plan(composite_response(status=status), events=said)


def _finalize(step: _Step) -> Plan:
    if step.node is None and not _node_gone(step.observed) and _may_hold(step.status, step.spec):
        # Missing from this request and not readable: its taint may still be on; only a 404 proves it gone.
        step.recovery["lastError"] = step.observed.get("nodeError") or \
            f"Node {step.spec.node_name} was not in the request and could not be looked up"
        step.resync(backoff(step.settings, 1))
        return step.plan(finalized=False)
    if not _ours_to_remove(step.status, step.spec, step.node):
        return step.plan(finalized=True)
    if step.observed.get("holdersError"):
        # Another request may still count on the taint: not knowing is not "no one".
        step.recovery["lastError"] = f"cannot list FencingRequests: {step.observed['holdersError']}"
        step.resync(backoff(step.settings, 1))
        return step.plan(finalized=False)
    holders = step.observed.get("otherHolders") or []
    if holders:
        step.event("OutOfServiceTaintKept", f"Deleted half-way; the out-of-service taint stays for "
                                            f"{', '.join(holders)}")
        return step.plan(finalized=True)
    # Finalized only once the taint is off: a failed untaint keeps the request (and its finalizer).
    step.untaint(events.normal(events.OUT_OF_SERVICE_TAINT_REMOVED, f"FencingRequest deleted: out-of-service taint "
                                                                    f"removed from node {step.spec.node_name}"),
                 Change(("finalized",), True))
    return step.plan(finalized=False)

# --------------------------------------------------------------------------- observe


def gather(request: HookRequest, ctx: runtime.Context, now: dt.datetime) -> dict:
    """Only what this call's phase looks at; failures are recorded, never raised."""
    try:
        spec = fr.parse_spec(request.parent)
    except RequestError:
        return {}
    status = _own_status(request.parent)
    observed: dict = {}
    node = _node(request, spec)
    if node is None:
        _look_up_node(ctx, spec.node_name, observed)
        node = observed.get("node")
    if request.finalizing:
        if _ours_to_remove(status, spec, node):
            try:
                observed["otherHolders"] = _other_holders(request, spec, ctx)
            except Exception as exc:  # noqa: BLE001 - unknown is not "no other holder"
                observed["holdersError"] = kube_error(exc)
        return observed
    phase = status.get("phase") or names.PENDING
    provider, rec = _recorded(status, "providerStatus"), _recorded(status, "recovery")
    if phase == names.PENDING and not bounds.status_counter(provider, "stopAttempts"):
        try:
            observed["olderRequests"] = fr.older_active(request.parent, kube_fencing.fencing_requests(ctx.kube),
                                                        spec.node_name)
        except Exception as exc:  # noqa: BLE001 - unknown: the request waits, bounded by the queue timeout
            observed["requestsError"] = kube_error(exc)
    if phase in (names.PENDING, names.POWERING_OFF, names.RECOVERING, names.POWERING_ON) and node is not None:
        _observe_instance(ctx, node, provider, observed)
    powered_off_now = phase in (names.PENDING, names.POWERING_OFF) and \
        (observed.get("instance") or {}).get("state") in power.OFF_STATES
    recovering = phase == names.RECOVERING or powered_off_now
    taint_first = spec.strategy == names.OUT_OF_SERVICE and rec.get("outOfServiceTaint") != names.TAINT_APPLIED
    if (recovering and not taint_first) or _in_aftercare(status, node):
        observed.update(pods.whats_on(ctx.kube, spec.node_name, fr.pod_summary, pods_key="nodePods"))
    if _in_aftercare(status, node):
        try:
            observed["otherHolders"] = _other_holders(request, spec, ctx, unfinished_only=True)
        except Exception as exc:  # noqa: BLE001 - unknown is not "no other holder"
            observed["holdersError"] = kube_error(exc)
    return observed


def _look_up_node(ctx: runtime.Context, name: str, observed: dict) -> None:
    """The request lacked the Node: ask the API server, whose 404 alone proves it gone."""
    try:
        node = fresh.read(ctx.kube, "Node", name)
    except fresh.Unverified as exc:
        observed["nodeError"] = str(exc)
        return
    if node is None:
        observed["nodeGone"] = True
    else:
        observed["node"] = node


def _observe_instance(ctx: runtime.Context, node: dict, provider: dict, observed: dict) -> None:
    """The instance's power state now: the one this request fences once known, else the node's."""
    try:
        recorded = provider.get("instanceID")
        if isinstance(recorded, str) and recorded:
            instance, region = recorded, provider.get("region") or None
        else:
            pid = providerid.parse((node.get("spec") or {}).get("providerID"))
            instance, region = pid.instance_id, pid.region
        observed["instance"] = {"state": power.state(ctx.aws.client("ec2", region), instance)}
    except providerid.ProviderIDError:
        pass  # decide fails the request with the reason
    except Exception as exc:  # noqa: BLE001 - an unreadable state is no confirmation; keep polling
        observed["instance"] = {"error": aws_error(exc)}


def _other_holders(request: HookRequest, spec: fr.Spec, ctx: runtime.Context,
                   unfinished_only: bool = False) -> list[str]:
    """Other live requests for the same node, in any namespace, that still count on the out-of-service taint."""
    return fr.taint_holders(request.parent, kube_fencing.fencing_requests(ctx.kube), spec.node_name, unfinished_only)


# --------------------------------------------------------------------------- trust


def verify(request: HookRequest, ctx: runtime.Context) -> HookRequest:
    """The request as the API server has it now: the FencingRequest and its Node, read fresh.

    Anyone reaching the hook port can send a body; only a FencingRequest that
    exists with the body's uid may act (that it is being deleted when
    finalizing is the pipeline's check), and only on the Node the API server
    has under that name. The decision is then made again on these fresh objects.
    """
    if request.parent.get("kind") != names.REQUEST_KIND:
        raise fresh.Unverified(f"fencing-request acts only for a {names.REQUEST_KIND}")
    parent = fresh.same_parent(request, ctx.kube).parent
    if parent["metadata"].get("deletionTimestamp") and not request.finalizing:
        # Deleted since this sync was sent: nothing new starts; the finalize hook takes over.
        raise fresh.Unverified(f"FencingRequest {request.meta.get('namespace')}/{request.name} is being deleted")
    parent = dict(parent, status=_without_unverified(fields.mapping(parent, "status")))
    try:
        spec = fr.parse_spec(parent)
    except RequestError:  # decided (and reported) as the invalid spec it is: nothing is read or done
        return dataclasses.replace(request, parent=parent, related=ObjectGroups())
    node = fresh.read(ctx.kube, "Node", spec.node_name)
    try:
        related = {"Node.v1": {spec.node_name: parse_object(node, "related.Node")}} if node else {}
    except RequestError as exc:
        raise fresh.Unverified(f"the Node as the API server has it: {exc}") from None
    # The API server answered: the record of earlier unverified calls went above.
    return dataclasses.replace(request, parent=parent, related=ObjectGroups(related))


# Outcomes that rest on what the Node says: recorded only from a Node read fresh.
_NODE_VERDICTS = ("NodeReady", "NodeReplaced", "InvalidProviderID")


def needs_verification(request: HookRequest, plan: Plan) -> bool:
    """An action on a node or an instance, or a record drawn from the Node (a verdict, letting go of the taint)."""
    if plan.actions:
        return True
    status, before = plan.response.get("status") or {}, _own_status(request.parent)
    if _recorded(before, "recovery").get("outOfServiceTaint") == names.TAINT_APPLIED and \
            _recorded(status, "recovery").get("outOfServiceTaint") == names.TAINT_REMOVED:
        return True  # letting go of the taint rests on the Node too
    return (status.get("phase") == names.FAILED and before.get("phase") != names.FAILED
            and status.get("errorReason") in _NODE_VERDICTS)


def unverified(request: HookRequest, plan: Plan, ctx: runtime.Context, reason: str) -> Plan:
    """Nothing irreversible without the API server's word: nothing is spent or recorded but why; ask again later."""
    log.warning("fencing-request did not act", extra={"request": f"{request.meta.get('namespace')}/{request.name}",
                                                      "reason": reason})
    try:
        fr.parse_spec(request.parent)
    except RequestError as exc:  # nothing would be done either way: say why it will not run
        return _invalid_spec(request, ctx.now(), exc)
    status = _own_status(request.parent)
    calls = bounds.status_counter(status, "unverifiedCalls") + 1
    status["unverifiedCalls"] = calls
    status, _ = conditions.set(
        status, names.VERIFIED_CONDITION, "False", "Unverified",
        f"nothing is powered off, tainted or deleted until the API server confirms this request and its Node: "
        f"{reason}"[:1000], timefmt.fmt(ctx.now()))
    return Plan(composite_response(status=status, resync_after=backoff(ctx.settings, calls),
                                   finalized=False if request.finalizing else None))


def _without_unverified(status: dict) -> dict:
    if conditions.find(status, names.VERIFIED_CONDITION) or "unverifiedCalls" in status:
        status, _ = conditions.remove(status, names.VERIFIED_CONDITION)
        status.pop("unverifiedCalls", None)
    return status


# --------------------------------------------------------------------------- act


def settle(request: HookRequest, plan: Plan, outcomes: list[Outcome], settings: Settings, now: dt.datetime) -> Plan:
    """What the failures mean: the error where the next call looks for it, and a sooner retry.

    Nothing is undone here: a step's own record is applied only when it succeeds.
    """
    response = copy.deepcopy(plan.response)
    status = response["status"]
    resync = backoff(settings, 1)
    recovery_errors = []
    for outcome in (o for o in outcomes if not o.ok):
        kind = outcome.action.kind
        if kind in ("aws.stop", "aws.start"):
            title = _OP[kind.split(".")[1]][0]
            status.setdefault("providerStatus", {})[f"last{title}Error"] = outcome.error
            spec = fr.parse_spec(request.parent)
            resync = min(resync, max(1.0, spec.retry_interval))
        else:
            recovery_errors.append(f"{kind} {outcome.action.target}: {outcome.error}")
    if recovery_errors:
        status.setdefault("recovery", {})["lastError"] = "; ".join(recovery_errors)[:2000]
    response["resyncAfterSeconds"] = resync
    return dataclasses.replace(plan, response=response)


# --------------------------------------------------------------------------- hooks


def sync(request: HookRequest, ctx: runtime.Context | None = None) -> dict:
    return pipeline.run(sys.modules[__name__], request, ctx)


def finalize(request: HookRequest, ctx: runtime.Context | None = None) -> dict:
    return pipeline.run(sys.modules[__name__], request, ctx)
