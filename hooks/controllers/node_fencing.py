"""node-fencing: the Node Fencing KEP's timeline on every Node, and fast failover.

DecoratorController on Nodes. NodeFencingPolicies arrive as related objects
(customize); the node's FencingRequest and its UnhealthyNode record are its
attachments. The timeline itself is hooks/fencing/node.py (decide); this
module reads what it needs (hooks/kube/node_timeline.py) and wires it to the
pipeline: pods are listed only for a node whose fencing is due, and every
taint, force delete and new FencingRequest waits for the Node, the policies
and the FencingRequest read fresh from the API server.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import sys

from hooks import events, fencing_names, pipeline, runtime
from hooks.config import Settings
from hooks.contract import HookRequest, decorator_response
from hooks.fencing import records
from hooks.fencing.node import decide  # the pipeline's decide step for this controller
from hooks.fencing.node_phases.situation import assess, governing_policy, needs_pods
from hooks.kube import fresh, node_timeline
from hooks.plan import Outcome, Plan, backoff, failure_text, unverified_text

NAME = "node-fencing"
FAILURE_REASON = events.FENCING_ACTION_FAILED
log = logging.getLogger(__name__)


def customize(parent: dict, ctx: runtime.Context | None = None) -> dict:
    """Every NodeFencingPolicy is related to every Node (there are few policies)."""
    return {"relatedResources": [{"apiVersion": fencing_names.API_VERSION, "resource": "nodefencingpolicies"}]}


# --------------------------------------------------------------------------- observe


def gather(request: HookRequest, ctx: runtime.Context, now: dt.datetime) -> dict:
    """Pods (and their claims) only for a node whose fencing is due, as the API server has it (decide asks
    for verification when it needs them)."""
    sit = assess(request, now, ctx.settings)
    if not needs_pods(sit) or not request.verified:
        return {}
    return node_timeline.failover_pods(ctx.kube, request.name, sit.policy)


# --------------------------------------------------------------------------- act


def settle(request: HookRequest, plan: Plan, outcomes: list[Outcome], settings: Settings, now: dt.datetime) -> Plan:
    """A failed action: the error on the node, and a backoff; conditions already decided stay."""
    message = failure_text(outcomes)
    annotations = dict(plan.response.get("annotations") or {})
    if request.annotations.get(fencing_names.ERROR_ANNOTATION) != message:
        annotations[fencing_names.ERROR_ANNOTATION] = message
    else:
        annotations.pop(fencing_names.ERROR_ANNOTATION, None)  # same error: no write, no hot loop
    return dataclasses.replace(plan, response=dict(plan.response, annotations=annotations,
                                                   resyncAfterSeconds=backoff(settings, 1)))


# --------------------------------------------------------------------------- hooks


def verify(request: HookRequest, ctx: runtime.Context) -> HookRequest:
    """The request rebuilt from the API server: the Node, every NodeFencingPolicy, the node's FencingRequest.

    A force delete rests on all three (the node unhealthy for long enough, a
    policy whose fresh count allows it, the power-off for a single-writer
    pod), so all three are read again; the body only says which node.
    """
    verified = node_timeline.rebuilt(request, ctx.kube, ctx.settings.namespace)
    seen, now_governing = governing_policy(request), governing_policy(verified)
    if seen is not None and now_governing is not None and \
            (seen.name, seen.uid) != (now_governing.name, now_governing.uid):
        raise fresh.Unverified(f"the NodeFencingPolicy governing the node is {now_governing.name} "
                               f"(uid {now_governing.uid}) on the API server, not the request's {seen.name} "
                               f"(uid {seen.uid})")
    return verified


def needs_verification(request: HookRequest, plan: Plan) -> bool:
    """A taint, a force delete or a new FencingRequest rests on the node, the policies and the FencingRequest:
    all read fresh first; so does a call that needs the node's pods."""
    if plan.actions or plan.verify:
        return True
    existing = {c["metadata"].get("name") for c in request.children.of_kind(fencing_names.REQUEST_KIND, fencing_names.API_GROUP)}
    return any(a.get("kind") == fencing_names.REQUEST_KIND and (a.get("metadata") or {}).get("name") not in existing
               for a in plan.response.get("attachments") or [])


def unverified(request: HookRequest, plan: Plan, ctx: runtime.Context, reason: str) -> Plan:
    """Nothing is decided on a body the API server did not confirm: no taint, no pod, no condition, and the
    attachments stay exactly as they are (none made, none deleted). The error annotation says why."""
    message = unverified_text(reason)[:1024]
    log.warning("node-fencing did not act", extra={"node": request.name, "reason": reason})
    # Said once per cause: the same failure again writes nothing.
    annotations = {fencing_names.ERROR_ANNOTATION: message} if request.annotations.get(fencing_names.ERROR_ANNOTATION) != message \
        else {}
    kept = [as_it_is(child) for kind in (fencing_names.REQUEST_KIND, records.KIND)
            for child in request.children.of_kind(kind, fencing_names.API_GROUP)]
    return Plan(decorator_response(annotations=annotations, attachments=kept,
                                   resync_after=backoff(ctx.settings, 1)))


def as_it_is(child: dict) -> dict:
    """An attachment asked for exactly as it exists: Metacontroller neither changes nor deletes it.
    (Its own annotations, such as the last applied configuration, are Metacontroller's to write.)"""
    meta = child.get("metadata") if isinstance(child.get("metadata"), dict) else {}
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
    labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
    kept = {"name": meta.get("name"), "namespace": meta.get("namespace"), "labels": labels,
            "annotations": {k: v for k, v in annotations.items() if not k.startswith("metacontroller.k8s.io/")}}
    return {"apiVersion": child.get("apiVersion"), "kind": child.get("kind"),
            "metadata": {k: v for k, v in kept.items() if v}, "spec": dict(child.get("spec") or {})}


def sync(request: HookRequest, ctx: runtime.Context | None = None) -> dict:
    return pipeline.run(sys.modules[__name__], request, ctx)
