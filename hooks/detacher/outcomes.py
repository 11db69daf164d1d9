"""What a detach step's outcomes mean for the Node (pure): the error and a backoff for a failure, the detach
state kept for an incomplete re-attach, and a short look again for what was only put off."""
from __future__ import annotations

import datetime as dt

from hooks import bounds, detacher_names, timefmt
from hooks.config import Settings
from hooks.contract import HookRequest
from hooks.detacher import targets
from hooks.detacher.step import PUT_OFF_RESYNC_SECONDS, deletion_deadline_passed
from hooks.plan import PUT_OFF, Outcome, Plan, backoff, failure_text


def settle(request: HookRequest, plan: Plan, outcomes: list[Outcome], settings: Settings,
           now: dt.datetime) -> Plan:
    """What failed steps mean: the error on the node, a backoff, and for a re-attach, the detach state kept.

    A failed deregistration needs nothing here: it is recorded as deregistered
    only when it succeeds. The plan's Events are not sent: DetachFailed says it.
    One put off (PUT_OFF) is no failure: no error, no backoff, a look again soon.
    """
    unfinished = [o for o in outcomes if not o.ok]
    failed = [o for o in unfinished if o.code not in PUT_OFF]
    response = plan.response
    if deletion_deadline_passed(request, settings, now):
        # A deleting node is never held past its deadline.
        return Plan(dict(response, finalized=True), persist=plan.persist)
    annotations = dict(response.get("annotations") or {})
    for o in failed:
        if o.action.kind == "kube.label-node":
            # Not written by the hook: Metacontroller writes them, and the next call deregisters (nothing was
            # handed over, so nothing is said to be under way).
            response = dict(response, labels={**(response.get("labels") or {}), **o.action.params["labels"]})
            annotations.update({k: v for k, v in o.action.params["annotations"].items()
                                if k != detacher_names.DEREGISTERING_SINCE})
    if any(o.action.kind.endswith(".register") for o in unfinished):
        # Re-attach incomplete: keep detach state, remember what still needs registering.
        pending = {tuple(m) for o in unfinished for m in o.action.params.get("memberships", [])}
        response = dict(response, labels={}, status=None)
        annotations = {detacher_names.DEREGISTERED: targets.encode(pending),
                       detacher_names.REATTACH_FAILING_SINCE: request.annotations.get(detacher_names.REATTACH_FAILING_SINCE)
                       or timefmt.fmt(now),
                       **{k: v for k, v in annotations.items() if k in (detacher_names.FOR_POD, detacher_names.FOR_POD_SINCE)}}
        if "finalized" in response:
            response["finalized"] = False
    if not failed:
        resync = min(response.get("resyncAfterSeconds") or PUT_OFF_RESYNC_SECONDS, PUT_OFF_RESYNC_SECONDS)
        return Plan(dict(response, annotations=annotations, resyncAfterSeconds=resync), persist=plan.persist)
    attempt = bounds.counter(request.annotations, detacher_names.ATTEMPTS) + 1
    annotations[detacher_names.ERROR] = failure_text(outcomes)
    annotations[detacher_names.ATTEMPTS] = str(attempt)
    return Plan(dict(response, annotations=annotations, resyncAfterSeconds=backoff(settings, attempt)),
                persist=plan.persist)
