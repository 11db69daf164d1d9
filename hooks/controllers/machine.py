"""machine: one Machine, one instance, one Node — launched, joined, drained, terminated.

CompositeController on Machine, with no children. Its customize hook relates
only the Nodes labelled ``nodewarden.io/machine=<name>`` (what the kubelet
registers with), the Node the Machine recorded when it joined (by name: its
labels may change), and the Machine's NodePool, so its payload never grows
with the cluster. Each call runs the phases in hooks.machines, one file each,
in the order of a Machine's life:

  launch          find the instances by the Machine's UID tag, else launch one
  registration    join the Node whose providerID names the instance, mirror labels
  initialization  Node Ready, startup taints gone, extended resources there
  liveness        never registered within registrationTTL, no capacity anywhere, Node or instance
                  gone: delete
  drift           the pool's template changed since the Machine was made
  disrupted       why it is going (the pool's choice, or EC2's notice); a spot
                  warning or a stop outside fencing deletes it at once, a stop
                  EC2 no longer agrees with is retired
  termination     (finalize) cordon, detach, drain, volumes, terminate, delete the Node

A request body is a hint: every call is decided on the Machine read fresh
from the API server, and only then does gather look anything up (AWS, the
Nodes, the pods) or render user data. The Nodes are read fresh too: the
labelled ones by label, the recorded one by name, so its absence is proven
by a 404 or another uid, never by not being seen.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import sys

from hooks import conditions, events, machine_names, pipeline, runtime, timefmt
from hooks.config import Settings
from hooks.contract import HookRequest, RequestError, composite_response
from hooks.kube import fresh, machine_reads
from hooks.machines import disrupted, drift, initialization, launch, liveness, registration, spec, termination
from hooks.machines.view import MachineView, Progress, own_status
from hooks.plan import GATED, Outcome, Plan

NAME = "machine"
FAILURE_REASON = events.MACHINE_ACTION_FAILED
log = logging.getLogger(__name__)
gather = machine_reads.gather


def customize(parent: dict, ctx: runtime.Context | None = None) -> dict:
    """Nodes with the Machine's label, the Node it recorded, and its NodePool."""
    meta = parent.get("metadata") if isinstance(parent.get("metadata"), dict) else {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        return {"relatedResources": []}
    related = [{"apiVersion": "v1", "resource": "nodes", "labelSelector": {"matchLabels": {machine_names.MACHINE_LABEL: name}}}]
    status = parent.get("status") if isinstance(parent.get("status"), dict) else {}
    node_name = status.get("nodeName")
    if isinstance(node_name, str) and node_name:
        related.append({"apiVersion": "v1", "resource": "nodes", "names": [node_name]})
    labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
    pool = labels.get(machine_names.POOL_LABEL)
    if isinstance(pool, str) and pool:
        related.append({"apiVersion": machine_names.API_VERSION, "resource": "nodepools", "names": [pool]})
    return {"relatedResources": related}


# --------------------------------------------------------------------------- decide


def _unconfirmed(request: HookRequest, settings: Settings) -> Plan:
    """On a body alone: the Machine as it is, and a request to verify it (every call acts or looks something up)."""
    status = own_status(request.parent)
    status["observedGeneration"] = request.meta.get("generation") or 0
    return Plan(composite_response(status=status, resync_after=settings.error_backoff_seconds,
                                   finalized=False if request.finalizing else None), verify=True)


def decide(request: HookRequest, settings: Settings, now: dt.datetime, observed: dict) -> Plan:
    if not request.verified:
        return _unconfirmed(request, settings)
    generation = request.meta.get("generation") or 0
    try:
        machine_spec = spec.machine(request.parent)
    except RequestError as exc:
        status = own_status(request.parent)
        status, _ = conditions.set(status, machine_names.LAUNCHED, "False", events.INVALID_SPEC, str(exc),
                                   timefmt.fmt(now))
        status.update(observedGeneration=generation, lastError=str(exc))
        finalized = None
        if request.finalizing:
            # Nothing to clean up only when no instance carries the Machine's UID (EC2 said so just now).
            finalized = not (status.get("instanceID") or observed.get("instance") or observed.get("duplicates")
                             or observed.get("instanceError") or "instance" not in observed)
        return Plan(composite_response(status=status, finalized=finalized, resync_after=settings.error_backoff_max_seconds),
                    events=[events.warning(events.INVALID_SPEC, str(exc))])
    view = MachineView(request.parent, machine_spec, own_status(request.parent), observed, now, request.verified)
    progress = Progress(view)
    seen = registration.call_sight(request, observed)
    if request.finalizing:
        disrupted.step(view, progress, deleting=True)
        termination.step(view, progress, seen, settings)
    else:
        launch.step(view, progress, settings, settings.cluster_name)
        registration.step(view, progress, seen, settings)
        initialization.step(view, progress, seen.node, settings)
        liveness.step(view, progress, seen, settings)
        drift.step(view, progress, request.related.get(machine_names.NODEPOOL_KIND, view.pool) if view.pool else None)
        if not any(a.kind == "kube.delete-machine" for a in progress.actions):
            disrupted.step(view, progress, deleting=False)
    status = view.status
    status["observedGeneration"] = generation
    if progress.errors:
        status["lastError"] = "; ".join(progress.errors)[:2000]
    else:
        status.pop("lastError", None)
    response = composite_response(status=status, resync_after=progress.resync,
                                  finalized=progress.finalized if request.finalizing else None)
    return Plan(response, progress.actions, progress.events, verify=progress.verify, gate=progress.gate)


# --------------------------------------------------------------------------- verify, settle


def needs_verification(request: HookRequest, plan: Plan) -> bool:
    """Every call: decide asks for it on a body, and every action and ``finalized`` rests on it."""
    return plan.verify or bool(plan.response.get("finalized")) or \
        any(not a.kind.startswith("metric.") for a in plan.actions)


def verify(request: HookRequest, ctx: runtime.Context) -> HookRequest:
    return fresh.same_parent(request, ctx.kube)


# Nothing is done and nothing finalized on a body the API server did not confirm.
unverified = pipeline.in_status


def settle(request: HookRequest, plan: Plan, outcomes: list[Outcome], settings: Settings,
           now: dt.datetime) -> Plan:
    """The launch's refused candidates recorded; a failed step is retried after a backoff, its error the
    Machine's lastError, and nothing is finalized. A launch whose candidates were only refused goes on with
    the next ones at once."""
    status = launch.record_refusals(plan.response["status"], outcomes, now)
    plan = dataclasses.replace(plan, response={**plan.response, "status": status})
    failed = [o for o in outcomes if not o.ok and o.code not in GATED]
    if not failed:
        return plan  # only put off: a launch's other candidates, or past the call's time
    blocked_by_budget = all(o.ok or (o.action.kind == "kube.evict" and "429" in o.error) for o in outcomes)
    if all(launch.refused(o) for o in failed):
        retry = launch.NEXT_CALL_SECONDS
    else:
        retry = settings.machine_poll_seconds if blocked_by_budget else settings.error_backoff_seconds
    settled = pipeline.failed_in_status(plan, outcomes, retry)
    if settled.response.get("finalized"):
        settled.response["finalized"] = False
    return settled


def sync(request: HookRequest, ctx: runtime.Context | None = None) -> dict:
    return pipeline.run(sys.modules[__name__], request, ctx)


def finalize(request: HookRequest, ctx: runtime.Context | None = None) -> dict:
    return pipeline.run(sys.modules[__name__], request, ctx)
