"""Ingress DaemonSets: a terminating managed pod detaches its node.

The node-detacher-pods controller sees one pod per call, so no Node sync's
payload grows with the number of pods. It records the request on the Node
(``nodewarden.io/detach-for-pod: <ns>/<daemonset>/<old pod uid>``, and when,
in ``nodewarden.io/detach-for-pod-since``), which the Node hook treats as a
detach trigger. Every such request ends, whichever comes first:

- a replacement pod of the same DaemonSet is Ready on that node (node-detacher-pods);
- the DaemonSet is gone or no longer managed (the Node hook looks it up);
- no replacement came within NODEWARDEN_DAEMONSET_REPLACEMENT_TIMEOUT_SECONDS,
  e.g. the DaemonSet no longer runs on that node (the Node hook's clock).

A pod we evicted ourselves from a leaving node starts no request: the node
is already out of every load balancer for a reason that has its own end.

This module (pure) holds what both controllers decide: which DaemonSets are
configured as managed, a leaving node, the Pod side of a request (written for
a terminating pod, withdrawn for its Ready replacement) and the Node side (its
withdrawal and its clock); hooks.kube.daemonsets looks the DaemonSets up.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import logging

from hooks import conditions, events, fields, objects, timefmt
from hooks.config import Settings
from hooks.contract import HookRequest, decorator_response
from hooks.detacher import names, triggers
from hooks.plan import Action, Plan

log = logging.getLogger(__name__)

def configured(daemonset: str, settings: Settings) -> bool:
    _, _, name = daemonset.partition("/")
    return any(entry == daemonset or ("/" not in entry and entry == name) for entry in settings.managed_daemonsets)


def leaving(node: dict, settings: Settings) -> bool:
    """Cordoned, deleting or tainted to go: its pods are being shut down on purpose, ours included."""
    return any(r in ("cordoned", "deleting") or r.startswith("taint:") for r in triggers.reasons(node, settings))


# ------------------------------------------------------------ the Pod hook's side


def concerned(request: HookRequest) -> tuple[str, str] | None:
    """The pod's DaemonSet and node, when the pod can change its node's request: only a terminating pod or a
    Ready replacement can. None otherwise."""
    pod = request.parent
    daemonset = objects.daemonset_of(pod)
    node_name = fields.string(pod, "spec", "nodeName")
    ready = conditions.is_true(fields.mapping(pod, "status"), "Ready")
    if daemonset is None or not node_name or not (request.deleting or ready):
        return None
    return daemonset, node_name


def from_pod(request: HookRequest, settings: Settings, now: dt.datetime, observed: dict) -> Plan:
    """The node's request written for a terminating managed pod (unless the node is leaving anyway), or
    withdrawn for a Ready replacement of the same DaemonSet. The pod itself is never changed."""
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


# ------------------------------------------------------------ the Node hook's side


def without_node_request(request: HookRequest) -> HookRequest:
    """The request as if the node carried no pod-detach request."""
    parent = dict(request.parent)
    meta = dict(parent["metadata"])
    meta["annotations"] = {k: v for k, v in request.annotations.items() if k not in (names.FOR_POD, names.FOR_POD_SINCE)}
    parent["metadata"] = meta
    return dataclasses.replace(request, parent=parent)


def withdraw_node_request(plan: Plan, why: str) -> Plan:
    """The plan, plus taking the ended request off the Node."""
    response = dict(plan.response)
    response["annotations"] = {**(response.get("annotations") or {}), names.FOR_POD: None, names.FOR_POD_SINCE: None}
    said = events.normal(events.DAEMONSET_POD_REQUEST_ENDED, f"Pod-triggered detach withdrawn: {why}")
    return dataclasses.replace(plan, response=response, events=[*plan.events, said])


def keep_node_request_clock(request: HookRequest, response: dict, settings: Settings, now: dt.datetime) -> dict:
    """Start the clock of a request that has none, and look again when it runs out."""
    if not request.annotations.get(names.FOR_POD):
        return response
    since = timefmt.parse(request.annotations.get(names.FOR_POD_SINCE))
    annotations = dict(response.get("annotations") or {})
    if since is None:
        since = now
        annotations[names.FOR_POD_SINCE] = timefmt.fmt(now)
    left = settings.daemonset_replacement_timeout_seconds - (now - since).total_seconds()
    resync = max(1.0, min(response.get("resyncAfterSeconds") or left, left))
    return dict(response, annotations=annotations, resyncAfterSeconds=resync)
