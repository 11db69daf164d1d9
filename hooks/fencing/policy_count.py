"""A NodeFencingPolicy's count (pure): its status, the storm guard, and the admitted Nodes told.

The counts and the StormGuard condition land in the policy's status, where
node-fencing reads them (hooks/fencing/storm.py counts). A count that admits
nodes tells each (an annotation with the count's time) and asks for its
FencingRequest at once (``kube.start-fencing``), so a Node need not wait for
its own turn in Metacontroller's queue. hooks/controllers/node_fencing_policy.py
runs it.
"""
from __future__ import annotations

import datetime as dt

from hooks import conditions, events, fencing_names, fields, timefmt
from hooks.config import Settings
from hooks.contract import HookRequest, RequestError, composite_response
from hooks.fencing import records, storm
from hooks.fencing.policy import Policy, parse
from hooks.plan import Action, Plan, TimeAllowance, backoff

# A count that admits hundreds of nodes at once (the tail of a storm's recovery) announces them over several
# calls, each within this many seconds, well under Metacontroller's 10 s hook timeout: a call that ran past it
# would write no status, and the same nodes would be announced again and again.
ANNOUNCE_BUDGET_SECONDS = 2.0


def recorded_nodes(request: HookRequest) -> list[dict]:
    """The records, each seen as the node it stands for."""
    return [records.as_node(r) for r in request.related.of_kind(records.KIND, fencing_names.API_GROUP)]


def decide(request: HookRequest, settings: Settings, now: dt.datetime, observed: dict, decorator: str) -> Plan:
    """The policy's status (its count and StormGuard condition), the storm-guard metric, and the admitted
    Nodes told, each given its FencingRequest as the DecoratorController ``decorator`` would make it."""
    previous = fields.mapping(request.parent, "status")
    generation = request.meta.get("generation") or 0
    stamp = timefmt.fmt(now)
    try:
        policy = parse(request.parent)
    except RequestError as exc:
        # Never fences with a spec it cannot read: the node-fencing hook skips invalid policies.
        status, _ = conditions.set(previous, fencing_names.POLICY_VALID, "False", events.INVALID_SPEC, str(exc), stamp)
        status, _ = conditions.set(status, fencing_names.STORM_GUARD, "True", events.INVALID_SPEC,
                                   "no fencing under a policy whose spec is invalid", stamp)
        status = {"observedGeneration": generation, "conditions": status["conditions"]}
        return Plan(composite_response(status=status), events=[events.warning(events.INVALID_SPEC, str(exc))])

    if "countList" in observed:
        # Stamped to the second as countedAt keeps it, so this call and the next admit alike.
        listing = storm.listing_of(observed["countList"], timefmt.parse(stamp))
    else:
        listing = storm.listing_in(policy, now)
    judged = storm.judge(policy, recorded_nodes(request), now, listing)
    error = observed.get("countError")
    kept, _ = conditions.set(previous, fencing_names.POLICY_VALID, "True", "Valid", "the spec is valid", stamp)
    status: dict = {"observedGeneration": generation}
    if listing is None:
        # Never counted for this spec: nothing is fenced until a count list succeeds.
        guard = ("True", "NotCounted", f"the policy's nodes could not be counted: {error or 'not listed yet'}")
    else:
        counted, guard = _counted(policy, storm.count(policy, judged, listing))
        status.update(counted)
    if error:
        status["countError"] = str(error)[:1000]
    kept, _ = conditions.set(kept, fencing_names.STORM_GUARD, *guard, stamp)
    status["conditions"] = [c for c in kept["conditions"] if c.get("type") in (fencing_names.POLICY_VALID, fencing_names.STORM_GUARD)]

    holds = guard[0] == "True"
    actions = [Action("metric.storm-guard", request.name, {"active": holds})]
    announcing, announced = _announcements(previous, generation, request, decorator)
    actions += announcing
    if announced is not None:
        status["announcedNodeNames"] = announced
    said = []
    was_holding = conditions.is_true(previous, fencing_names.STORM_GUARD)
    if holds and not was_holding:
        said.append(events.warning(events.STORM_GUARD_HOLDING, guard[2]))
    elif not holds and was_holding:
        said.append(events.normal(events.STORM_GUARD_RELEASED, guard[2]))
    if error:
        resync = backoff(settings, 1)
    else:
        resync = storm.next_list(judged, listing, now, count_interval(settings), holding=holds)
    # A list is read only for a policy the API server confirmed (gather); the metric is an action, so
    # it too waits for that confirmation.
    if set(status.get("unhealthyNodeNames") or ()) - set(announced or ()):
        resync = min(resync, 1.0)  # admitted on this count: told on the next call, once the count is written
    return Plan(composite_response(status=status, resync_after=max(1.0, resync)), actions, said,
                # Unverified, nothing was listed: ``listing`` is the status's, as gather reads it.
                verify=not request.verified and list_due(policy, judged, listing, now, settings),
                gate=TimeAllowance(ANNOUNCE_BUDGET_SECONDS))


