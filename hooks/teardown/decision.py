"""One finalize call's plan, from the request and what discovery found.

sync changes nothing: the parent's status is CAPA's. A deletion is first
confirmed with the API server, and every decision after that reads the
fresh copy. Then: skip (finalize at once), block (hold, say why), or collect:
``finalized: true`` only when nothing of the selected tasks is left (but what
was not free after the wait limit, hooks.teardown.progress), else the
deletes of this call and the answer if they all succeed (the controller's
settle redoes it from the outcomes).
"""
from __future__ import annotations

import datetime as dt

from hooks import events
from hooks.config import Settings
from hooks.contract import HookRequest, decorator_response
from hooks.plan import Plan
from hooks.teardown.progress import blocked, cleared, give_up_waiting, left_in_place, progress_response
from hooks.teardown.scope import BLOCKED, SKIP, awaits_verification, resolve_scope, scope_of
from hooks.teardown.targets import plan_deletes, select_targets, still_collected


def decide(request: HookRequest, settings: Settings, now: dt.datetime, observed: dict) -> Plan:
    """The plan of this call; a collecting one carries ``basis=(scope, targets)`` for settle."""
    if not request.finalizing:
        return Plan(decorator_response())  # sync: nothing to change while the cluster lives
    if awaits_verification(request, settings):
        resolve_scope(request, settings)  # a body with a mistyped field is a 400, before anything is asked
        # Every decision (a move, the opt-out, the tasks, the name, the region)
        # is taken from the API server's copy, never from the body.
        return Plan(decorator_response(finalized=False), verify=True)
    scope = scope_of(request, settings)
    if scope.decision == SKIP:
        said = [events.normal(events.GC_SKIPPED, scope.reason)] if scope.reason else []
        return Plan(decorator_response(annotations=cleared(), finalized=True), events=said)
    if scope.decision == BLOCKED:
        return blocked(request, settings, now, scope.reason, events.GC_BLOCKED)
    found = observed.get("discovery") or {"error": "discovery did not run"}
    if found.get("error"):
        return blocked(request, settings, now, f"discovery failed: {found['error']}", events.GC_RETRYING)
    targets = give_up_waiting(request, settings, now, select_targets(scope, found, now))
    if not still_collected(targets):
        if targets:  # only what it gave up waiting for
            said = events.warning(events.EXTERNAL_RESOURCES_LEFT, f"{left_in_place(settings, targets)}; finalized")
        else:
            said = events.normal(events.RESOURCES_COLLECTED, (
                f"nothing of cluster {scope.cluster_name}'s {', '.join(scope.tasks)} left in {scope.region} "
                f"(found by {found.get('method', '?')}); finalized"))
        return Plan(decorator_response(annotations=cleared(), finalized=True), events=[said])
    actions = plan_deletes(targets, scope, settings)
    # The response and Events if every delete succeeds; settle() redoes them
    # from the outcomes when one did not.
    planned = {(a.params["kind"], a.target) for a in actions}
    response, notices = progress_response(request, settings, now, scope, targets, planned, [])
    return Plan(response, actions, notices, basis=(scope, targets))
