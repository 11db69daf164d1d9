"""The reattach phase (pure): schedulable again, the node is put back as it was. What is about to be
registered is written on the Node first, then exactly what was deregistered is registered, and what is ours
comes off (label, taint, condition, annotations); it waits first while kube-controller-manager is about to
write the Node."""
from __future__ import annotations

import datetime as dt

from hooks import conditions, events, fields, timefmt
from hooks.config import Settings
from hooks.contract import HookRequest, decorator_response
from hooks.detacher import names, targets
from hooks.detacher.assess import Situation, began_before_registering
from hooks.detacher.attachment import desired
from hooks.detacher.step import REJOIN_AFTER_SECONDS, SEND_SECONDS, failure, membership_actions, written_first
from hooks.plan import Action, Plan

# Pause before looking again for kube-controller-manager's unschedulable taint.
TAINT_SETTLE_SECONDS = 0.2


def unschedulable_taint_pending(node: dict) -> bool:
    """spec.unschedulable and kube-controller-manager's taint disagree: the controller has yet to write the Node."""
    unschedulable = fields.mapping(node, "spec").get("unschedulable") is True
    tainted = any(t.get("key") == names.UNSCHEDULABLE_TAINT for t in fields.objects(node, "spec", "taints"))
    return unschedulable != tainted


def waiting_for_taint(request: HookRequest, sit: Situation, settings: Settings, observed: dict) -> Plan | None:
    """The plan that waits while kube-controller-manager is about to write this Node (its unschedulable
    taint), for at most NODEWARDEN_UNSCHEDULABLE_TAINT_WAIT_SECONDS since this process first saw it pending:
    a write of ours now would be refused as a conflict and redone. None when the re-attach goes ahead."""
    waited = observed.get("unschedulableTaintPendingSeconds")
    if waited is None or waited >= settings.unschedulable_taint_wait_seconds:
        return None
    return Plan(decorator_response(attachments=desired(request, sit, settings, observed),
                                   resync_after=TAINT_SETTLE_SECONDS,
                                   finalized=False if request.finalizing else None))


def listed_to_join(request: HookRequest, sit: Situation, joining: list) -> bool:
    """Whether the Node lists ``joining`` in nodewarden.io/rejoin, written since the detach on record began."""
    since = timefmt.parse(request.annotations.get(names.SINCE))
    return set(joining) <= set(sit.rejoin) and sit.registering_since is not None \
        and (since is None or began_before_registering(since, sit.registering_since))


def list_before_joining(request: HookRequest, attachments: list[dict], joining: list, now: dt.datetime) -> Plan:
    """What is about to be registered is written on the Node first, with rejoin-at; the next call registers
    it. So a call that finds the node leaving again, whatever became of this re-attach's call and its answer,
    knows registrations may have been sent since the detach on record began: that detach is over, a new one
    begins, and its drain waits until they have landed (hooks.detacher.assess)."""
    return written_first(request, attachments, {
        names.REJOIN: targets.encode(joining),
        names.REJOIN_AT: timefmt.fmt(now + dt.timedelta(seconds=REJOIN_AFTER_SECONDS))})


def reattach(request, sit, settings, now, observed) -> Plan:
    attachments = desired(request, sit, settings, observed)
    deregistered = set(sit.deregistered or ())
    if request.annotations.get(names.SINCE):
        # A deregistration may have happened whose record never landed (Metacontroller's
        # Node update lost a race with the uncordon): restore all the frozen Attachment
        # lists too. Registering a registered target changes nothing.
        deregistered |= set(sit.memberships or ())
    # What was said to be about to leave (a call may have taken it out whatever became of its record), and
    # what an earlier re-attach still had to register once more.
    deregistered |= set(sit.deregistering) | set(sit.rejoin)
    deregistered = sorted(deregistered)
    actions = []
    said = []
    failing_for = timefmt.seconds_since(request.annotations.get(names.REATTACH_FAILING_SINCE), now)
    if failing_for is not None and failing_for >= settings.reattach_timeout_seconds:
        # Holding our exclude label any longer would keep the node out of every
        # load balancer for good; the controllers that register nodes take it from here.
        deregistered = []
        said.append(events.warning(events.REATTACH_ABANDONED,
                                   f"Re-attaching failed for {failing_for:.0f}s "
                                   f"({request.annotations.get(names.ERROR, 'unknown error')}); our exclude label "
                                   "comes off and the load balancers' own controllers register the node"))
    if deregistered and sit.instance_id is None:
        return failure(request, settings, now, f"cannot re-attach: {sit.provider_error}", attachments)
    if deregistered and not listed_to_join(request, sit, deregistered):
        return list_before_joining(request, attachments, deregistered, now)
    actions.extend(membership_actions("register", deregistered, sit,
                                      send_by=now + dt.timedelta(seconds=SEND_SECONDS)))
    if any(t.get("key") == names.DETACHING_TAINT for t in fields.objects(request.parent, "spec", "taints")):
        actions.append(Action("kube.untaint", request.name, {"key": names.DETACHING_TAINT}))
    labels = {names.EXCLUDE_LABEL: None} if request.labels.get(names.EXCLUDE_LABEL) == names.EXCLUDE_VALUE else {}
    annotations = {key: None for key in names.OUR_ANNOTATIONS + names.REJOIN_ANNOTATIONS if key in request.annotations}
    if deregistered:
        # A deregistration sent before this call may still land after these registrations (held up on the
        # way; its record and its process may be gone by then): all of it is registered once more when none
        # can still land.
        annotations.update({names.REJOIN: targets.encode(deregistered),
                            names.REJOIN_AT: timefmt.fmt(now + dt.timedelta(seconds=REJOIN_AFTER_SECONDS))})
    status, changed = conditions.remove(fields.mapping(request.parent, "status"), names.CONDITION)
    registered = sum(1 for a in actions if a.kind.endswith(".register"))
    said.append(events.normal(events.REATTACHED, f"Registered again with {registered} load balancer(s)"
                              if registered else "Back in service"))
    # A node leaving our selector is let go only after its rejoin: no call of ours would come after.
    finalized = not deregistered if request.finalizing else None
    return Plan(
        decorator_response(labels=labels, annotations=annotations, status=status if changed else None,
                           attachments=attachments, resync_after=REJOIN_AFTER_SECONDS if deregistered else None,
                           finalized=finalized),
        actions,
        said,
    )
