"""node-fencing-policy: count a NodeFencingPolicy's nodes, hold the storm guard.

CompositeController on NodeFencingPolicy, with no children. Its customize hook
relates the Nodes the policy selects, so this sync (not every Node's) is the
one whose payload grows with the nodes; Metacontroller calls it again when one
of them changes. The counts and the StormGuard condition land in the policy's
status, where the node-fencing hook reads them (see hooks/fencing/storm.py).
"""
from __future__ import annotations

import datetime as dt
import logging

from hooks import conditions, fields, runtime, timefmt
from hooks.config import Settings
from hooks.contract import HookRequest, RequestError, composite_response
from hooks.fencing import names, storm
from hooks.fencing import policy as policies
from hooks.kube import events
from hooks.metrics import STORM_GUARD
from hooks.plan import Action, Plan

CONTROLLER = "node-fencing-policy"
log = logging.getLogger(__name__)


def customize(parent: dict, ctx: runtime.Context | None = None) -> dict:
    """The Nodes the policy selects (none while its selector is invalid)."""
    try:
        policy = policies.parse(parent)
    except RequestError:
        return {"relatedResources": []}
    selector = {k: v for k, v in policy.node_selector.items() if v}
    return {"relatedResources": [{"apiVersion": "v1", "resource": "nodes", "labelSelector": selector}]}


def _condition(previous_status: dict, ctype: str, status: str, reason: str, message: str, now: dt.datetime) -> dict:
    previous = conditions.find(previous_status, ctype) or {}
    same = previous.get("status") == status and previous.get("lastTransitionTime")
    return {
        "type": ctype,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": previous["lastTransitionTime"] if same else timefmt.fmt(now),
    }


def decide(request: HookRequest, settings: Settings, now: dt.datetime, observed: dict) -> Plan:
    previous = fields.mapping(request.parent, "status")
    generation = request.meta.get("generation") or 0
    try:
        policy = policies.parse(request.parent)
    except RequestError as exc:
        # Never fences with a spec it cannot read: the node-fencing hook skips invalid policies.
        status = {
            "observedGeneration": generation,
            "conditions": [
                _condition(previous, names.POLICY_VALID, "False", "InvalidSpec", str(exc), now),
                _condition(previous, names.STORM_GUARD, "True", "InvalidSpec",
                           "no fencing under a policy whose spec is invalid", now),
            ],
        }
        return Plan(composite_response(status=status),
                    [Action("event", request.name, {"reason": "InvalidSpec", "message": str(exc), "warning": True})])

    counts = storm.count(policy, request.related.of_kind("Node"), now)
    if counts.holds:
        guard = _condition(previous, names.STORM_GUARD, "True", "TooManyUnhealthy",
                           f"{counts.unhealthy} of {counts.observed} nodes are unhealthy, more than the "
                           f"{counts.allowed} maxUnhealthy ({policy.max_unhealthy}) allows: no new fencing starts", now)
    else:
        guard = _condition(previous, names.STORM_GUARD, "False", "WithinLimit",
                           f"{counts.unhealthy} of {counts.observed} nodes are unhealthy; "
                           f"at most {counts.allowed} may be", now)
    status = {
        "observedGeneration": generation,
        "countedAt": _counted_at(previous, counts, generation, settings, now),
        "observedNodes": counts.observed,
        "unhealthyNodes": counts.unhealthy,
        "fencingNodes": counts.fencing,
        "fencedNodes": counts.fenced,
        "maxUnhealthyNodes": counts.allowed,
        "conditions": [_condition(previous, names.POLICY_VALID, "True", "Valid", "the spec is valid", now), guard],
    }
    if not counts.holds:
        # The node-fencing hook starts fencing only for a node listed here: proof
        # that this count already saw it. Bounded by maxUnhealthyNodes.
        status["unhealthyNodeNames"] = list(counts.unhealthy_names)

    actions = [Action("metric.storm-guard", request.name, {"active": counts.holds})]
    was_holding = (conditions.find(previous, names.STORM_GUARD) or {}).get("status") == "True"
    if counts.holds and not was_holding:
        actions.append(Action("event", request.name, {"reason": "StormGuardHolding", "message": guard["message"],
                                                      "warning": True}))
    elif not counts.holds and was_holding:
        actions.append(Action("event", request.name, {"reason": "StormGuardReleased", "message": guard["message"]}))
    # Counted again at least this often, so node-fencing always has a fresh count to trust.
    return Plan(composite_response(status=status, resync_after=count_interval(settings)), actions)


def count_interval(settings: Settings) -> float:
    """How often a policy is counted: its interval, and at least three times within the count's max age.

    A count expires after NODEWARDEN_FENCING_COUNT_MAX_AGE_SECONDS; counting
    well within that keeps a healthy policy from ever looking expired, whatever
    the two settings say.
    """
    return max(1.0, min(settings.fencing_count_interval_seconds, settings.fencing_count_max_age_seconds / 3))


def _counted_at(previous: dict, counts: storm.Counts, generation, settings: Settings, now: dt.datetime) -> str:
    """Now, unless the same counts were stamped less than half an interval ago.

    Every new stamp is a status write, and a status write is another sync:
    re-stamping identical counts each time would keep the policy busy for
    nothing. Keeping the older stamp only makes the count look older.
    """
    before = timefmt.parse(previous.get("countedAt"))
    same = previous.get("observedGeneration") == generation and previous.get("observedNodes") == counts.observed \
        and previous.get("unhealthyNodes") == counts.unhealthy and previous.get("fencingNodes") == counts.fencing \
        and previous.get("fencedNodes") == counts.fenced and \
        (previous.get("unhealthyNodeNames") or []) == list(counts.unhealthy_names)
    if same and before is not None and 0 <= (now - before).total_seconds() < count_interval(settings) / 2:
        return previous["countedAt"]
    return timefmt.fmt(now)


def sync(request: HookRequest, ctx: runtime.Context | None = None) -> dict:
    ctx = ctx or runtime.current()
    plan = decide(request, ctx.settings, ctx.now(), {})
    for action in plan.actions:
        if action.kind == "metric.storm-guard":
            STORM_GUARD.labels(action.target).set(1 if action.params["active"] else 0)
        elif action.kind == "event":
            events.emit(ctx.kube, request.parent, action.params["reason"], action.params["message"],
                        warning=action.params.get("warning", False), component=CONTROLLER)
    return plan.response
