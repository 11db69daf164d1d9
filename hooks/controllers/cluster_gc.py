"""cluster-gc: a deleted cluster leaves nothing behind in AWS.

DecoratorController with a finalize hook on CAPA's ``AWSCluster`` and
``AWSManagedControlPlane`` (CAPA's external resource garbage collection
proposal). The load balancers, target groups and security groups that the
workload cluster's cloud controller made, its nodewarden Machines'
instances, the ENIs its VPC CNI left and its Elastic IPs keep the VPC alive;
the finalizer holds the cluster object until they are gone.

sync changes nothing (the parent's status belongs to CAPA). finalize, on
every call:

0. re-reads the parent from the API server and goes on only if it is the
   same object, being deleted, with this controller's finalizer; everything
   below reads that copy, never the request body (``verify``);
1. decides whether to collect at all: the global switch, the opt-out
   annotation ``aws.cluster.x-k8s.io/external-resource-gc`` (Go boolean,
   absent means true), the tasks annotation, the cluster's name and region;
   a value it cannot read blocks deletion rather than guessing
   (``hooks.teardown.scope``);
2. discovers what of the selected tasks is left (``hooks.aws.gc.discovery``);
3. deletes what a controller of the cluster made (``hooks.teardown.targets``)
   in task order, within a time and work budget (``hooks.aws.gc.runner``),
   never waiting for AWS;
4. records what remains and the last error in annotations, emits an Event
   and asks for a resync, backing off while nothing moves
   (``hooks.teardown.progress``).

``finalized: true`` only when discovery finds nothing of the selected tasks
left, so a crash at any point loses nothing: the next call finds the rest.
The rules are hooks/teardown/ (pure); this module wires them to the API
server and to AWS.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import sys

from botocore.exceptions import BotoCoreError, ClientError

from hooks import pipeline
from hooks.aws.gc import discovery, runner
from hooks.config import Settings
from hooks.contract import HookRequest, decorator_response
from hooks.kube import fresh
from hooks.plan import Outcome, Plan, error_text, unverified_text
from hooks.teardown import decision
from hooks.teardown_names import PARENT_KINDS, finalizer
from hooks.teardown.progress import progress_response, stall, waited_out
from hooks.teardown.scope import COLLECT, awaits_verification, scope_of

NAME = "cluster-gc"
FAILURE_REASON = None  # settle's ExternalResourceGCRetrying says what failed
log = logging.getLogger(__name__)


# -------------------------------------------------------------------- decide


def decide(request: HookRequest, settings: Settings, now: dt.datetime, observed: dict) -> Plan:
    """hooks.teardown's plan, its deletes run by the AWS runner's order and time budget."""
    plan = decision.decide(request, settings, now, observed)
    if plan.basis is None:
        return plan
    return dataclasses.replace(plan, gate=runner.StageGate(settings.gc_call_budget_seconds))


def settle(request: HookRequest, plan: Plan, outcomes: list[Outcome], settings: Settings, now: dt.datetime) -> Plan:
    """The response and Events from what the deletes did."""
    scope, targets = plan.basis
    done = {(o.action.params["kind"], o.action.target) for o in outcomes if o.ok}
    failures = [o for o in outcomes if not o.ok and runner.classify(o) in (runner.IN_USE, runner.THROTTLED,
                                                                            runner.FAILED)]
    throttled = any(runner.classify(o) == runner.THROTTLED for o in failures)
    refused = frozenset((o.action.params["kind"], o.action.target) for o in failures
                        if runner.classify(o) == runner.IN_USE)
    response, said = progress_response(request, settings, now, scope, targets, done, failures, throttled, refused)
    return dataclasses.replace(plan, response=response, events=said)


# ----------------------------------------------------------------------- act


def gather(request: HookRequest, ctx, now: dt.datetime) -> dict:
    """The look-ups this call needs (read-only): ``{"discovery": …}`` when collecting, else nothing.

    Nothing is looked up for a deletion before the API server has confirmed it.
    A failed discovery is recorded as ``{"error": …}``, never raised.
    """
    if awaits_verification(request, ctx.settings):
        return {}
    scope = scope_of(request, ctx.settings)
    if scope.decision != COLLECT:
        return {}
    query = discovery.Query(
        cluster_name=scope.cluster_name,
        region=scope.region,
        tasks=scope.tasks,
        include_lb_controller=ctx.settings.gc_include_lb_controller,
        use_tagging_api=ctx.settings.gc_use_tagging_api,
        listing_too=waited_out(request, ctx.settings, now),
    )
    try:
        found = discovery.discover(ctx.aws, query)
    except (ClientError, BotoCoreError) as exc:
        return {"discovery": {"error": error_text(exc)}}
    if found.get("fallback") and ctx.settings.gc_use_tagging_api:
        log.info("tagging API unavailable; listed instead", extra={"reason": found["fallback"]})
    return {"discovery": found}


needs_verification = pipeline.by_plan


def verify(request: HookRequest, ctx) -> HookRequest:
    """The request with the parent as the API server has it now; Unverified unless it really is going.

    A body proves nothing (anyone reaching the hook port can send one): the
    object must exist with the body's uid, be deleting, and carry this
    controller's finalizer, and everything after this (the cluster's name,
    region, opt-out and tasks) is read from the fresh copy.
    """
    if request.parent.get("kind") not in PARENT_KINDS:
        raise fresh.Unverified(f"cluster-gc finalizes only {' and '.join(PARENT_KINDS)}, "
                               f"not {request.parent.get('kind')!r}")
    request = fresh.same_parent(request, ctx.kube)
    meta = request.meta
    label = f"{request.parent.get('kind')} {meta.get('namespace')}/{meta.get('name')}"
    if not meta.get("deletionTimestamp"):
        raise fresh.Unverified(f"{label} is not being deleted")
    ours = finalizer(ctx.settings)
    finalizers = meta.get("finalizers")
    if not isinstance(finalizers, list) or ours not in finalizers:
        raise fresh.Unverified(f"{label} does not carry the finalizer {ours}")
    return request


def unverified(request: HookRequest, plan: Plan, ctx, reason: str) -> Plan:
    """Hold the finalizer and look again later; no Event, since the object may not exist at all."""
    log.warning("cluster-gc refused to delete", extra={"parent": f"{request.meta.get('namespace')}/{request.name}",
                                                       "reason": reason})
    annotations, resync = stall(request, ctx.settings, ctx.now(), unverified_text(reason))
    return Plan(decorator_response(annotations=annotations, resync_after=resync, finalized=False))


def sync(request: HookRequest, ctx=None) -> dict:
    return pipeline.run(sys.modules[__name__], request, ctx)


def finalize(request: HookRequest, ctx=None) -> dict:
    return pipeline.run(sys.modules[__name__], request, ctx)
