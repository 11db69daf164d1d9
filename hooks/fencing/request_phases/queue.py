"""Queue: one node, one fence. A request waits while an older live request for the same node,
in any namespace, has not finished (or while that cannot be told), up to the queue timeout."""
from __future__ import annotations

from hooks import bounds, conditions, fencing_names, timefmt
from hooks.fencing.request_phases.state import Step, recorded
from hooks.plan import backoff


def queued(step: Step) -> bool:
    """True while an older live request for the same node goes first (or that cannot be known)."""
    if bounds.status_counter(recorded(step.status, "providerStatus"), "stopAttempts") or \
            step.status.get("phase") not in (None, fencing_names.PENDING):
        return False  # fencing in flight is never interrupted
    ahead = step.observed.get("olderRequests")
    if isinstance(ahead, list) and not ahead:
        if conditions.find(step.status, fencing_names.QUEUED_CONDITION):
            step.condition(fencing_names.QUEUED_CONDITION, "False", "First", "no other request fences the node")
        return False
    if isinstance(ahead, list):
        message = f"FencingRequest {', '.join(map(str, ahead))} fences node {step.spec.node_name} first"
    else:
        message = f"cannot tell whether another request fences node {step.spec.node_name}: " \
                  f"{step.observed.get('requestsError') or 'not looked up'}"
    waited = timefmt.seconds_since(step.status.get("startTime"), step.now) or 0
    if waited >= step.settings.fencing_queue_timeout_seconds:
        step.fail("AnotherFenceActive", f"{message}; gave up after waiting {waited:.0f}s")
        return True
    if (conditions.find(step.status, fencing_names.QUEUED_CONDITION) or {}).get("message") != message:
        step.event("FencingQueued", message)
    step.condition(fencing_names.QUEUED_CONDITION, "True", "AnotherFenceActive", message)
    step.resync(step.settings.fencing_resync_seconds if isinstance(ahead, list) else backoff(step.settings, 1))
    return True
