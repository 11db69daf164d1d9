"""The drain phase (pure): NodeBeingDetached=True, then wait until every target the node left is gone or
'unused', read only once no registration of ours sent before can still land; one read registered again is
deregistered again. The shutdown phase holds its evictions on the same reading."""
from __future__ import annotations

import datetime as dt

from hooks import conditions, detacher_names, events, fields, timefmt
from hooks.config import Settings
from hooks.contract import HookRequest, decorator_response
from hooks.detacher import targets
from hooks.detacher.assess import Situation
from hooks.detacher.attachment import desired
from hooks.detacher.step import SEND_SECONDS, clear_error, deletion_deadline_passed, failure, membership_actions
from hooks.plan import Plan
from hooks.target_states import GONE_STATES, IN_SERVICE_STATES, UNREAD

_REASONS = {
    "cordoned": "Cordoned",
    "deleting": "NodeDeleting",
    "daemonset-pod": "DaemonSetPodTerminating",
    "annotation": "DetachRequested",
}


def detaching_status(request: HookRequest, sit: Situation, now: dt.datetime) -> dict | None:
    """The Node's status with NodeBeingDetached=True, or None when it already says so. Written once per
    detach, not per reason (every Node status write races the kubelet's), and in a step where the hook
    writes nothing on the Node itself, which Metacontroller's status write would conflict with."""
    node_status = fields.mapping(request.parent, "status")
    if conditions.is_true(node_status, detacher_names.CONDITION):
        return None
    reasons = ",".join(sit.reasons)
    status, _ = conditions.set(node_status, detacher_names.CONDITION, "True", _REASONS.get(sit.reasons[0], "LeavingTaint"),
                               f"node-detacher is taking the node out of its load balancers ({reasons})",
                               timefmt.fmt(now), heartbeat=True)
    return status


def drain_waited(request: HookRequest, settings: Settings, now: dt.datetime) -> tuple[float, bool]:
    """How long the node has been leaving, and whether the wait for its targets to drain is over."""
    waited = timefmt.seconds_since(request.annotations.get(detacher_names.SINCE), now) or 0
    limit = settings.finalize_drain_timeout_seconds if request.finalizing else settings.drain_timeout_seconds
    return waited, waited >= limit or deletion_deadline_passed(request, settings, now)


def read_states(sit: Situation, observed: dict) -> dict[tuple, str]:
    """The state each membership the node left was read in (UNREAD when there is no reading of it)."""
    states = observed.get("targetStates") or {}
    return {m: states.get(targets.state_key(m), UNREAD) for m in sit.deregistered or ()}


def in_service(read: dict[tuple, str]) -> list[tuple]:
    return sorted(m for m, state in read.items() if state in IN_SERVICE_STATES)


def deregister_again(request: HookRequest, sit: Situation, settings: Settings, now: dt.datetime,
                     serving: list[tuple], status: dict | None, attachments: list[dict]) -> Plan:
    """Memberships the node left, read registered again since (a registration of ours that landed late,
    another process's, a controller's that saw the node before its exclude label): out again at once, decided
    on the Node read again right before, rather than waited for as draining; no pod is evicted meanwhile."""
    actions = membership_actions("deregister", serving, sit, send_by=now + dt.timedelta(seconds=SEND_SECONDS),
                                 carry_on=True)
    said = [events.warning(events.DEREGISTERED, f"{sit.instance_id} was registered again with {len(actions)} load "
                                                "balancer(s) while leaving: deregistered again")]
    # A deleting node past its deadline is let go all the same: it is taken out on the way.
    finalized = True if deletion_deadline_passed(request, settings, now) else False if request.finalizing else None
    return Plan(decorator_response(status=status, attachments=attachments, resync_after=settings.drain_poll_seconds,
                                   finalized=finalized), actions, said)


def drain(request, sit, settings, now, observed) -> Plan:
    attachments = desired(request, sit, settings, observed)
    waited, timed_out = drain_waited(request, settings, now)
    # The deadline is checked first: it fires whatever error reading the state gives meanwhile.
    if observed.get("targetStatesError") and not timed_out:
        return failure(request, settings, now, f"reading target state failed: {observed['targetStatesError']}",
                       attachments)
    read = read_states(sit, observed) if not observed.get("targetStatesError") else {}
    status = detaching_status(request, sit, now)
    serving = in_service(read)
    if serving:  # whatever the time: a node in service is never let go to stop its pods
        return deregister_again(request, sit, settings, now, serving, status, attachments)
    land_by = sit.registrations_land_by
    if land_by is not None and now < land_by and not deletion_deadline_passed(request, settings, now):
        # A registration of ours sent before the detach began may still land: no reading taken before then
        # proves the node out. Read meanwhile, so one that lands is taken out at once.
        return Plan(decorator_response(status=status, attachments=attachments,
                                       resync_after=min(settings.drain_poll_seconds, (land_by - now).total_seconds()),
                                       finalized=False if request.finalizing else None))
    draining = sorted(targets.state_key(m) for m, state in read.items() if state not in GONE_STATES)
    if observed.get("targetStatesError"):
        draining = draining or ["(state unreadable)"]
    if draining and not timed_out:
        return Plan(decorator_response(status=status, attachments=attachments,
                                       resync_after=settings.drain_poll_seconds,
                                       finalized=False if request.finalizing else None))
    annotations = {detacher_names.DETACHED_AT: timefmt.fmt(now)}
    clear_error(annotations, request)
    message = "Every target finished draining" if not draining else \
        f"Gave up waiting for {len(draining)} draining target(s) after {waited:.0f}s"
    return Plan(
        decorator_response(annotations=annotations, status=status, attachments=attachments,
                           finalized=True if request.finalizing else None),
        events=[events.Event(events.DETACHED, message, warning=bool(draining))],
    )


def held_for_memberships(request: HookRequest, sit: Situation, settings: Settings, now: dt.datetime,
                         observed: dict, attachments: list[dict]) -> Plan | None:
    """No pod is evicted while a membership the node left is not read out, as read right before: one read in
    service is deregistered again, whatever the time; within the drain timeout, one draining, not read yet or
    unreadable is waited for. None when the pods may go."""
    _, timed_out = drain_waited(request, settings, now)
    if observed.get("targetStatesError") and not timed_out:
        return failure(request, settings, now, f"reading target state failed: {observed['targetStatesError']}",
                       attachments)
    read = read_states(sit, observed) if not observed.get("targetStatesError") else {}
    serving = in_service(read)
    if serving:
        return deregister_again(request, sit, settings, now, serving, None, attachments)
    if not timed_out and any(state not in GONE_STATES for state in read.values()):
        return Plan(decorator_response(attachments=attachments, resync_after=settings.drain_poll_seconds))
    return None
