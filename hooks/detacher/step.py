"""What every phase of a detach step shares (pure): its clocks, its failure and deadline, the writes that
come before the calls they announce, and the batched (de)registrations."""
from __future__ import annotations

import datetime as dt

from hooks import bounds, detacher_names, events, timefmt
from hooks.config import Settings
from hooks.contract import HookRequest, decorator_response
from hooks.detacher import targets
from hooks.detacher.assess import LANDED_SECONDS, Situation
from hooks.plan import Action, Change, Plan, backoff

# Look again this soon after the exclude step: by then its background deregistrations have usually been
# recorded; if not (they failed, or their process went), the deregister step makes them within the call.
LABEL_SETTLE_SECONDS = 1.0
# A (de)registration goes out within this long of the call that decided it on the Node it read, or not at all
# (elb.NotSent): one held up on the way (a busy target group, a slow AWS) never goes out long after the node
# may have come back, or begun to leave again. Shorter than deregister.BACKGROUND_GRACE_SECONDS, so none of
# the exclude step's calls still goes out once the deregister step may make them itself.
SEND_SECONDS = 5.0
# A step whose calls were only put off (not sent before their deadline, still waiting to go out in the
# background, or a look-up this process's rate-limit share had no token for) is looked at again this soon:
# within a waiting call's deadline to go out, so the Node's next reading renews its place in the call.
PUT_OFF_RESYNC_SECONDS = SEND_SECONDS / 2
# Every call decided before a re-attach has landed this long after it: sent within SEND_SECONDS of its
# decision and answered within elb.CALL_SECONDS, with room for two processes' clocks, timestamps to the second
# and the re-attach's own read of the Node (hooks.detacher.assess, which a detach's steps wait on).
REJOIN_AFTER_SECONDS = LANDED_SECONDS


def clear_error(annotations: dict, request: HookRequest) -> None:
    for key in (detacher_names.ERROR, detacher_names.ATTEMPTS):
        if key in request.annotations:
            annotations[key] = None


def deletion_deadline_passed(request: HookRequest, settings: Settings, now: dt.datetime) -> bool:
    """A deleting node is held at most NODEWARDEN_FINALIZE_DRAIN_TIMEOUT_SECONDS, whatever fails meanwhile."""
    if not request.finalizing:
        return False
    starts = [t for t in (timefmt.parse(request.meta.get("deletionTimestamp")),
                          timefmt.parse(request.annotations.get(detacher_names.SINCE))) if t is not None]
    return bool(starts) and (now - min(starts)).total_seconds() >= settings.finalize_drain_timeout_seconds


def released(message: str, attachments: list[dict]) -> Plan:
    """A deleting node let go at its deadline: the node is leaving whatever is left undone."""
    return Plan(decorator_response(attachments=attachments, finalized=True),
                events=[events.warning(events.DETACH_ABANDONED,
                                       f"Deadline for a deleting node passed; letting it go: {message}")])


def failure(request: HookRequest, settings: Settings, now: dt.datetime, message: str, attachments: list[dict],
            **extra) -> Plan:
    """A step that cannot proceed yet: say why on the node and retry with backoff."""
    if deletion_deadline_passed(request, settings, now):
        return released(message, attachments)
    attempt = bounds.counter(request.annotations, detacher_names.ATTEMPTS) + 1
    annotations = {detacher_names.ERROR: message, detacher_names.ATTEMPTS: str(attempt), **extra}
    return Plan(
        decorator_response(
            annotations=annotations,
            attachments=attachments,
            resync_after=backoff(settings, attempt),
            finalized=False if request.finalizing else None,
        ),
        events=[events.warning(events.DETACH_FAILED, message)],
    )


def written_first(request: HookRequest, attachments: list[dict], annotations: dict) -> Plan:
    """``annotations`` written on the Node by the hook itself, tested against its uid, before any call they
    announce; the next call (brought at once by the write) makes the calls."""
    finalized = False if request.finalizing else None
    uid = request.meta.get("uid")
    if not uid:
        return Plan(decorator_response(annotations=annotations, attachments=attachments,
                                       resync_after=LABEL_SETTLE_SECONDS, finalized=finalized))
    return Plan(decorator_response(attachments=attachments, resync_after=LABEL_SETTLE_SECONDS, finalized=finalized),
                [Action("kube.annotate-node", request.name, {"annotations": annotations, "uid": uid})])


def membership_actions(verb: str, memberships, sit: Situation, record: bool = False,
                       background: bool = False, send_by: dt.datetime | None = None,
                       carry_on: bool = False) -> list[Action]:
    """One batched (de)register call per target group or classic ELB, with every port of the instance; each
    goes out by ``send_by`` or not at all. ``carry_on``: a target-group call that waits to go out is carried
    on after the call (hooks.plan)."""
    actions = []
    deadline = {"sendBy": timefmt.fmt(send_by)} if send_by is not None else {}
    for (lb_type, lb), ports in targets.group_by_load_balancer(memberships).items():
        covered = [m for m in memberships if (m[0], m[1]) == (lb_type, lb)]
        actions.append(Action(
            f"{'elbv2' if lb_type == 'tg' else 'elb'}.{verb}", lb,
            {"instance": sit.instance_id, "region": sit.region, "ports": ports,
             "memberships": [list(m) for m in covered], **deadline},
            record=(Change(("annotations", detacher_names.DEREGISTERED), union=tuple(covered)),) if record else (),
            background=background, carry_on=carry_on and lb_type == "tg"))
    return actions
