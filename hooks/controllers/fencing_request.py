"""fencing-request: power a node off through AWS, confirm it, recover its workloads.

CompositeController on FencingRequest (no children; the Node is related by
name through customize). The status is the whole record, Job-like as the KEP
writes it, and each call moves one step through the phases of
hooks/fencing/request_phases, one module each:

  (any phase)          authority: honoured only in the controller's own
                       namespace; anywhere else Failed, nothing done.
  Pending/PoweringOff  queue, locate, power: StopInstances(Force=True), then
                       DescribeInstances until the state is stopped or
                       terminated: only that sets FencingSucceeded. Only an
                       instance with this cluster's tag (ownership) behind a
                       node that is not control plane unless the request
                       opts in (authority).
  Recovering           recovery: the out-of-service taint and the force deletes
                       it stands for, or ResourceDeletion's; bounded by a timeout.
  PoweringOn           power: Reboot only, StartInstances until running.
  Succeeded            and, whatever the phase, aftercare: the out-of-service
                       taint comes off once the node is Ready again.
  (recovered, finished) replacement: the node's proven owner is asked to
                       replace it (spec.replacement); with Reboot only if the
                       node is not Ready again within rebootTimeout. A group's
                       instance enters Standby before a Reboot's stop (power).

The finalize hook (deletion) takes the out-of-service taint off when a
request is deleted half-way, unless another live request for the node still
holds it.

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

from hooks import bounds, conditions, events, fencing_names, pipeline, runtime, timefmt
from hooks.config import Settings
from hooks.contract import HookRequest, RequestError, composite_response
from hooks.fencing import request_rules
from hooks.fencing.request_phases import aftercare, authority, deletion, power, recovery, replacement
from hooks.fencing.request_phases.invalid import invalid_spec
from hooks.fencing.request_phases.state import Step, own_status, recorded
from hooks.kube import fencing_request_reads
from hooks.plan import Outcome, Plan, backoff

NAME = "fencing-request"
FAILURE_REASON = events.FENCING_ACTION_FAILED
log = logging.getLogger(__name__)
gather = fencing_request_reads.gather
verify = fencing_request_reads.verify


def customize(parent: dict, ctx: runtime.Context | None = None) -> dict:
    """The one Node the request names."""
    try:
        spec = request_rules.parse_spec(parent)
    except RequestError:
        return {"relatedResources": []}
    return {"relatedResources": [{"apiVersion": "v1", "resource": "nodes", "names": [spec.node_name]}]}


# --------------------------------------------------------------------------- decide


def decide(request: HookRequest, settings: Settings, now: dt.datetime, observed: dict) -> Plan:
    try:
        spec = request_rules.parse_spec(request.parent)
    except RequestError as exc:
        return invalid_spec(request, now, exc)
    step = Step(request, spec, settings, now, observed)
    step.recovery.pop("lastError", None) if "recovery" in step.status else None
    if request.finalizing:
        return deletion.finalize(step)
    if not authority.honoured_here(request.meta.get("namespace"), settings):
        authority.refuse_elsewhere(step)
        return step.plan()
    power.start(step)
    if step.phase in (fencing_names.PENDING, fencing_names.POWERING_OFF):
        power.power_off(step)
    if step.phase == fencing_names.RECOVERING:
        recovery.recover(step)
    if step.phase == fencing_names.POWERING_ON:
        power.power_on(step)
    replacement.replace(step)
    aftercare.aftercare(step)
    return step.plan()


# --------------------------------------------------------------------------- trust


# Outcomes that rest on what the Node says: recorded only from a Node read fresh.
_NODE_VERDICTS = ("NodeReady", "NodeReplaced", "InvalidProviderID")


def needs_verification(request: HookRequest, plan: Plan) -> bool:
    """An action on a node or an instance, a record drawn from the Node (a verdict, letting go of the taint),
    or a step that waits for what only a verified call reads."""
    if plan.actions or plan.verify:
        return True
    status, before = plan.response.get("status") or {}, own_status(request.parent)
    if recorded(before, "recovery").get("outOfServiceTaint") == fencing_names.TAINT_APPLIED and \
            recorded(status, "recovery").get("outOfServiceTaint") == fencing_names.TAINT_REMOVED:
        return True  # letting go of the taint rests on the Node too
    return (status.get("phase") == fencing_names.FAILED and before.get("phase") != fencing_names.FAILED
            and status.get("errorReason") in _NODE_VERDICTS)


def unverified(request: HookRequest, plan: Plan, ctx: runtime.Context, reason: str) -> Plan:
    """Nothing irreversible without the API server's word: nothing is spent or recorded but why; ask again later."""
    log.warning("fencing-request did not act", extra={"request": f"{request.meta.get('namespace')}/{request.name}",
                                                      "reason": reason})
    try:
        request_rules.parse_spec(request.parent)
    except RequestError as exc:  # nothing would be done either way: say why it will not run
        return invalid_spec(request, ctx.now(), exc)
    status = own_status(request.parent)
    calls = bounds.status_counter(status, "unverifiedCalls") + 1
    status["unverifiedCalls"] = calls
    status, _ = conditions.set(
        status, fencing_names.VERIFIED_CONDITION, "False", "Unverified",
        f"nothing is powered off, tainted or deleted until the API server confirms this request and its Node: "
        f"{reason}"[:1000], timefmt.fmt(ctx.now()))
    return Plan(composite_response(status=status, resync_after=backoff(ctx.settings, calls),
                                   finalized=False if request.finalizing else None))


# --------------------------------------------------------------------------- act


def settle(request: HookRequest, plan: Plan, outcomes: list[Outcome], settings: Settings, now: dt.datetime) -> Plan:
    """What the failures mean: the error where the next call looks for it, and a sooner retry.

    Nothing is undone here: a step's own record is applied only when it succeeds.
    """
    response = copy.deepcopy(plan.response)
    status = response["status"]
    resync = backoff(settings, 1)
    recovery_errors = []
    response_events = list(plan.events)
    for outcome in (o for o in outcomes if not o.ok):
        kind = outcome.action.kind
        if kind in ("aws.stop", "aws.start"):
            title = power.OPERATIONS[kind.split(".")[1]][0]
            status.setdefault("providerStatus", {})[f"last{title}Error"] = outcome.error
            spec = request_rules.parse_spec(request.parent)
            resync = min(resync, max(1.0, spec.retry_interval))
        elif kind in replacement.ACTION_KINDS:
            said = replacement.failed(status, outcome)
            if said is not None:
                response_events.append(said)
        else:
            recovery_errors.append(f"{kind} {outcome.action.target}: {outcome.error}")
    if recovery_errors:
        status.setdefault("recovery", {})["lastError"] = "; ".join(recovery_errors)[:2000]
    response["resyncAfterSeconds"] = resync
    return dataclasses.replace(plan, response=response, events=response_events)


# --------------------------------------------------------------------------- hooks


def sync(request: HookRequest, ctx: runtime.Context | None = None) -> dict:
    return pipeline.run(sys.modules[__name__], request, ctx)


def finalize(request: HookRequest, ctx: runtime.Context | None = None) -> dict:
    return pipeline.run(sys.modules[__name__], request, ctx)
