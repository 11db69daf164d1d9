"""The answer while the cluster is held: what remains, the last error, and the backoff while nothing moves.

Progress lives in annotations on the parent (hooks.teardown_names); a
problem is said as a Warning Event only when it differs from the one
recorded, so a stall repeats no Event.
"""
from __future__ import annotations

import datetime as dt

from hooks import events, timefmt
from hooks.config import Settings
from hooks.contract import HookRequest, decorator_response
from hooks.plan import Outcome, Plan
from hooks.teardown_names import KEEP_IN_USE, LAST_ERROR, PROGRESS_ANNOTATIONS, REMAINING, STALLED_SINCE
from hooks.teardown.scope import Scope
from hooks.teardown.targets import Target, summarize

_MESSAGE_LIMIT = 1024


def _why_waiting(target: Target) -> str:
    """The state that holds a target (``in-use``, ``associated``, ``shutting-down``), or the reason."""
    return (target.state or "unknown") if target.waiting == KEEP_IN_USE else target.waiting


def cleared() -> dict:
    """Our progress annotations removed: the cluster is let go."""
    return {key: None for key in PROGRESS_ANNOTATIONS}


def stall(request: HookRequest, settings: Settings, now: dt.datetime, message: str) -> tuple[dict, float]:
    """Annotations and resync while nothing moves: the wait doubles with the time stalled."""
    since = timefmt.parse(request.annotations.get(STALLED_SINCE))
    if since is None or since > now:  # ours, but anyone can write it: a future one would pin the backoff
        since = now
    elapsed = max(0.0, (now - since).total_seconds())
    resync = min(settings.error_backoff_max_seconds, max(settings.error_backoff_seconds, elapsed))
    return {LAST_ERROR: message[:_MESSAGE_LIMIT], STALLED_SINCE: timefmt.fmt(since)}, resync


def blocked(request: HookRequest, settings: Settings, now: dt.datetime, message: str, reason: str) -> Plan:
    """Hold the cluster until ``message``'s cause is fixed; a Warning ``reason`` when the message is new."""
    annotations, resync = stall(request, settings, now, message)
    said = []
    if request.annotations.get(LAST_ERROR) != annotations[LAST_ERROR]:
        said.append(events.warning(reason, message))
    return Plan(decorator_response(annotations=annotations, resync_after=resync, finalized=False), events=said)


def progress_response(
    request: HookRequest,
    settings: Settings,
    now: dt.datetime,
    scope: Scope,
    targets: list[Target],
    done: set[tuple[str, str]],
    failures: list[Outcome],
    throttled: bool = False,
) -> tuple[dict, list[events.Event]]:
    """The response after deleting ``done`` (and failing ``failures``) of ``targets``, plus its Events.

    ``throttled``: AWS asked to slow down in this call, so the backoff applies even after progress.
    """
    left = [t for t in targets if t.key not in done]
    waiting = [t for t in left if not t.deletable]
    problem = ""
    if failures:
        first = failures[0]
        problem = f"{len(failures)} not deleted; first: {first.action.params['kind']} {first.action.target}: {first.error}"
    elif waiting:
        states = ", ".join(f"{t.kind} {t.id} ({_why_waiting(t)})" for t in waiting[:5])
        problem = f"waiting for {len(waiting)} resource(s) to be free: {states}"
    annotations: dict = {REMAINING: summarize(left)}
    said: list[events.Event] = []
    if done:
        deleted = summarize([t for t in targets if t.key in done]).replace("=", " ")
        said.append(
            events.normal(events.EXTERNAL_RESOURCES_DELETED, f"deleted {len(done)} ({deleted}); remaining: {annotations[REMAINING]}")
        )
    if problem and (throttled or not done):
        stalled, resync = stall(request, settings, now, problem)
        annotations.update(stalled)
        if done:  # throttled after some progress: slow down, but the stall starts now
            annotations[STALLED_SINCE] = timefmt.fmt(now)
            resync = settings.error_backoff_seconds
    else:
        annotations.update({LAST_ERROR: problem or None, STALLED_SINCE: None})
        resync = settings.gc_progress_resync_seconds
    if problem and request.annotations.get(LAST_ERROR) != annotations[LAST_ERROR]:
        said.append(events.warning(events.GC_RETRYING, problem))
    return decorator_response(annotations=annotations, resync_after=resync, finalized=False), said
