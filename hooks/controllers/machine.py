"""machine: one Machine, one instance, one Node — launched, joined, drained, terminated.

CompositeController on Machine, with no children. Its customize hook relates
only the Nodes labelled ``nodewarden.io/machine=<name>`` (what the kubelet
registers with) and the Machine's NodePool, so its payload never grows with
the cluster. Each call runs the phases in hooks.machines, one file each, in
the order of a Machine's life:

  launch          find the instance by the Machine's UID tag, else launch one
  registration    join the Node whose providerID names the instance, mirror labels
  initialization  Node Ready, startup taints gone, extended resources there
  liveness        not registered within registrationTTL, or instance gone: delete
  drift           the pool's template changed since the Machine was made
  termination     (finalize) cordon, detach, drain, volumes, terminate, delete the Node

Anything it would do is decided again on the Machine read fresh from the API
server (a body proves nothing); the Node is read fresh too, by label, before a
conclusion rests on its absence.
"""
from __future__ import annotations

import datetime as dt
import json
import logging
import sys

from lightkube.resources.core_v1 import Node

from hooks import actuators, conditions, events, pipeline, runtime, timefmt
from hooks.aws import instances
from hooks.aws.clients import describe_error as aws_error
from hooks.config import Settings
from hooks.contract import HookRequest, RequestError, composite_response
from hooks.kube import fresh, pods
from hooks.kube.client import describe_error as kube_error
from hooks.machines import drift, initialization, launch, liveness, names, registration, spec, termination
from hooks.machines.view import MachineView, Progress, own_status
from hooks.plan import Outcome, Plan

NAME = "machine"
FAILURE_REASON = events.MACHINE_ACTION_FAILED
log = logging.getLogger(__name__)


