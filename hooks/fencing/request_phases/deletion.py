"""Deletion (the finalize hook): a FencingRequest deleted half-way takes its instance out of the Auto
Scaling Standby it put it in, and takes the out-of-service taint it put on off its node, unless another
live request for the node, in any namespace, still counts on it. Not knowing (the Node or the other
requests unreadable) keeps the request and its finalizer, and finalize retries."""
from __future__ import annotations

from hooks import events
from hooks.fencing.request_phases import replacement
from hooks.fencing.request_phases.aftercare import may_hold, ours_to_remove, untaint
from hooks.fencing.request_phases.state import Step, node_gone
from hooks.plan import Change, Plan, backoff


def finalize(step: Step) -> Plan:
    if replacement.leave_standby(step, "its FencingRequest was deleted"):
        # The group's capacity was decremented for it: left in Standby, it is never counted or replaced again.
        return step.plan(finalized=False)
    if step.node is None and not node_gone(step.observed) and may_hold(step.status, step.spec):
        # Missing from this request and not readable: its taint may still be on; only a 404 proves it gone.
        step.recovery["lastError"] = step.observed.get("nodeError") or \
            f"Node {step.spec.node_name} was not in the request and could not be looked up"
        step.resync(backoff(step.settings, 1))
        return step.plan(finalized=False)
    if not ours_to_remove(step.status, step.spec, step.node):
        return step.plan(finalized=True)
    if step.observed.get("holdersError"):
        # Another request may still count on the taint: not knowing is not "no one".
        step.recovery["lastError"] = f"cannot list FencingRequests: {step.observed['holdersError']}"
        step.resync(backoff(step.settings, 1))
        return step.plan(finalized=False)
    holders = step.observed.get("otherHolders") or []
    if holders:
        step.event("OutOfServiceTaintKept", f"Deleted half-way; the out-of-service taint stays for "
                                            f"{', '.join(holders)}")
        return step.plan(finalized=True)
    # Finalized only once the taint is off: a failed untaint keeps the request (and its finalizer).
    untaint(step, events.normal(events.OUT_OF_SERVICE_TAINT_REMOVED, f"FencingRequest deleted: out-of-service taint "
                                                                     f"removed from node {step.spec.node_name}"),
            Change(("finalized",), True))
    return step.plan(finalized=False)
