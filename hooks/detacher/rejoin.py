"""The rejoin phase (pure): back in service, what the re-attach registered is registered once more when no
deregistration sent before it can still land, then forgotten once that registration has landed."""
from __future__ import annotations

import datetime as dt

from hooks import events, timefmt
from hooks.contract import decorator_response
from hooks.detacher import names
from hooks.detacher.assess import rejoin_at
from hooks.detacher.step import REJOIN_AFTER_SECONDS, SEND_SECONDS, clear_error, membership_actions
from hooks.plan import Plan


def rejoin(request, sit, settings, now, observed) -> Plan:
    """Back in service: once no deregistration sent before the re-attach can still land, what it registered
    is registered once more (a target that is in stays as it is), and forgotten; rejoin-at stays until these
    registrations have landed, so a detach beginning meanwhile waits for them."""
    due = rejoin_at(request.annotations, now)
    if due is not None and now < due:
        return Plan(decorator_response(attachments=[], resync_after=(due - now).total_seconds(),
                                       finalized=False if request.finalizing else None))
    annotations = {key: None for key in names.REJOIN_ANNOTATIONS if key in request.annotations}
    clear_error(annotations, request)
    said = []
    if sit.rejoin and sit.instance_id is None:
        said.append(events.warning(events.REATTACH_ABANDONED, f"cannot register again: {sit.provider_error}"))
    actions = membership_actions("register", sit.rejoin, sit, send_by=now + dt.timedelta(seconds=SEND_SECONDS)) \
        if sit.instance_id is not None else []
    if actions and not request.finalizing:  # a node leaving our selector: no detach of ours comes after
        annotations[names.REJOIN_AT] = timefmt.fmt(now + dt.timedelta(seconds=REJOIN_AFTER_SECONDS))
        return Plan(decorator_response(annotations=annotations, attachments=[], resync_after=REJOIN_AFTER_SECONDS),
                    actions, said)
    return Plan(decorator_response(annotations=annotations, attachments=[],
                                   finalized=True if request.finalizing else None), actions, said)
