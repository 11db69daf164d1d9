"""The answer while the cluster is held: what remains, the last error, the backoff while nothing moves, and
the limit on waiting for resources to be free.

Progress lives in annotations on the parent (hooks.teardown_names); a
problem is said as a Warning Event only when it differs from the one
recorded, so a stall repeats no Event.
"""
from __future__ import annotations

import dataclasses
import datetime as dt

from hooks import events, timefmt
from hooks.config import Settings
from hooks.contract import HookRequest, decorator_response
from hooks.plan import Outcome, Plan
from hooks.teardown_names import (KEEP_IN_USE, KEEP_REFUSED_IN_USE, LAST_ERROR, PROGRESS_ANNOTATIONS,
                                  REFUSED_IN_USE, REMAINING, STALLED_SINCE, WAITING_SINCE)
from hooks.teardown.scope import Scope
from hooks.teardown.targets import Target, on_the_way_out, still_collected, summarize

_MESSAGE_LIMIT = 1024


def _why_waiting(target: Target) -> str:
    """The state that holds a target (``in-use``, ``associated``, ``shutting-down``), or the reason."""
    if target.waiting == KEEP_REFUSED_IN_USE:
        return "refused as in use"
    return (target.state or "unknown") if target.waiting == KEEP_IN_USE else target.waiting


def _waiting_since(request: HookRequest, now: dt.datetime) -> dt.datetime:
    since = timefmt.parse(request.annotations.get(WAITING_SINCE))
    # ours, but anyone can write it: an unreadable or future one starts the wait now
    return now if since is None or since > now else since


# At most this many refusals are recorded (the annotation stays small); more wait all the same, uncounted.
_REFUSALS_KEPT = 100


def refused_in_use(request: HookRequest) -> set[tuple[str, str]]:
    """The targets AWS refused to delete as in use on the last call, as recorded (``kind/id``)."""
    raw = request.annotations.get(REFUSED_IN_USE)
    if not isinstance(raw, str):
        return set()
    found = set()
    for item in raw.split(",")[:_REFUSALS_KEPT]:
        kind, _, ident = item.strip().partition("/")
        if kind and ident:
            found.add((kind, ident))
    return found


def _as_waiting(targets: list[Target], refused: set[tuple[str, str]]) -> list[Target]:
    """``targets``, those AWS refused as in use counted as waited for (they are still tried)."""
    return [dataclasses.replace(t, waiting=KEEP_REFUSED_IN_USE) if t.deletable and t.key in refused else t
            for t in targets]


def give_up_waiting(request: HookRequest, settings: Settings, now: dt.datetime,
                    targets: list[Target]) -> list[Target]:
    """``targets``, those not free marked given up once the deletion has waited ``gc_wait_limit_seconds``.

    What holds a resource (an ENI attached, an Elastic IP associated, a volume attached, an instance
    shutting down) and is the cluster's goes first, in task order, and frees it within minutes; one still
    held after that long, or still refused by AWS as in use (a security group another cluster's load balancer
    uses, say), is held by something cluster-gc does not delete, which no wait frees. It is then
    left where it is and holds the cluster no more; one that frees later is still deleted while the cluster
    is held for anything else.
    """
    if not waited_out(request, settings, now):
        return targets
    weighed = _as_waiting(targets, refused_in_use(request))
    if on_the_way_out(weighed):
        return targets
    return [t if t.deletable else dataclasses.replace(t, given_up=True) for t in weighed]


def waited_out(request: HookRequest, settings: Settings, now: dt.datetime) -> bool:
    """The deletion has waited ``gc_wait_limit_seconds`` for resources to be free: what still is not is given
    up (give_up_waiting)."""
    return (now - _waiting_since(request, now)).total_seconds() >= settings.gc_wait_limit_seconds


def left_in_place(settings: Settings, targets: list[Target]) -> str:
    """The Warning of a deletion that lets the cluster go with resources it gave up waiting for."""
    given_up = [t for t in targets if t.given_up]
    states = ", ".join(f"{t.kind} {t.id} ({_why_waiting(t)})" for t in given_up[:10])
    more = f" and {len(given_up) - 10} more" if len(given_up) > 10 else ""
    return (f"left {len(given_up)} resource(s) not free after waiting {settings.gc_wait_limit_seconds:g} s, held by something "
            f"cluster-gc does not delete: {states}{more}; delete them once free")


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
    refused: frozenset[tuple[str, str]] = frozenset(),
) -> tuple[dict, list[events.Event]]:
    """The response after deleting ``done`` (and failing ``failures``) of ``targets``, plus its Events.

    ``throttled``: AWS asked to slow down in this call, so the backoff applies even after progress;
    ``refused``: the targets AWS refused to delete as in use in this call.
    """
    left = [t for t in targets if t.key not in done]
    given_up = [t for t in left if t.given_up]
    left = _as_waiting(still_collected(left), set(refused))
    waiting = [t for t in left if not t.deletable]
    moved = [o for o in failures if (o.action.params["kind"], o.action.target) not in refused]
    problem = ""
    if failures:
        first = failures[0]
        problem = f"{len(failures)} not deleted; first: {first.action.params['kind']} {first.action.target}: {first.error}"
    elif waiting:
        states = ", ".join(f"{t.kind} {t.id} ({_why_waiting(t)})" for t in waiting[:5])
        problem = f"waiting for {len(waiting)} resource(s) to be free: {states}"
    # The wait for what something else holds starts again while anything of the cluster's own goes (but not
    # for what giving up let go: that would bring back the wait just ended).
    moving = not given_up and (bool(done) or bool(moved) or on_the_way_out(left))
    waiting_since = now if moving else _waiting_since(request, now)
    kept_refusals = sorted(t.key for t in left if t.waiting == KEEP_REFUSED_IN_USE)[:_REFUSALS_KEPT]
    annotations: dict = {REMAINING: summarize(left),
                         WAITING_SINCE: timefmt.fmt(waiting_since) if waiting or given_up else None,
                         REFUSED_IN_USE: ",".join(f"{kind}/{ident}" for kind, ident in kept_refusals) or None}
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