def _announcements(previous: dict, generation, request: HookRequest,
                   decorator: str) -> tuple[list[Action], list[str] | None]:
    """The Nodes the written count admits for fencing and that were not told yet, each told with the count's
    time (fencing_names.COUNT_ANNOTATION), so node-fencing looks at once instead of at its next resync: the Node
    decorator does not relate the policies. Only a count Metacontroller has written (the status this call
    observed, read again from the API server before any action) is announced, so the Node's own sync can
    see it. Each is also given its FencingRequest now when node-fencing, deciding on the API server's
    objects, would make one (actuators.start_fencing): the Node's own sync comes only after every Node
    queued before it, and as a storm ends that is every recovering Node. Answers the actions, and the
    names told by now (None when the count admits none)."""
    counted = previous.get("countedAt")
    admitted = previous.get("unhealthyNodeNames")
    if previous.get("observedGeneration") != generation or conditions.is_true(previous, fencing_names.STORM_GUARD) \
            or timefmt.parse(counted) is None or not isinstance(admitted, list):
        return [], None
    told = previous.get("announcedNodeNames")
    told = {n for n in told if isinstance(n, str)} if isinstance(told, list) else set()
    uids = {}
    for record in request.related.of_kind(records.KIND, fencing_names.API_GROUP):
        spec = record.get("spec") if isinstance(record.get("spec"), dict) else {}
        if isinstance(spec.get("nodeUID"), str):
            uids[(record.get("metadata") or {}).get("name")] = spec["nodeUID"]
    actions = []
    for name in admitted:
        if isinstance(name, str) and name not in told and name in uids:
            # Its FencingRequest now, if node-fencing's own decision on the API server's objects makes one (the
            # Node's sync may wait behind every other Node in Metacontroller's one queue), and made before the
            # annotation brings that sync, which would otherwise race to make the same request.
            actions.append(Action("kube.start-fencing", name, {"uid": uids[name], "decorator": decorator}))
            actions.append(Action("kube.annotate-node", name, {"annotations": {fencing_names.COUNT_ANNOTATION: counted},
                                                               "uid": uids[name]}))
    return actions, sorted({n for n in admitted if isinstance(n, str) and (n in told or n in uids)})


def _counted(policy: Policy, counts: storm.Counts) -> tuple[dict, tuple[str, str, str]]:
    """The status fields of a count, and the StormGuard condition (status, reason, message) it makes."""
    status = {
        "countedAt": timefmt.fmt(counts.listed_at),
        "observedNodes": counts.observed,
        "unhealthyNodes": counts.unhealthy,
        "fencingNodes": counts.fencing,
        "fencedNodes": counts.fenced,
        "maxUnhealthyNodes": counts.allowed,
        "notReadyNodes": counts.not_ready_count,
    }
    if counts.not_ready is not None:
        status["notReadyNodeNames"] = list(counts.not_ready)
    if counts.holds:
        return status, ("True", "TooManyUnhealthy",
                        f"{counts.unhealthy} of {counts.observed} nodes are unhealthy, more than the "
                        f"{counts.allowed} maxUnhealthy ({policy.max_unhealthy}) allows: no new fencing starts")
    # The node-fencing hook starts fencing only for a node listed here: proof
    # that this count already saw it. Bounded by maxUnhealthyNodes.
    status["unhealthyNodeNames"] = list(counts.unhealthy_names)
    return status, ("False", "WithinLimit",
                    f"{counts.unhealthy} of {counts.observed} nodes are unhealthy; at most {counts.allowed} may be")


def count_interval(settings: Settings) -> float:
    """How often a policy is counted: its interval, and at least three times within the count's max age.

    A count expires after NODEWARDEN_FENCING_COUNT_MAX_AGE_SECONDS; counting
    well within that keeps a healthy policy from ever looking expired, whatever
    the two settings say.
    """
    return max(1.0, min(settings.fencing_count_interval_seconds, settings.fencing_count_max_age_seconds / 3))


def list_due(policy: Policy, judged: storm.Judged, listing: storm.Listing | None, now: dt.datetime,
              settings: Settings) -> bool:
    """Whether a count list is due by the policy's written status (its last list, its guard)."""
    return storm.next_list(judged, listing, now, count_interval(settings),
                           holding=conditions.is_true(policy.status, fencing_names.STORM_GUARD)) <= 0
