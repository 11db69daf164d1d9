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
module holds the pipeline interface: the look-ups (AWS, the pods), the
dispatch to the phases, and what failed steps mean.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import sys
import threading
import time

from hooks import bounds, events, objects, pipeline, runtime, timefmt
from hooks.aws import elb, lb_discovery
from hooks.config import Settings
from hooks.contract import HookRequest, decorator_response
from hooks.detacher import (assess, deregister, drain, exclude, idle, names, pod_trigger, reattach, rejoin, shutdown,
                            targets)
from hooks.detacher.step import deletion_deadline_passed
from hooks.kube import daemonsets, fresh, pods
from hooks.plan import Outcome, Plan, backoff, error_text, failure_text, unverified_text

NAME = "node-detacher"
FAILURE_REASON = events.DETACH_FAILED
log = logging.getLogger(__name__)


class _FirstSeen:
    """When this process first saw each node waiting for its unschedulable taint (bounds that wait). The
    process's own memory, so it lives here: decide is told how long (hooks.detacher.reattach.waiting_for_taint)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._seen: dict[str, float] = {}

    def seconds(self, key: str) -> float:
        now = time.monotonic()
        with self._lock:
            self._seen = {k: t for k, t in self._seen.items() if now - t < 120}
            return now - self._seen.setdefault(key, now)


_TAINT_PENDING = _FirstSeen()


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


# --------------------------------------------------------------------------- observe


def gather(request: HookRequest, ctx: runtime.Context, now: dt.datetime) -> dict:
    """The look-ups this call's phase needs; failures are recorded, never raised."""
    settings = ctx.settings
    observed: dict = {}
    ended = daemonsets.end_of_node_request(request, ctx, now)
    if ended:
        observed["podRequestEnded"] = ended
        request = pod_trigger.without_node_request(request)
    sit = assess.assess(request, settings, now)
    if sit.phase == assess.REATTACH and reattach.unschedulable_taint_pending(request.parent):
        observed["unschedulableTaintPendingSeconds"] = _TAINT_PENDING.seconds(
            f"{request.meta.get('uid')}/{request.name}/{sit.phase}")
    if sit.needs_discovery():
        try:
            index = lb_discovery.CACHE.get(ctx.aws, sit.region or ctx.aws.region(), settings)
            observed["discovery"] = {
                "memberships": [list(m) for m in index.memberships(sit.instance_id)],
                # When the index was read, so that two calls served by one index ask for the same Attachment.
                "discoveredAt": timefmt.fmt(index.listed_at),
            }
        except Exception as exc:  # noqa: BLE001 - any AWS/transport failure is reported, not raised
            observed["discoveryError"] = error_text(exc)
    if sit.phase == assess.DRAIN:
        _observe_memberships(observed, ctx, sit, request, now)
    if sit.phase == assess.SHUTDOWN and not request.finalizing and shutdown.node_leaving(sit):
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


def _observe_memberships(observed: dict, ctx: runtime.Context, sit: assess.Situation, request: HookRequest,
                         now: dt.datetime) -> None:
    try:
        observed["targetStates"] = _target_states(ctx, sit, request, now)
    except Exception as exc:  # noqa: BLE001 - any AWS/transport failure is reported, not raised
        observed["targetStatesError"] = error_text(exc)


def _target_states(ctx: runtime.Context, sit: assess.Situation, request: HookRequest,
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
            client, read = ctx.aws.client("elbv2", sit.region), elb.target_states
        else:  # a classic ELB: registered or not (it stops sending to an instance as it is deregistered)
            client, read, ports = ctx.aws.client("elb", sit.region), elb.instance_states, [0]
        found = elb.HEALTH.states(client, sit.region or "", name, sit.instance_id, ports,
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
