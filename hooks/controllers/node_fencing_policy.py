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
import sys

from hooks import conditions, events, fields, pipeline, runtime, timefmt
from hooks.config import Settings
from hooks.contract import HookRequest, RequestError, composite_response
from hooks.fencing import names, storm
from hooks.fencing import policy as policies
from hooks.plan import Action, Plan

NAME = "node-fencing-policy"
FAILURE_REASON = events.FENCING_ACTION_FAILED
log = logging.getLogger(__name__)


def customize(parent: dict, ctx: runtime.Context | None = None) -> dict:
    """The Nodes the policy selects (none while its selector is invalid)."""
    try:
        policy = policies.parse(parent)
    except RequestError:
        return {"relatedResources": []}
    selector = {k: v for k, v in policy.node_selector.items() if v}
    return {"relatedResources": [{"apiVersion": "v1", "resource": "nodes", "labelSelector": selector}]}


def decide(request: HookRequest, settings: Settings, now: dt.datetime, observed: dict) -> Plan:
    previous = fields.mapping(request.parent, "status")
    generation = request.meta.get("generation") or 0
    stamp = timefmt.fmt(now)
    try:
        policy = policies.parse(request.parent)
    except RequestError as exc:
        # Never fences with a spec it cannot read: the node-fencing hook skips invalid policies.
        status, _ = conditions.set(previous, names.POLICY_VALID, "False", events.INVALID_SPEC, str(exc), stamp)
        status, _ = conditions.set(status, names.STORM_GUARD, "True", events.INVALID_SPEC,
                                   "no fencing under a policy whose spec is invalid", stamp)
        status = {"observedGeneration": generation, "conditions": status["conditions"]}
        return Plan(composite_response(status=status), events=[events.warning(events.INVALID_SPEC, str(exc))])

    counts = storm.count(policy, request.related.of_kind("Node"), now)
    if counts.holds:
        guard = ("True", "TooManyUnhealthy",
                 f"{counts.unhealthy} of {counts.observed} nodes are unhealthy, more than the "
                 f"{counts.allowed} maxUnhealthy ({policy.max_unhealthy}) allows: no new fencing starts")
    else:
        guard = ("False", "WithinLimit",
                 f"{counts.unhealthy} of {counts.observed} nodes are unhealthy; at most {counts.allowed} may be")
    kept, _ = conditions.set(previous, names.POLICY_VALID, "True", "Valid", "the spec is valid", stamp)
    kept, _ = conditions.set(kept, names.STORM_GUARD, *guard, stamp)
    status = {
        "observedGeneration": generation,
        "countedAt": _counted_at(previous, counts, generation, settings, now),
        "observedNodes": counts.observed,
        "unhealthyNodes": counts.unhealthy,
        "fencingNodes": counts.fencing,
        "fencedNodes": counts.fenced,
        "maxUnhealthyNodes": counts.allowed,
        "conditions": [c for c in kept["conditions"] if c.get("type") in (names.POLICY_VALID, names.STORM_GUARD)],
    }
    if not counts.holds:
        # The node-fencing hook starts fencing only for a node listed here: proof
        # that this count already saw it. Bounded by maxUnhealthyNodes.
        status["unhealthyNodeNames"] = list(counts.unhealthy_names)

    actions = [Action("metric.storm-guard", request.name, {"active": counts.holds})]
    said = []
    was_holding = conditions.is_true(previous, names.STORM_GUARD)
    if counts.holds and not was_holding:
        said.append(events.warning(events.STORM_GUARD_HOLDING, guard[2]))
    elif not counts.holds and was_holding:
        said.append(events.normal(events.STORM_GUARD_RELEASED, guard[2]))
    # Counted again at least this often, so node-fencing always has a fresh count to trust.
    return Plan(composite_response(status=status, resync_after=count_interval(settings)), actions, said)


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


def gather(request: HookRequest, ctx: runtime.Context, now: dt.datetime) -> dict:
    return {}  # the related Nodes are all it reads


needs_verification = pipeline.never  # it writes its own status and a metric, nothing irreversible
verify = pipeline.as_is
unverified = pipeline.refuse
settle = pipeline.failures_only


def sync(request: HookRequest, ctx: runtime.Context | None = None) -> dict:
    return pipeline.run(sys.modules[__name__], request, ctx)
