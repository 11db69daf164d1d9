"""node-fencing-policy: count a NodeFencingPolicy's nodes, hold the storm guard.

CompositeController on NodeFencingPolicy, with no children. Its customize hook
relates the UnhealthyNode records (hooks/fencing/records.py) its selector
picks: node-fencing keeps one, well under 1 KB, for each node some policy may
count as unhealthy, so no request grows with the healthy nodes, nor by a
whole Node per unhealthy one. Metacontroller calls it again when a record
comes, changes or goes. The total, and the nodes not Ready (which count
whatever their records say), come from a compact list of the selected Nodes
read at most once per count interval (and before a node falls due). The
counts and the StormGuard condition land in the policy's status, where the
node-fencing hook reads them (see hooks/fencing/storm.py). The count's rules
are hooks/fencing/policy_count.py; this module reads and wires.

Only a policy the API server has, under the body's name and with its uid, is
counted: the list, the storm guard gauge and the Events wait for that
confirmation (verify), so a forged body does none of them.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import sys

from hooks import events, fencing_names, pipeline, runtime
from hooks.config import Settings
from hooks.contract import HookRequest, RequestError
from hooks.controllers import node
from hooks.fencing import policy_count, records, storm
from hooks.fencing.policy import parse
from hooks.kube import fresh
from hooks.kube.nodes import readiness
from hooks.plan import DEFERRED, Outcome, Plan, error_text

NAME = "node-fencing-policy"
FAILURE_REASON = events.FENCING_ACTION_FAILED
log = logging.getLogger(__name__)


def customize(parent: dict, ctx: runtime.Context | None = None) -> dict:
    """The UnhealthyNode records the policy's selector picks (none while its selector is invalid)."""
    try:
        policy = parse(parent)
    except RequestError:
        return {"relatedResources": []}
    selector = {k: v for k, v in policy.node_selector.items() if v}
    return {"relatedResources": [{"apiVersion": fencing_names.API_VERSION, "resource": records.RESOURCE,
                                  "labelSelector": selector}]}


def decide(request: HookRequest, settings: Settings, now: dt.datetime, observed: dict) -> Plan:
    # The DecoratorController whose attachment a Node's FencingRequest is (metacontroller/node.yaml).
    return policy_count.decide(request, settings, now, observed, decorator=node.NAME)


def gather(request: HookRequest, ctx: runtime.Context, now: dt.datetime) -> dict:
    """The count list, when one is due (hooks/fencing/storm.py says when) and the API server has confirmed
    the policy; otherwise nothing. A body alone never makes the hook list Nodes."""
    if not request.verified:
        return {}
    try:
        policy = parse(request.parent)
    except RequestError:
        return {}
    listing = storm.listing_in(policy, now)
    judged = storm.judge(policy, policy_count.recorded_nodes(request), now, listing)
    if not policy_count.list_due(policy, judged, listing, now, ctx.settings):
        return {}
    try:
        return {"countList": readiness(ctx.kube, policy.node_selector)}
    except Exception as exc:  # noqa: BLE001 - no count: the last one ages out, nothing new is fenced
        log.warning("cannot count the policy's nodes", extra={"policy": request.name, "error": error_text(exc)})
        return {"countError": f"cannot list the selected Nodes: {error_text(exc)}"}


def verify(request: HookRequest, ctx: runtime.Context) -> HookRequest:
    """The policy as the API server has it now, by name with the body's uid: only a real policy is counted,
    listed for, or given a metric series and Events. Its records are the body's (hints a count may be raised
    by, never lowered below the list)."""
    return fresh.same_parent(request, ctx.kube)


def needs_verification(request: HookRequest, plan: Plan) -> bool:
    """Everything it does (a list, the metric, an Event) waits for the API server's copy of the policy."""
    return bool(plan.actions or plan.events or plan.verify)


unverified = pipeline.refuse  # the answer decided on the body, with no list, no metric and no Event


def settle(request: HookRequest, plan: Plan, outcomes: list[Outcome], settings: Settings,
           now: dt.datetime) -> Plan:
    """A Node that could not be told, or whose announcement this call put off, stays untold, so the next call
    tells it again. A FencingRequest that could not be made is left to the Node's own sync, which the
    annotation brings."""
    untold = {o.action.target for o in outcomes if not o.ok and (
        o.action.kind == "kube.annotate-node" or o.code == DEFERRED)}
    status = plan.response.get("status")
    if not untold or not isinstance(status, dict) or "announcedNodeNames" not in status:
        return plan
    status = dict(status, announcedNodeNames=[n for n in status["announcedNodeNames"] if n not in untold])
    resync = min(plan.response.get("resyncAfterSeconds") or 1.0, 1.0)  # told on the next call, once written
    return dataclasses.replace(plan, response=dict(plan.response, status=status, resyncAfterSeconds=resync))


def sync(request: HookRequest, ctx: runtime.Context | None = None) -> dict:
    return pipeline.run(sys.modules[__name__], request, ctx)
