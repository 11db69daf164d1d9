"""What one machine call reads: its instances (the process's view, fresh where the launch needs it), what a
launch needs, its Nodes as the API server has them, fencing's requests for a stopped instance, and what is
on its Node when it is finalized; failures are recorded, never raised.
"""
from __future__ import annotations

import datetime as dt

from lightkube.resources.core_v1 import Node

from hooks import conditions, machine_names, runtime, template_sandbox
from hooks.aws import instances
from hooks.contract import HookRequest, RequestError
from hooks.kube import fencing_api, fresh, pods
from hooks.machines import disrupted, launch, registration, repair, signals, spec, userdata
from hooks.machines.pool import machines_of
from hooks.machines.view import read_status
from hooks.plan import error_text


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
            ctx.settings.aws_region, request.meta.get("uid") or "", read_status(request).get("instanceID"))
    except Exception as exc:  # noqa: BLE001 - recorded; nothing is decided on a failed look-up
        observed["instanceError"] = error_text(exc)
        return
    try:
        machine_spec = spec.machine(request.parent)
    except RequestError:
        return
    status = read_status(request)
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
    status = read_status(request)
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
    node = registration.call_sight(request, observed).node
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
