"""nodepool: keep ``replicas`` Machines, and terminate instances no Machine owns.

A pool without ``replicas`` provisions for pending pods: it keeps the
Machines it has (none is created or removed for a count).

CompositeController on NodePool with Machines as children (created with the
pool's owner reference by Metacontroller, so they are owned from the start).
Every call is decided on the NodePool read fresh from the API server, and on
its Machines as the API server lists them (Metacontroller's cache can be a
step behind its own deletes): scale-down removes exactly the surplus, Machines
not yet Registered first, then the oldest, never a replacement a disrupted
Machine waits for; each leaves through its own finalizer (cordon, drain,
terminate). Which Machine replaces which is on the new Machine
(``nodewarden.io/replaces``), so the pairing survives a lost status write.
Deleting the pool deletes every Machine and finishes once none is left and
no instance tagged for the pool remains.
On a body alone nothing is looked up and the children are returned as they
are.

Leaked instances: tagged for this cluster and pool, with a Machine-UID tag
that names no Machine, recorded by no Machine, launched longer than
NODEWARDEN_LEAKED_INSTANCE_GRACE_SECONDS ago. Each is terminated only after
its tags, its age and the API server's Machines are read again right before
(the Orphaned precondition). An instance without our tags, or another
cluster's or pool's, is never a candidate.
"""
from __future__ import annotations

import datetime as dt
import logging
import sys

from hooks import conditions, events, machine_names, pipeline, runtime, timefmt
from hooks.config import Settings
from hooks.contract import HookRequest, RequestError, composite_response
from hooks.kube import fresh, nodepool_reads
from hooks.machines import pool, spec
from hooks.metrics import PROVISIONING_DECISION_SECONDS
from hooks.nodepools import children, decision
from hooks.plan import Outcome, Plan

NAME = "nodepool"
FAILURE_REASON = events.MACHINE_ACTION_FAILED
log = logging.getLogger(__name__)


def customize(parent: dict, ctx: runtime.Context | None = None) -> dict:
    """The FencingRequests of nodewarden's namespace: not read from the request (each call lists them from the
    API server), but related so that Metacontroller syncs the pool when one changes, and a fenced Machine's
    replacement starts as soon as the power-off is confirmed rather than at the next resync."""
    namespace = (ctx.settings.namespace if ctx is not None else "") or "nodewarden-system"
    return {"relatedResources": [{"apiVersion": f"{machine_names.GROUP}/v1alpha1", "resource": "fencingrequests",
                                  "namespace": namespace}]}


gather = nodepool_reads.gather


def decide(request: HookRequest, settings: Settings, now: dt.datetime, observed: dict) -> Plan:
    machines = pool.machines_of(request.children.of_kind(machine_names.MACHINE_KIND, machine_names.GROUP))
    kept = [children.keep(m) for m in machines]
    if not request.verified:
        # A body is a hint: the Machines stay as they are until the API server confirms the pool.
        return Plan(composite_response(status=decision.status_of(request, machines), children=kept,
                                       resync_after=settings.error_backoff_seconds,
                                       finalized=False if request.finalizing else None), verify=True)
    current = pool.machines_of(observed["machines"]) if "machines" in observed else None
    status = decision.status_of(request, current if current is not None else machines)
    try:
        pool_spec = spec.pool(request.parent)
    except RequestError as exc:
        # Never removes a Machine over a spec it cannot read: the children stay as they are.
        previous = request.parent.get("status") if isinstance(request.parent.get("status"), dict) else {}
        shown, _ = conditions.set(previous, "Ready", "False", events.INVALID_SPEC, str(exc), timefmt.fmt(now))
        status["conditions"] = shown["conditions"]
        return Plan(composite_response(status=status, children=[] if request.finalizing else kept,
                                       finalized=(not machines) if request.finalizing else None),
                    events=[events.warning(events.INVALID_SPEC, str(exc))])
    if observed.get("machinesError") and not request.finalizing:
        # Without the API server's count a scale-down could remove one Machine too many: change nothing.
        return Plan(composite_response(status=status, children=kept, resync_after=settings.error_backoff_seconds),
                    events=[events.warning(events.MACHINE_ACTION_FAILED, f"Machines: {observed['machinesError']}")])
    decided = decision.decide(request, pool_spec, settings, now, observed)
    if decided.provisioned is not None and decided.provisioned.ready:
        # A measurement of this very call, not a decision: taken here, where the time is spent.
        PROVISIONING_DECISION_SECONDS.observe(decided.provisioned.decision_seconds)
    return decided.plan


needs_verification = pipeline.by_plan


def verify(request: HookRequest, ctx: runtime.Context) -> HookRequest:
    return fresh.same_parent(request, ctx.kube)


def unverified(request: HookRequest, plan: Plan, ctx: runtime.Context, reason: str) -> Plan:
    """The children as they are (decide on a body changes none), and nothing finalized."""
    response = dict(plan.response)
    response["finalized"] = False
    return Plan(response)


def settle(request: HookRequest, plan: Plan, outcomes: list[Outcome], settings: Settings,
           now: dt.datetime) -> Plan:
    response = dict(plan.response)
    if response.get("finalized"):
        response["finalized"] = False
    response["resyncAfterSeconds"] = float(settings.error_backoff_seconds)
    return Plan(response, plan.actions, plan.events, basis=plan.basis)


def sync(request: HookRequest, ctx: runtime.Context | None = None) -> dict:
    return pipeline.run(sys.modules[__name__], request, ctx)


def finalize(request: HookRequest, ctx: runtime.Context | None = None) -> dict:
    return pipeline.run(sys.modules[__name__], request, ctx)
