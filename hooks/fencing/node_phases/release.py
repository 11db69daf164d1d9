"""Healthy, or no policy selects the node: leftovers of an earlier fencing are cleared (conditions, then
taints) and the FencingRequest goes once it is done."""
from __future__ import annotations

import datetime as dt

from hooks import conditions, events, fields, timefmt
from hooks.config import Settings
from hooks.contract import HookRequest, decorator_response
from hooks.fencing import names
from hooks.fencing.node_phases.attachments import desired_request, request_done
from hooks.fencing.node_phases.marks import TAINT_SETTLE_SECONDS, clear_error, taint_actions
from hooks.fencing.node_phases.situation import Situation
from hooks.plan import Action, Plan


def release(request: HookRequest, sit: Situation, settings: Settings, now: dt.datetime) -> Plan:
    """Healthy (or no policy): take our conditions and taints away; the FencingRequest goes when done."""
    node_status = fields.mapping(request.parent, "status")
    ours = [c for c in names.OUR_CONDITIONS if conditions.find(node_status, c)]
    status = None
    if ours:
        status = node_status
        for ctype in ours:
            status, _ = conditions.remove(status, ctype)
    attachments: list[dict] = []
    resync = None
    fr = sit.fencing_request
    if fr is not None and not request_done(fr):
        ready = conditions.find(node_status, "Ready") or {}
        healthy_for = timefmt.seconds_since(ready.get("lastTransitionTime"), now) \
            if ready.get("status") == "True" else None
        # A request that never finishes must not keep its node forever: its
        # finalize hook still takes the out-of-service taint off.
        if healthy_for is None or healthy_for < settings.fencing_release_timeout_seconds:
            attachments = [desired_request(request, sit, settings)]
            resync = settings.fencing_resync_seconds
    actions: list[Action] = []
    said = []
    if ours:
        why = "no NodeFencingPolicy selects the node" if sit.policy is None else "the node is healthy again"
        said.append(events.normal(events.FENCING_CLEARED, f"Fencing conditions cleared: {why}"))
    else:
        actions.extend(taint_actions(request, {}))
    if sit.policy is None and not sit.health.ready:
        # Policies are not related objects (no event when one is made): a node not Ready looks again for one.
        resync = min(resync or settings.fencing_resync_seconds, settings.fencing_resync_seconds)
    if status is not None and any(t.get("key") in names.OUR_TAINTS for t in fields.objects(request.parent, "spec", "taints")):
        resync = min(resync or TAINT_SETTLE_SECONDS, TAINT_SETTLE_SECONDS)
    return Plan(decorator_response(annotations=clear_error(request), status=status, attachments=attachments,
                                   resync_after=resync), actions, said)
