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

from hooks import detacher_names, events, pipeline, runtime
from hooks.config import Settings
from hooks.contract import HookRequest, decorator_response
from hooks.detacher import assess, deregister, drain, exclude, idle, outcomes, pod_trigger, reattach, rejoin, shutdown
from hooks.detacher.step import deletion_deadline_passed
from hooks.kube import fresh, node_detacher_reads
from hooks.plan import Plan, backoff, unverified_text

NAME = "node-detacher"
FAILURE_REASON = events.DETACH_FAILED
log = logging.getLogger(__name__)
gather = node_detacher_reads.gather
settle = outcomes.settle


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
