"""An unreadable spec is reported on the request itself, once, and nothing is done."""
from __future__ import annotations

import datetime as dt

from hooks import conditions, events, fencing_names, timefmt
from hooks.contract import HookRequest, RequestError, composite_response
from hooks.fencing.request_phases.state import observed_generation, own_status
from hooks.plan import Plan


def invalid_spec(request: HookRequest, now: dt.datetime, problem: RequestError) -> Plan:
    status = own_status(request.parent)
    status["observedGeneration"] = observed_generation(request)
    if request.finalizing:
        return Plan(composite_response(status=status, finalized=True))
    said = []
    if status.get("phase") not in fencing_names.FINISHED_PHASES:
        stamp = timefmt.fmt(now)
        status.update(phase=fencing_names.FAILED, errorReason="InvalidSpec", errorMessage=str(problem), completionTime=stamp)
        status, _ = conditions.set(status, fencing_names.FAILED_CONDITION, "True", "InvalidSpec", str(problem), stamp)
        said.append(events.warning(events.FENCING_FAILED, f"InvalidSpec: {problem}"))
    return Plan(composite_response(status=status), events=said)
