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

from lightkube.resources.core_v1 import Node

from hooks import conditions, events, machine_names, pipeline, runtime, template_sandbox, timefmt
from hooks.aws import instances
from hooks.config import Settings
from hooks.contract import HookRequest, RequestError, composite_response
from hooks.kube import fencing_api, fresh, pods
from hooks.machines import (disrupted, drift, initialization, launch, liveness, registration, repair, signals, spec,
                            termination, userdata)
from hooks.machines.pool import machines_of
from hooks.machines.view import MachineView, Progress, own_status
from hooks.plan import GATED, Outcome, Plan, error_text

NAME = "machine"
FAILURE_REASON = events.MACHINE_ACTION_FAILED
log = logging.getLogger(__name__)


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


# --------------------------------------------------------------------------- gather


def _status(request: HookRequest) -> dict:
    """The Machine's status as this call read it once (gather only reads it; decide works on its own copy)."""
    return request.reading("status", lambda: own_status(request.parent))


def gather(request: HookRequest, ctx: runtime.Context, now: dt.datetime) -> dict:
    """The look-ups of a verified call; a body alone makes none (decide asks for verification)."""
    if not request.verified:
        return {}
    observed: dict = {}
    _aws_readings(request, ctx, now, observed)
    _fresh_nodes(request, ctx, observed)
    _fencing(request, ctx, observed)
    if request.finalizing:
        _node_contents(request, ctx, observed)
    return observed


def _aws_readings(request: HookRequest, ctx: runtime.Context, now: dt.datetime, observed: dict) -> None:
    try:
        ec2 = ctx.aws.client("ec2", ctx.settings.aws_region or None)
        observed["instance"], observed["duplicates"] = ctx.instances.of_machine(
            ctx.settings.aws_region, request.meta.get("uid") or "", _status(request).get("instanceID"))
    except Exception as exc:  # noqa: BLE001 - recorded; nothing is decided on a failed look-up
        observed["instanceError"] = error_text(exc)
        return
    try:
        machine_spec = spec.machine(request.parent)
    except RequestError:
        return
    status = _status(request)
    if observed.get("instance") is None and not status.get("instanceID") and not request.deleting \
            and ctx.settings.cluster_name and launch.request_fresh(status, now):
        # This call launches: the subnets, and the user data rendered within its bounds.
        try:
            observed["subnets"] = instances.subnets(ec2, list(machine_spec.subnets), machine_spec.subnet_selector)
        except Exception as exc:  # noqa: BLE001
            observed["subnetsError"] = error_text(exc)
        try:
            observed["userData"] = userdata.render(machine_spec.user_data, ctx.settings.cluster_name, request.name,
                                                   spec.pool_of(request.parent), template_sandbox.render)
        except RequestError as exc:
            observed["userDataError"] = str(exc)
    instance_type = (observed.get("instance") or {}).get("instanceType") or status.get("instanceType")
    # Its type's facts give the capacity, and the labels its Node gets when it joins.
    if instance_type and (not status.get("capacity") or not conditions.is_true(status, machine_names.REGISTERED)):
        try:
            observed["types"] = instances.TYPES.get(ec2, [instance_type])
        except Exception as exc:  # noqa: BLE001
            observed["typesError"] = error_text(exc)


def _fresh_nodes(request: HookRequest, ctx: runtime.Context, observed: dict) -> None:
    """The Nodes labelled for the Machine and the one it recorded, as the API server has them now."""
    status = _status(request)
    try:
        found = [fresh.as_dict(n) for n in ctx.kube.list(Node, labels={machine_names.MACHINE_LABEL: request.name})]
        name, uid = status.get("nodeName"), status.get("nodeUID")
        if name and uid and not any((n.get("metadata") or {}).get("uid") == uid for n in found):
            recorded = fresh.read(ctx.kube, "Node", name)
            if recorded is not None and (recorded.get("metadata") or {}).get("uid") == uid:
                found.append(recorded)
            else:
                observed["recordedNodeGone"] = True
        observed["nodes"] = found
    except Exception as exc:  # noqa: BLE001 - fresh.Unverified included: not read is not gone
        observed["nodeError"] = error_text(exc) if not isinstance(exc, fresh.Unverified) else str(exc)


def _fencing(request: HookRequest, ctx: runtime.Context, observed: dict) -> None:
    """For a notice that the instance stopped: whether fencing stopped it (its FencingRequest is under way)."""
    notice = signals.of(request.parent, signals.INTERRUPTION_ANNOTATION)
    if notice is None or notice.reason != signals.INSTANCE_STOPPING or request.finalizing:
        return
    try:
        requests = fencing_api.fencing_requests(ctx.kube, ctx.settings.namespace)
    except Exception as exc:  # noqa: BLE001 - not known: the notice waits
        observed["fencingError"] = error_text(exc)
        return
    machine = machines_of([request.parent])[0]
    observed["fencingInFlight"] = repair.in_flight(machine, requests, ctx.settings.namespace)


def _node_contents(request: HookRequest, ctx: runtime.Context, observed: dict) -> None:
    """What is still on the Machine's Node: pods and VolumeAttachments (the API filters by node)."""
    node = _sight(request, observed).node
    if node is None:
        return
    observed.update(pods.whats_on(ctx.kube, node["metadata"]["name"], _pod_summary))
    namespaces = {(p["metadata"].get("namespace") or "default") for p in observed.get("pods") or []}
    if namespaces and disrupted.keeps_to_pod_budgets(request.parent):
        try:
            observed["disruptionBudgets"] = pods.disruption_budgets(ctx.kube, namespaces)
        except Exception as exc:  # noqa: BLE001 - not read is not "no budget"
            observed["disruptionBudgetsError"] = error_text(exc)


def _pod_summary(pod: dict) -> dict:
    meta = pod.get("metadata") or {}
    keep = {k: meta.get(k) for k in ("name", "namespace", "uid", "deletionTimestamp", "labels", "annotations",
                                     "ownerReferences") if meta.get(k) is not None}
    return {"metadata": keep, "status": {"phase": (pod.get("status") or {}).get("phase")}}


# --------------------------------------------------------------------------- decide


def _sight(request: HookRequest, observed: dict) -> registration.Sight:
    """The Machine's Node: from the API server when it was asked, else the request's related Nodes."""
    status = _status(request)
    instance_id = status.get("instanceID") or (observed.get("instance") or {}).get("instanceID")
    listed = observed["nodes"] if "nodes" in observed else request.related.of_kind("Node")
    return registration.sight(request.name, instance_id or "", status.get("nodeName") or "",
                              status.get("nodeUID") or "", listed, bool(observed.get("recordedNodeGone")))


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
    seen = _sight(request, observed)
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
