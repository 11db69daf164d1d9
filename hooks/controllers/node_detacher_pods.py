"""node-detacher-pods: a terminating pod of a managed ingress DaemonSet detaches its node.

DecoratorController on Pods. It changes nothing on the pod; it writes the
node's pod-detach request (``nodewarden.io/detach-for-pod`` and its
``-since`` clock) when a managed DaemonSet's pod terminates, and withdraws it
when a Ready replacement of the same DaemonSet runs on that node. node-detacher
treats the request as a detach trigger and ends it by its other ends (see
hooks.detacher.pod_trigger).
"""
from __future__ import annotations

import datetime as dt
import sys

from hooks import conditions, events, fields, objects, pipeline, runtime, timefmt
from hooks.config import Settings
from hooks.contract import HookRequest, decorator_response
from hooks.detacher import names
from hooks.detacher.pod_trigger import configured, leaving
from hooks.kube import fresh
from hooks.kube.daemonsets import MANAGED
from hooks.plan import Action, Outcome, Plan, backoff, error_text

NAME = "node-detacher-pods"
FAILURE_REASON = events.DETACH_FAILED


def gather(request: HookRequest, ctx: runtime.Context, now: dt.datetime) -> dict:
    """The DaemonSet's managed state and the node's current request: only for a terminating or Ready pod."""
    pod = request.parent
    daemonset = objects.daemonset_of(pod)
    node_name = fields.string(pod, "spec", "nodeName")
    ready = conditions.is_true(fields.mapping(pod, "status"), "Ready")
    if daemonset is None or not node_name or not (request.deleting or ready):
        return {}  # only a terminating pod or a Ready replacement can change anything
    observed: dict = {"daemonset": daemonset, "node": node_name}
    try:
        managed = configured(daemonset, ctx.settings) or MANAGED.contains(ctx.kube, ctx.settings.detacher_name,
                                                                          daemonset)
        observed["managed"] = managed
        if managed:
            from lightkube.resources.core_v1 import Node

            node = ctx.kube.get(Node, node_name)
            node = node.to_dict() if hasattr(node, "to_dict") else node
            observed["nodeRequest"] = ((node.get("metadata") or {}).get("annotations") or {}).get(names.FOR_POD)
            observed["nodeLeaving"] = leaving(node, ctx.settings)
            observed["nodeUID"] = (node.get("metadata") or {}).get("uid")
    except Exception as exc:  # noqa: BLE001 - retried on the next resync
        observed["error"] = error_text(exc)
    return observed


def decide(request: HookRequest, settings: Settings, now: dt.datetime, observed: dict) -> Plan:
    if observed.get("error"):
        return Plan(decorator_response(resync_after=settings.error_backoff_seconds))
    if not observed.get("managed"):
        return Plan(decorator_response())
    pod = request.parent
    daemonset, node = observed["daemonset"], observed["node"]
    uid = fields.string(pod, "metadata", "uid") or request.name
    current = observed.get("nodeRequest")
    ours = f"{daemonset}/{uid}"
    about = events.node_ref(node, observed.get("nodeUID"))
    if request.deleting:
        if current is None and not observed.get("nodeLeaving"):
            return Plan(decorator_response(), [Action(
                "kube.annotate-node", node,
                {"annotations": {names.FOR_POD: ours, names.FOR_POD_SINCE: timefmt.fmt(now)}},
                reports=events.normal(events.DAEMONSET_POD_TERMINATING,
                                      f"{daemonset} pod {request.name} is terminating: detaching the node", about))])
    elif conditions.is_true(fields.mapping(pod, "status"), "Ready") and current \
            and current.startswith(f"{daemonset}/") and current != ours:
        return Plan(decorator_response(), [Action(
            "kube.annotate-node", node, {"annotations": {names.FOR_POD: None, names.FOR_POD_SINCE: None}},
            reports=events.normal(events.DAEMONSET_POD_READY,
                                  f"{daemonset} replacement pod {request.name} is Ready: re-attaching", about))])
    return Plan(decorator_response())


def needs_verification(request: HookRequest, plan: Plan) -> bool:
    """Writing a node's detach request takes it out of every load balancer: only for a pod that really exists."""
    return bool(plan.actions)


def verify(request: HookRequest, ctx: runtime.Context) -> HookRequest:
    """The request with the Pod as the API server has it: same uid, or Unverified."""
    return fresh.same_parent(request, ctx.kube)


def unverified(request: HookRequest, plan: Plan, ctx: runtime.Context, reason: str) -> Plan:
    return Plan(decorator_response(resync_after=backoff(ctx.settings, 1)))


def settle(request: HookRequest, plan: Plan, outcomes: list[Outcome], settings: Settings, now: dt.datetime) -> Plan:
    """Never annotate users' pods with our errors: just try again later."""
    return Plan(decorator_response(resync_after=backoff(settings, 1)))


def sync(request: HookRequest, ctx: runtime.Context | None = None) -> dict:
    return pipeline.run(sys.modules[__name__], request, ctx)