def customize(parent: dict, ctx: runtime.Context | None = None) -> dict:
    """Nodes with the Machine's label, and its NodePool."""
    meta = parent.get("metadata") if isinstance(parent.get("metadata"), dict) else {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        return {"relatedResources": []}
    related = [{"apiVersion": "v1", "resource": "nodes", "labelSelector": {"matchLabels": {names.MACHINE_LABEL: name}}}]
    labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
    pool = labels.get(names.POOL_LABEL)
    if isinstance(pool, str) and pool:
        related.append({"apiVersion": names.API_VERSION, "resource": "nodepools", "names": [pool]})
    return {"relatedResources": related}


# --------------------------------------------------------------------------- gather


def _status(request: HookRequest) -> dict:
    """The Machine's status as this call read it once (gather only reads it; decide works on its own copy)."""
    return request.reading("status", lambda: own_status(request.parent))


def _instance(request: HookRequest, ec2, observed: dict) -> None:
    recorded = _status(request).get("instanceID")
    if recorded:
        observed["instance"] = instances.describe(ec2, recorded)
        return
    found = instances.by_machine_uid(ec2, request.meta.get("uid") or "")
    observed["instance"] = found[0] if found else None
    observed["duplicates"] = found[1:]


_AWS_READINGS = ("instance", "duplicates", "instanceError", "subnets", "subnetsError", "types", "typesError")


def _lookup_key(request: HookRequest) -> str:
    """What the AWS look-ups depend on: a verified copy that agrees may reuse the body's look-ups."""
    status = _status(request)
    spec_ = request.parent.get("spec") if isinstance(request.parent.get("spec"), dict) else {}
    return json.dumps([request.meta.get("uid"), status.get("instanceID"), status.get("instanceType"),
                       bool(status.get("capacity")), request.finalizing, spec_.get("subnets"),
                       spec_.get("subnetSelector")], sort_keys=True, default=str)


def gather(request: HookRequest, ctx: runtime.Context, now: dt.datetime) -> dict:
    key = _lookup_key(request)
    if request.prior.get("lookupKey") == key:
        observed = {k: request.prior[k] for k in (*_AWS_READINGS, "lookupKey") if k in request.prior}
    else:
        observed = {"lookupKey": key}
        _aws_readings(request, ctx, observed)
    if request.verified:
        _fresh_nodes(request, ctx, observed)
    if request.finalizing:
        _node_contents(request, ctx, observed)
    return observed


def _aws_readings(request: HookRequest, ctx: runtime.Context, observed: dict) -> None:
    try:
        ec2 = ctx.aws.client("ec2", ctx.settings.aws_region or None)
        _instance(request, ec2, observed)
    except Exception as exc:  # noqa: BLE001 - recorded; nothing is decided on a failed look-up
        observed["instanceError"] = aws_error(exc)
        return
    try:
        machine_spec = spec.machine(request.parent)
    except RequestError:
        return
    status = _status(request)
    if observed.get("instance") is None and not status.get("instanceID") and not request.finalizing:
        try:
            observed["subnets"] = instances.subnets(ec2, list(machine_spec.subnets), machine_spec.subnet_selector)
        except Exception as exc:  # noqa: BLE001
            observed["subnetsError"] = aws_error(exc)
    instance_type = (observed.get("instance") or {}).get("instanceType") or status.get("instanceType")
    if instance_type and not status.get("capacity"):
        try:
            observed["types"] = instances.TYPES.get(ec2, [instance_type])
        except Exception as exc:  # noqa: BLE001
            observed["typesError"] = aws_error(exc)


def _fresh_nodes(request: HookRequest, ctx: runtime.Context, observed: dict) -> None:
    """The Nodes with the Machine's label as the API server has them now (a conclusion may rest on them)."""
    try:
        found = ctx.kube.list(Node, labels={names.MACHINE_LABEL: request.name})
        observed["nodes"] = [fresh.as_dict(n) for n in found]
    except Exception as exc:  # noqa: BLE001
        observed["nodeError"] = kube_error(exc)


def _node_contents(request: HookRequest, ctx: runtime.Context, observed: dict) -> None:
    """What is still on the joined Node: pods and VolumeAttachments (the API filters by node)."""
    node, _ = _nodes(request, observed)
    if node is None:
        return
    observed.update(pods.whats_on(ctx.kube, node["metadata"]["name"], _pod_summary))


def _pod_summary(pod: dict) -> dict:
    meta = pod.get("metadata") or {}
    keep = {k: meta.get(k) for k in ("name", "namespace", "uid", "deletionTimestamp", "annotations",
                                     "ownerReferences") if meta.get(k) is not None}
    return {"metadata": keep, "status": {"phase": (pod.get("status") or {}).get("phase")}}


# --------------------------------------------------------------------------- decide


def _nodes(request: HookRequest, observed: dict) -> tuple[dict | None, list[dict]]:
    """The joined Node and the mislabelled ones: fresh when the API server was asked, else the request's."""
    instance_id = _status(request).get("instanceID") or (observed.get("instance") or {}).get("instanceID")
    listed = observed["nodes"] if "nodes" in observed else request.related.of_kind("Node")
    return registration.candidates(request.name, instance_id or "", listed)


def decide(request: HookRequest, settings: Settings, now: dt.datetime, observed: dict) -> Plan:
    generation = request.meta.get("generation") or 0
    try:
        machine_spec = spec.machine(request.parent)
    except RequestError as exc:
        status = own_status(request.parent)
        status, _ = conditions.set(status, names.LAUNCHED, "False", events.INVALID_SPEC, str(exc),
                                   timefmt.fmt(now))
        status.update(observedGeneration=generation, lastError=str(exc))
        finalized = None
        if request.finalizing:
            # Nothing to clean up only when no instance carries the Machine's UID (EC2 said so just now).
            finalized = not (status.get("instanceID") or observed.get("instance") or observed.get("instanceError")
                             or "instance" not in observed)
        return Plan(composite_response(status=status, finalized=finalized, resync_after=settings.error_backoff_max_seconds),
                    events=[events.warning(events.INVALID_SPEC, str(exc))])
    view = MachineView(request.parent, machine_spec, own_status(request.parent), observed, now, request.verified)
    progress = Progress(view)
    node, others = _nodes(request, observed)
    if request.finalizing:
        termination.step(view, progress, node, settings)
    else:
        launch.step(view, progress, settings, settings.cluster_name)
        registration.step(view, progress, node, others, settings)
        initialization.step(view, progress, node, settings)
        liveness.step(view, progress, settings)
        drift.step(view, progress, request.related.get(names.NODEPOOL_KIND, view.pool) if view.pool else None)
    status = view.status
    status["observedGeneration"] = generation
    if progress.errors:
        status["lastError"] = "; ".join(progress.errors)[:2000]
    else:
        status.pop("lastError", None)
    response = composite_response(status=status, resync_after=progress.resync,
                                  finalized=progress.finalized if request.finalizing else None)
    return Plan(response, progress.actions, progress.events, verify=progress.verify)


# --------------------------------------------------------------------------- verify, settle


def needs_verification(request: HookRequest, plan: Plan) -> bool:
    """Every action but a metric rests on the Machine being what the body says; so does finalizing."""
    return plan.verify or bool(plan.response.get("finalized")) or \
        any(not a.kind.startswith("metric.") for a in plan.actions)


def verify(request: HookRequest, ctx: runtime.Context) -> HookRequest:
    return fresh.same_parent(request, ctx.kube)


def unverified(request: HookRequest, plan: Plan, ctx: runtime.Context, reason: str) -> Plan:
    """Nothing is done and nothing finalized on a body the API server did not confirm."""
    response = dict(plan.response)
    response["status"] = {**response["status"], "lastError": f"not verified with the API server: {reason}"[:2000]}
    response["resyncAfterSeconds"] = float(ctx.settings.error_backoff_seconds)
    if request.finalizing:
        response["finalized"] = False
    return Plan(response)


def settle(request: HookRequest, plan: Plan, outcomes: list[Outcome], settings: Settings,
           now: dt.datetime) -> Plan:
    """A failed step is retried after a backoff; its error is the Machine's lastError."""
    response = dict(plan.response)
    failed = actuators.failure_text(outcomes)
    status = dict(response["status"])
    status["lastError"] = "; ".join(x for x in (status.get("lastError"), failed) if x)[:2000]
    response["status"] = status
    blocked_by_budget = all(o.ok or (o.action.kind == "kube.evict" and "429" in o.error) for o in outcomes)
    retry = settings.machine_poll_seconds if blocked_by_budget else settings.error_backoff_seconds
    response["resyncAfterSeconds"] = min(float(response.get("resyncAfterSeconds") or retry), retry)
    if response.get("finalized"):
        response["finalized"] = False
    return Plan(response, plan.actions, plan.events, basis=plan.basis)


def sync(request: HookRequest, ctx: runtime.Context | None = None) -> dict:
    return pipeline.run(sys.modules[__name__], request, ctx)


def finalize(request: HookRequest, ctx: runtime.Context | None = None) -> dict:
    return pipeline.run(sys.modules[__name__], request, ctx)
