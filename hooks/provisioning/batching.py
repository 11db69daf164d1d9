"""When a provisioning round may start: a batch window over the pods found unschedulable (pure).

Pods of one rollout turn unschedulable over a few seconds; deciding for the
first alone would launch a Node per pod. The round waits while pods keep
arriving (the newest turned unschedulable less than ``idle`` seconds ago),
but never longer than ``maximum`` after the oldest, so a steady trickle
cannot hold it back.
"""
from __future__ import annotations

import datetime as dt
from typing import Iterable

from hooks.provisioning.pods import is_provisionable, unschedulable_since

IDLE_SECONDS = 1.0
MAXIMUM_SECONDS = 10.0


def window(pods: Iterable[dict], now: dt.datetime, idle: float = IDLE_SECONDS,
           maximum: float = MAXIMUM_SECONDS) -> tuple[bool, float]:
    """(ready, seconds to wait before asking again) from the raw pods; ready with nothing to wait for when
    no provisionable pod says when it turned unschedulable."""
    ages = []
    for pod in pods:
        if is_provisionable(pod):
            since = unschedulable_since(pod)
            if since is not None:
                ages.append(max(0.0, (now - since).total_seconds()))  # a clock ahead of ours: just now
    if not ages:
        return True, 0.0
    newest, oldest = min(ages), max(ages)
    if newest >= idle or oldest >= maximum:
        return True, 0.0
    return False, min(idle - newest, maximum - oldest)
