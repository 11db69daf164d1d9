"""Unhealthy under a policy: triaged, then required, then complete; pods chosen for fast failover go.

What each of the three steps writes is listed in hooks/fencing/node.py.
"""
from __future__ import annotations

import datetime as dt
import logging

from hooks import conditions, events, fencing_names, fields, timefmt
from hooks.config import Settings
from hooks.contract import HookRequest, decorator_response
from hooks.fencing import failover
from hooks.fencing.node_phases.attachments import desired_request
from hooks.fencing.node_phases.marks import TAINT_SETTLE_SECONDS, clear_error, taint_actions
from hooks.fencing.node_phases.situation import Situation, needs_pods
from hooks.plan import Action, Plan, SameObject, backoff

log = logging.getLogger(__name__)


def fence(request: HookRequest, sit: Situation, settings: Settings, now: dt.datetime, observed: dict) -> Plan:
    """The conditions of where the node stands, then their taints; the FencingRequest once required; the
    pods that may fail over now (``observed``: the node's pods and their claims, listed when needs_pods)."""
    node_status = fields.mapping(request.parent, "status")
    fr_name = fencing_names.request_name(request.name) if sit.fencing_request is None else sit.fencing_request["metadata"]["name"]
    desired = {fencing_names.TRIAGED: ("True", "UnhealthyCondition", sit.health.describe())}
    if sit.required:
        desired[fencing_names.REQUIRED] = ("True", "FencingRequested",
                                   f"FencingRequest {settings.namespace}/{fr_name} powers the node off")
        if sit.complete:
            desired[fencing_names.COMPLETE] = ("True", "PoweredOff", "the FencingRequest confirmed the power-off")
        elif sit.failed_message:
            desired[fencing_names.COMPLETE] = ("False", "FencingFailed", sit.failed_message)
        else:
            desired[fencing_names.COMPLETE] = ("False", "FencingInProgress", "waiting for the power-off to be confirmed")
    else:
        desired[fencing_names.REQUIRED] = ("False", sit.hold_reason, sit.hold_message)
        desired[fencing_names.COMPLETE] = ("False", "NotRequired", "fencing has not been required")
    status = status_changes(node_status, desired, now)

    actions: list[Action] = []
    said = []
    if status is not None:
        said.extend(transition_events(node_status, desired))
    else:
        # Conditions are settled: lay the taints that go with them.
        want = {fencing_names.TRIAGED_TAINT: "PreferNoSchedule"}
        if sit.required:
            want[fencing_names.REQUIRED_TAINT] = "NoSchedule"
        actions.extend(taint_actions(request, want))

    annotations = clear_error(request)
    resync = sit.health.seconds_until_due(now) if not sit.required and sit.hold_reason == "WaitingForDuration" else None
    if sit.required or sit.hold_reason in ("StormGuard", "PolicyCountPending"):
        resync = settings.fencing_resync_seconds
    if sit.required and sit.failover_hold == "WaitingForDuration":
        resync = min(resync, sit.health.seconds_until_due(now))  # pods may fail over then
    if needs_pods(sit):
        failover_actions, failover_error = failover_deletes(request, sit, observed)
        actions.extend(failover_actions)
        if failover_error:
            if request.annotations.get(fencing_names.ERROR_ANNOTATION) != failover_error:
                annotations = {fencing_names.ERROR_ANNOTATION: failover_error}
                said.append(events.warning(events.FAILOVER_FAILED, failover_error))
            else:
                annotations = {}  # the same error again: no write, no new Event
            resync = backoff(settings, 1)
    if status is not None:
        resync = min(resync or TAINT_SETTLE_SECONDS, TAINT_SETTLE_SECONDS)
    # This spell's request is made once the one before it has gone (it has the same name).
    attachments = [desired_request(request, sit, settings)] if sit.required and not sit.replacing else []
    return Plan(decorator_response(annotations=annotations, status=status, attachments=attachments,
                                   resync_after=max(resync, 1.0) if resync is not None else None), actions, said,
                verify=needs_pods(sit) and not request.verified)


def status_changes(node_status: dict, desired: dict[str, tuple[str, str, str]], now: dt.datetime) -> dict | None:
    """The complete status with our conditions set, or None when nothing would change (no churn)."""
    status, changed = node_status, False
    for ctype, (value, reason, message) in desired.items():
        status, one = conditions.set(status, ctype, value, reason, message, timefmt.fmt(now), heartbeat=True)
        changed = changed or one
    return status if changed else None


def transition_events(before: dict, desired: dict) -> list[events.Event]:
    """The Events of the conditions ``desired`` changes from ``before`` (none for one that stays)."""
    events_out = []
    for ctype, (status, reason, message) in desired.items():
        previous = conditions.find(before, ctype) or {}
        if previous.get("status") == status and previous.get("reason") == reason:
            continue
        if ctype == fencing_names.TRIAGED and status == "True":
            events_out.append(events.normal(events.FENCING_TRIAGED, f"Node is unhealthy: {message}"))
        elif ctype == fencing_names.REQUIRED and status == "True":
            events_out.append(events.normal(events.FENCING_REQUIRED, message))
        elif ctype == fencing_names.REQUIRED and reason == "StormGuard":
            events_out.append(events.warning(events.FENCING_HELD_BACK, message))
        elif ctype == fencing_names.REQUIRED and reason == "ControlPlaneExcluded":
            events_out.append(events.normal(events.FENCING_SKIPPED, message))
        elif ctype == fencing_names.COMPLETE and status == "True":
            events_out.append(events.normal(events.NODE_FENCED, "Power-off confirmed; the node's workloads may recover"))
        elif ctype == fencing_names.COMPLETE and reason == "FencingFailed":
            events_out.append(events.warning(events.FENCING_FAILED, message))
    return events_out


def failover_deletes(request: HookRequest, sit: Situation, observed: dict) -> tuple[list[Action], str]:
    """The force deletes of the pods failing over now, and the error that keeps them from being chosen
    ("" when none does)."""
    if observed.get("podsError"):
        return [], f"listing the node's pods for failover failed: {observed['podsError']}"
    go, held = failover.select(observed.get("pods") or [], sit.policy, observed.get("claims") or {}, sit.fenced)
    actions = []
    for choice in go:
        meta = choice.pod["metadata"]
        target = failover.key(choice.pod)
        node_uid = request.meta.get("uid")
        actions.append(Action(
            "kube.force-delete-pod", target, {"uid": meta.get("uid"), "node": request.name},
            # The node the decision was about, still the same object when the pod goes.
            requires=(SameObject("Node", request.name, node_uid),) if node_uid else (),
            reports=events.normal(events.FAILED_OVER,
                                  f"Force-deleted from unhealthy node {request.name} ({sit.health.describe()}) "
                                  f"without waiting for fencing: {choice.why}",
                                  about=events.pod_ref(meta.get("namespace") or "", meta["name"], meta.get("uid")))))
    if held:
        log.info("failover held until the node is fenced",
                 extra={"node": request.name, "pods": [failover.key(c.pod) for c in held]})
    return actions, ""
