"""Aftercare: the out-of-service taint comes off once the node is back.

Whatever the phase, once recovery is done and the node is Ready *again*
(after the power-off) with no terminating pod and no VolumeAttachment left,
bounded by the release timeout, unless an unfinished request for the node in
any namespace still holds the taint. Also who may hold the taint, which the
finalize hook asks too.
"""
from __future__ import annotations

import datetime as dt

from hooks import conditions, events, fields, timefmt
from hooks.fencing import health, names, request_rules
from hooks.fencing.request_phases.state import Step, node_gone, recorded
from hooks.plan import Action, Change, backoff


def has_out_of_service_taint(node: dict | None) -> bool:
    return any(t.get("key") == names.OUT_OF_SERVICE_TAINT
               for t in fields.objects(node or {}, "spec", "taints", where="related.Node"))


def ours_to_remove(status: dict, spec: request_rules.Spec, node: dict | None) -> bool:
    """Whether this request put the out-of-service taint that the node carries.

    Also true when the taint went on but the status saying so was never
    written (the request was deleted in between): fenced, strategy taint,
    and not recorded as removed.
    """
    return has_out_of_service_taint(node) and may_hold(status, spec)


def may_hold(status: dict, spec: request_rules.Spec) -> bool:
    """Whether this request may have put the out-of-service taint on its node (see ours_to_remove)."""
    taint = recorded(status, "recovery").get("outOfServiceTaint")
    if taint == names.TAINT_APPLIED:
        return True
    fenced = (conditions.find(status, names.FENCING_SUCCEEDED) or {}).get("status") == "True"
    return fenced and spec.strategy == names.OUT_OF_SERVICE and taint != names.TAINT_REMOVED


def in_aftercare(status: dict, node: dict | None) -> bool:
    """Recovered, our taint on, and the node Ready *again*: it turned Ready after the power-off
    (a Ready=True from before the node was fenced is stale, not a return)."""
    rec = recorded(status, "recovery")
    if rec.get("outOfServiceTaint") != names.TAINT_APPLIED or not rec.get("completionTime") or node is None:
        return False
    node_status = fields.mapping(node, "status", where="related.Node")
    if not health.is_ready(node_status):
        return False
    ready_since = timefmt.parse((conditions.find(node_status, "Ready") or {}).get("lastTransitionTime"))
    powered_off = timefmt.parse(recorded(status, "providerStatus").get("poweredOffTime"))
    return ready_since is None or powered_off is None or ready_since >= powered_off


def _ready_for(node: dict, now: dt.datetime) -> float:
    ready = conditions.find(fields.mapping(node, "status", where="related.Node"), "Ready") or {}
    return timefmt.seconds_since(ready.get("lastTransitionTime"), now) or 0.0


def aftercare(step: Step) -> None:
    """Take the out-of-service taint off once the node is back and nothing is left to recover."""
    rec = recorded(step.status, "recovery")
    if rec.get("outOfServiceTaint") != names.TAINT_APPLIED or not rec.get("completionTime"):
        return
    if step.node is None:
        if node_gone(step.observed):
            rec["outOfServiceTaint"] = names.TAINT_REMOVED  # the API server has no such node: no taint
        else:
            step.resync(backoff(step.settings, 1))  # missing from this request only: look again
        return
    if not in_aftercare(step.status, step.node):
        rec.pop("nodeReadyAgainTime", None)
        return step.resync(step.settings.fencing_resync_seconds)
    # The wait is ours to time: a Ready transition time that does not parse must not make it endless.
    rec.setdefault("nodeReadyAgainTime", step.stamp())
    back_for = max(_ready_for(step.node, step.now),
                   timefmt.seconds_since(rec["nodeReadyAgainTime"], step.now) or 0.0)
    seen = "nodePods" in step.observed and "volumeAttachments" in step.observed
    terminating = request_rules.terminating_pods(step.observed["nodePods"]) if seen else []
    attachments = step.observed["volumeAttachments"] if seen else []
    if back_for < step.settings.fencing_release_timeout_seconds:
        if not seen:  # not knowing what is left is not "nothing left"; the release timeout still fires
            return step.resync(backoff(step.settings, 1))
        if terminating or attachments:
            return step.resync(step.settings.fencing_recovery_poll_seconds)
    holders = step.observed.get("otherHolders")
    if holders:
        # An unfinished request for the node still counts on the taint: ours lets go, it takes it off.
        rec["outOfServiceTaint"] = names.TAINT_REMOVED
        step.event("OutOfServiceTaintKept", f"Node {step.spec.node_name} is Ready again; the out-of-service "
                                            f"taint stays for {', '.join(holders)}")
        return
    if holders is None and back_for < step.settings.fencing_release_timeout_seconds:
        # Not knowing whether another request holds it is not "no one"; the release timeout still fires.
        step.recovery["lastError"] = "cannot list FencingRequests: " \
                                     f"{step.observed.get('holdersError') or 'not looked up'}"
        return step.resync(backoff(step.settings, 1))
    if not seen:
        said = events.warning(events.OUT_OF_SERVICE_TAINT_REMOVED,
                              f"Node {step.spec.node_name} has been Ready again for {back_for:.0f}s: "
                              "out-of-service taint removed; its pods and VolumeAttachments could not be listed")
    elif terminating or attachments:
        # A Ready node must not stay out of service forever for a pod stuck on a finalizer.
        said = events.warning(events.OUT_OF_SERVICE_TAINT_REMOVED,
                              f"Node {step.spec.node_name} has been Ready again for {back_for:.0f}s: out-of-service "
                              f"taint removed with {len(terminating)} pod(s) still terminating and "
                              f"{len(attachments)} VolumeAttachment(s) left")
    else:
        said = events.normal(events.OUT_OF_SERVICE_TAINT_REMOVED,
                             f"Node {step.spec.node_name} is Ready again with nothing left to recover: "
                             "out-of-service taint removed")
    untaint(step, said)


def untaint(step: Step, said: events.Event, *extra: Change) -> None:
    """Take the out-of-service taint off; recorded (and said) only once it is off."""
    step.actions.append(Action(
        "kube.untaint", step.spec.node_name, {"key": names.OUT_OF_SERVICE_TAINT},
        record=(Change(("status", "recovery", "outOfServiceTaint"), names.TAINT_REMOVED), *extra),
        reports=said))
