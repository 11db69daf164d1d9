"""node-detacher-pods: a terminating pod of a managed ingress DaemonSet detaches its node.

DecoratorController on Pods. It changes nothing on the pod; it writes the
node's pod-detach request (``nodewarden.io/detach-for-pod`` and its
``-since`` clock) when a managed DaemonSet's pod terminates, and withdraws it
when a Ready replacement of the same DaemonSet runs on that node. node-detacher
treats the request as a detach trigger and ends it by its other ends. What a
pod's call decides is hooks.detacher.pod_trigger's; this module reads what it
needs and holds the pipeline interface.
"""
from __future__ import annotations

import datetime as dt
import sys

from hooks import events, pipeline, runtime
from hooks.config import Settings
from hooks.contract import HookRequest, decorator_response
from hooks.detacher import names, pod_trigger
from hooks.kube import fresh
from hooks.kube.daemonsets import MANAGED
from hooks.plan import Outcome, Plan, backoff, error_text

NAME = "node-detacher-pods"
FAILURE_REASON = events.DETACH_FAILED


def gather(request: HookRequest, ctx: runtime.Context, now: dt.datetime) -> dict:
    """The DaemonSet's managed state and the node's current request: only for a terminating or Ready pod."""
    found = pod_trigger.concerned(request)
    if found is None:
        return {}  # only a terminating pod or a Ready replacement can change anything
    daemonset, node_name = found
    observed: dict = {"daemonset": daemonset, "node": node_name}
    try:
        managed = pod_trigger.configured(daemonset, ctx.settings) or MANAGED.contains(
            ctx.kube, ctx.settings.detacher_name, daemonset)
        observed["managed"] = managed
        if managed:
            from lightkube.resources.core_v1 import Node

            node = ctx.kube.get(Node, node_name)
            node = node.to_dict() if hasattr(node, "to_dict") else node
            observed["nodeRequest"] = ((node.get("metadata") or {}).get("annotations") or {}).get(names.FOR_POD)
            observed["nodeLeaving"] = pod_trigger.leaving(node, ctx.settings)
            observed["nodeUID"] = (node.get("metadata") or {}).get("uid")
    except Exception as exc:  # noqa: BLE001 - retried on the next resync
        observed["error"] = error_text(exc)
    return observed


def decide(request: HookRequest, settings: Settings, now: dt.datetime, observed: dict) -> Plan:
    return pod_trigger.from_pod(request, settings, now, observed)


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
