"""When a provisioning round may start: a batch window over the pods found unschedulable since the last round
(pure).

Pods of one rollout turn unschedulable over a few seconds; deciding for the
first alone would launch a Node per pod. The round waits while pods keep
arriving (the newest turned unschedulable less than ``idle`` seconds ago),
but never longer than ``maximum`` after the oldest, so a steady trickle
cannot hold it back. Only the pods that arrived since the last round count:
those still pending from before were decided then, and a pod pending for an
hour must not close the window at once for every newcomer.
"""
from __future__ import annotations

import datetime as dt
from typing import Iterable

from hooks.provisioning.pods import is_provisionable, unschedulable_since

IDLE_SECONDS = 1.0
MAXIMUM_SECONDS = 10.0


def _arrived_after(last_round: dt.datetime | None, now: dt.datetime) -> dt.datetime | None:
    """The earliest time a pod that arrived since ``last_round`` may say it turned unschedulable; None: every
    pod counts (no last round, or one ahead of ``now``, whose clock cannot be trusted).

    The API server keeps a condition's time in whole seconds, cut down: a pod that turned unschedulable in
    the second of the last round may have done so after it, so it counts as new."""
    if last_round is None or last_round > now:
        return None
    return last_round.replace(microsecond=0)


def window(pods: Iterable[dict], now: dt.datetime, idle: float = IDLE_SECONDS,
           maximum: float = MAXIMUM_SECONDS, last_round: dt.datetime | None = None) -> tuple[bool, float]:
    """(ready, seconds to wait before asking again) from the raw pods and the time of the last round; ready
    with nothing to wait for when no provisionable pod arrived since then (or says when it turned
    unschedulable)."""
    after = _arrived_after(last_round, now)
    ages = []
    for pod in pods:
        if is_provisionable(pod):
            since = unschedulable_since(pod)
            if since is not None and (after is None or since >= after):
                ages.append(max(0.0, (now - since).total_seconds()))  # a clock ahead of ours: just now
    if not ages:
        return True, 0.0
    newest, oldest = min(ages), max(ages)
    if newest >= idle or oldest >= maximum:
        return True, 0.0
    return False, min(idle - newest, maximum - oldest)
