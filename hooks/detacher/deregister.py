"""The deregister phase (pure): with the exclude label on, one batched call per target group / classic ELB
for every membership the exclude step's background calls did not record as left."""
from __future__ import annotations

import datetime as dt

from hooks import detacher_names, events, timefmt
from hooks.contract import HookRequest, decorator_response
from hooks.detacher import targets
from hooks.detacher.assess import Situation
from hooks.detacher.attachment import desired
from hooks.detacher.step import (LABEL_SETTLE_SECONDS, PUT_OFF_RESYNC_SECONDS, SEND_SECONDS, clear_error,
                                 deletion_deadline_passed, failure, membership_actions, written_first)
from hooks.plan import Action, Plan

# How long after the exclude step its background deregistrations are taken to be under way: a deregister step
# within it waits for their record instead of making the same calls again (the label write's own watch event
# brings that step at once). Past it, the step makes what is unrecorded itself, where failures are reported.
BACKGROUND_GRACE_SECONDS = 10.0


def left(sit: Situation, attachments: list[dict]) -> tuple[list, set, list]:
    """The memberships the desired Attachment lists, those recorded as deregistered, and those left to go."""
    memberships = targets.from_attachment_spec(attachments[0]["spec"]) if attachments else []
    done = set(sit.deregistered or ())
    return memberships, done, [m for m in memberships if m not in done]


def deregistered_event(sit: Situation, actions: list[Action]) -> events.Event:
    return events.normal(events.DEREGISTERED, f"Deregistered {sit.instance_id} from {len(actions)} load balancer(s)")


def deregister(request, sit, settings, now, observed) -> Plan:
    attachments = desired(request, sit, settings, observed)
    if sit.instance_id is None:
        if request.finalizing:  # nothing we can act on; never hold a deletion forever
            return Plan(decorator_response(attachments=[], finalized=True),
                        events=[events.normal(events.DETACH_SKIPPED, f"cannot detach: {sit.provider_error}")])
        return failure(request, settings, now, f"cannot detach: {sit.provider_error}", attachments)
    if observed.get("discoveryPutOff") and not deletion_deadline_passed(request, settings, now):
        # Not asked: this process's share of the bucket had no token in time. No failure, no backoff.
        return Plan(decorator_response(attachments=attachments, resync_after=PUT_OFF_RESYNC_SECONDS,
                                       finalized=False if request.finalizing else None))
    if observed.get("discoveryError"):
        return failure(request, settings, now, f"load balancer discovery failed: {observed['discoveryError']}",
                       attachments)
    memberships, done, pending = left(sit, attachments)
    handed = timefmt.seconds_since(request.annotations.get(detacher_names.DEREGISTERING_SINCE), now)
    if pending and handed is not None and 0 <= handed < BACKGROUND_GRACE_SECONDS \
            and not deletion_deadline_passed(request, settings, now):
        # The exclude step's calls are under way, in this process or another: their record comes within
        # seconds. (The annotation can only delay this step; the calls themselves are the exclude step's.)
        # Its Attachment is not asked for again while Metacontroller's cache may not show it yet: created
        # twice, the second create fails the whole sync.
        return Plan(decorator_response(attachments=attachments if sit.attachment is not None else [],
                                       resync_after=LABEL_SETTLE_SECONDS,
                                       finalized=False if request.finalizing else None))
    listed = set(sit.deregistering)
    if any(m not in listed for m in pending):
        return list_before_leaving(request, attachments, listed | set(pending))
    # Each recorded as deregistered only once its call succeeded; the record is
    # written by this call, so a conflict on Metacontroller's write cannot lose it. A group's call that must
    # wait for its turn or its token (a wave of nodes leaving, AWS's budget spent) is carried on after the
    # call and recorded when it answers: the hook server's threads go on to the other nodes meanwhile, which
    # join the same calls.
    actions = membership_actions("deregister", pending, sit, record=True, carry_on=True,
                                 send_by=now + dt.timedelta(seconds=SEND_SECONDS))
    annotations = {detacher_names.DEREGISTERED: targets.encode(done | (set(memberships) - set(pending)))}
    clear_error(annotations, request)
    said = [deregistered_event(sit, actions)]
    return Plan(
        decorator_response(
            annotations=annotations,
            attachments=attachments,
            resync_after=settings.drain_poll_seconds,
            finalized=False if request.finalizing else None,
        ),
        actions,
        said,
        persist=(detacher_names.DEREGISTERED,),
    )


def list_before_leaving(request: HookRequest, attachments: list[dict], listed: set) -> Plan:
    """Memberships about to leave that the Node does not list yet (looked up again at this step) are written
    on it first, by the hook itself; the next call deregisters them. So a re-attach knows every membership a
    call may have taken out, whatever becomes of the call, its record or its process."""
    return written_first(request, attachments, {detacher_names.DEREGISTERING: targets.encode(listed)})
