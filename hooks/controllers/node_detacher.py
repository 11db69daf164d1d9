"""node-detacher: a leaving Node leaves every load balancer before its pods stop.

DecoratorController on Nodes (sync + finalize); a managed ingress DaemonSet's
terminating pod asks for a detach through node-detacher-pods. Each call walks
one step of hooks.detacher.assess's phases, one module each in hooks/detacher:

  skip, idle  a control-plane node is not ours to touch; a serving node
              has nothing recorded and no Attachment
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
already happened and the next call resumes where this one stopped. This
module holds the pipeline interface: the dispatch to the phases and what
failed steps mean; the look-ups (AWS, the pods) are hooks/kube/node_detacher_reads.py.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import sys

from hooks import bounds, detacher_names, events, pipeline, runtime, timefmt
from hooks.config import Settings
from hooks.contract import HookRequest, decorator_response
from hooks.detacher import assess, deregister, drain, exclude, idle, pod_trigger, reattach, rejoin, shutdown, targets
from hooks.detacher.step import deletion_deadline_passed
from hooks.kube import fresh, node_detacher_reads
from hooks.plan import Outcome, Plan, backoff, failure_text, unverified_text

NAME = "node-detacher"
FAILURE_REASON = events.DETACH_FAILED
log = logging.getLogger(__name__)
gather = node_detacher_reads.gather


# --------------------------------------------------------------------------- decide


_PHASES = {
    assess.SKIP: idle.skip,
    assess.IDLE: idle.idle,
    assess.EXCLUDE: exclude.exclude,
    assess.DEREGISTER: deregister.deregister,
    assess.DRAIN: drain.drain,
    assess.SHUTDOWN: shutdown.shutdown,
    assess.REATTACH: reattach.reattach,
    assess.REJOIN: rejoin.rejoin,
}


def decide(request: HookRequest, settings: Settings, now: dt.datetime, observed: dict) -> Plan:
    ended = observed.get("podRequestEnded")
    if ended:
        request = pod_trigger.without_node_request(request)
    sit = assess.assess(request, settings, now)
    if sit.phase == assess.REATTACH:
        waiting = reattach.waiting_for_taint(request, sit, settings, observed)
        if waiting is not None:
            return waiting
    plan = _PHASES[sit.phase](request, sit, settings, now, observed)
    if ended:
        return pod_trigger.withdraw_node_request(plan, ended)
    response = pod_trigger.keep_node_request_clock(request, plan.response, settings, now)
    return dataclasses.replace(plan, response=response)


# --------------------------------------------------------------------------- act


def settle(request: HookRequest, plan: Plan, outcomes: list[Outcome], settings: Settings,
           now: dt.datetime) -> Plan:
    """What failed steps mean: the error on the node, a backoff, and for a re-attach, the detach state kept.

    A failed deregistration needs nothing here: it is recorded as deregistered
    only when it succeeds. The plan's Events are not sent: DetachFailed says it.
    """
    failed = [o for o in outcomes if not o.ok]
    response = plan.response
    if deletion_deadline_passed(request, settings, now):
        # A deleting node is never held past its deadline.
        return Plan(dict(response, finalized=True), persist=plan.persist)
    annotations = dict(response.get("annotations") or {})
    for o in failed:
        if o.action.kind == "kube.label-node":
            # Not written by the hook: Metacontroller writes them, and the next call deregisters (nothing was
            # handed over, so nothing is said to be under way).
            response = dict(response, labels={**(response.get("labels") or {}), **o.action.params["labels"]})
            annotations.update({k: v for k, v in o.action.params["annotations"].items()
                                if k != detacher_names.DEREGISTERING_SINCE})
    if any(o.action.kind.endswith(".register") for o in failed):
        # Re-attach incomplete: keep detach state, remember what still needs registering.
        failed_memberships = {tuple(m) for o in failed for m in o.action.params.get("memberships", [])}
        response = dict(response, labels={}, status=None)
        annotations = {detacher_names.DEREGISTERED: targets.encode(failed_memberships),
                       detacher_names.REATTACH_FAILING_SINCE: request.annotations.get(detacher_names.REATTACH_FAILING_SINCE)
                       or timefmt.fmt(now),
                       **{k: v for k, v in annotations.items() if k in (detacher_names.FOR_POD, detacher_names.FOR_POD_SINCE)}}
        if "finalized" in response:
            response["finalized"] = False
    attempt = bounds.counter(request.annotations, detacher_names.ATTEMPTS) + 1
    annotations[detacher_names.ERROR] = failure_text(outcomes)
    annotations[detacher_names.ATTEMPTS] = str(attempt)
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
    annotations = {detacher_names.ERROR: message} if request.annotations.get(detacher_names.ERROR) != message else {}
    return Plan(decorator_response(annotations=annotations, attachments=attachments,
                                   resync_after=backoff(ctx.settings, 1),
                                   finalized=False if request.finalizing else None))


def sync(request: HookRequest, ctx: runtime.Context | None = None) -> dict:
    return pipeline.run(sys.modules[__name__], request, ctx)


def finalize(request: HookRequest, ctx: runtime.Context | None = None) -> dict:
    return pipeline.run(sys.modules[__name__], request, ctx)
