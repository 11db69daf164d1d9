"""The exclude phase (pure): a detach begins. The exclude label and the detach's annotations go on, written
by the hook itself so the label lands before any deregistration and no controller registers the node again;
the deregistrations follow in the background, recorded as they succeed."""
from __future__ import annotations

import datetime as dt
import logging

from hooks import events, timefmt
from hooks.contract import decorator_response
from hooks.detacher import names, targets
from hooks.detacher.assess import began_before_registering
from hooks.detacher.attachment import desired
from hooks.detacher.deregister import deregistered_event, left
from hooks.detacher.step import LABEL_SETTLE_SECONDS, SEND_SECONDS, membership_actions
from hooks.plan import Action, Plan

log = logging.getLogger(__name__)


def exclude(request, sit, settings, now, observed) -> Plan:
    reasons = ",".join(sit.reasons)
    labels = {} if names.EXCLUDE_LABEL in request.labels else {names.EXCLUDE_LABEL: names.EXCLUDE_VALUE}
    annotations = {
        names.DETACHING: "true",
        names.SINCE: request.annotations.get(names.SINCE) or timefmt.fmt(now),
        names.REASON: reasons,
    }
    if began_before_registering(timefmt.parse(request.annotations.get(names.SINCE)), sit.registering_since):
        # The detach on record began before a re-attach began registering: it is over. This one begins after
        # those registrations were decided, and what the other recorded as left, or drained, is not so now.
        annotations.update({names.SINCE: timefmt.fmt(max(now, sit.registering_since + dt.timedelta(seconds=1))),
                            names.DEREGISTERED: None, names.DETACHED_AT: None})
    if observed.get("discoveryError"):
        # The label goes on all the same: the node must stop taking traffic. Its load balancers are looked
        # up again at the next step (those of the controllers that drop it on the label may be gone by then).
        log.warning("discovery failed as the detach began", extra={"node": request.name,
                                                                    "error": observed["discoveryError"]})
    attachments = desired(request, sit, settings, observed)
    said = [events.normal(events.DETACHING, f"Leaving load balancers: {reasons}")]
    response = decorator_response(attachments=attachments, resync_after=LABEL_SETTLE_SECONDS,
                                  finalized=False if request.finalizing else None)
    memberships, done, pending = left(sit, attachments)
    if pending:  # with the label, before any of them is sent
        annotations[names.DEREGISTERING] = targets.encode(set(sit.deregistering) | set(pending))
    uid = request.meta.get("uid")
    if not uid:  # no Node to write by uid: Metacontroller writes the label, the next call deregisters
        return Plan(dict(response, labels=labels, annotations=annotations), events=said)
    # The hook writes the label itself (checked against the Node it read, retried on a conflict), so the
    # deregistrations may follow at once instead of one pass through Metacontroller's queue later. Nothing
    # else is left for Metacontroller to write on the Node in this call: its update, made from the Node as
    # its cache had it, would conflict with ours.
    deregistrations = membership_actions("deregister", pending, sit, record=True, background=True,
                                         send_by=now + dt.timedelta(seconds=SEND_SECONDS)) \
        if sit.instance_id is not None else []
    if deregistrations:  # said with the label, so the next step knows they are under way
        annotations[names.DEREGISTERING_SINCE] = timefmt.fmt(now)
    elif sit.instance_id is not None and observed.get("discovery") is not None:
        # Looked up, and in no load balancer not already left: recorded with the label, so no deregister step
        # (a sync and a write) follows for nothing. Never when the look-up failed: unknown is not none.
        annotations[names.DEREGISTERED] = targets.encode(done | set(memberships))
    # What the call read of the Node (the API server's copy once verified): the write is tested against it.
    seen = {key: request.meta.get(key) for key in ("uid", "resourceVersion", "labels", "annotations")}
    actions = [Action("kube.label-node", request.name, {"labels": labels, "annotations": annotations, "uid": uid,
                                                        "seen": seen})]
    background_said = [deregistered_event(sit, deregistrations)] if deregistrations else []
    return Plan(response, actions + deregistrations, said, background_events=background_said)
