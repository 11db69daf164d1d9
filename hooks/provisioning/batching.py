"""When a provisioning round may start: a batch window over the pods found unschedulable since the last round
(pure).

Pods of one rollout turn unschedulable over a few seconds; deciding for the
first alone would launch a Node per pod. The round waits while pods keep
arriving (the newest turned unschedulable less than ``idle`` seconds ago),
but never longer than ``maximum`` after the oldest, so a steady trickle
cannot hold it back. Only the pods that arrived since the last round count:
those still pending from before were decided then, and a pod pending for an
hour must not close the window at once for every newcomer.

A round the maximum closed while pods still arrive holds back the new
Machines its newest pods would fill only a little (``held_back``): those pods
are planned again with the ones that follow, once at most.
"""
from __future__ import annotations

import datetime as dt
from typing import Iterable, Mapping, Sequence

from hooks.provisioning.pods import is_provisionable, unschedulable_since
from hooks.provisioning.scheduling import NewClaim

IDLE_SECONDS = 1.0
MAXIMUM_SECONDS = 10.0
# While pods still arrive, a new Machine filled less than this share of the largest it may be waits a round.
FULL_ENOUGH = 0.5


def _arrived_after(last_round: dt.datetime | None, now: dt.datetime) -> dt.datetime | None:
    """The earliest time a pod that arrived since ``last_round`` may say it turned unschedulable; None: every
    pod counts (no last round, or one ahead of ``now``, whose clock cannot be trusted).

    The API server keeps a condition's time in whole seconds, cut down: a pod that turned unschedulable in
    the second of the last round may have done so after it, so it counts as new."""
    if last_round is None or last_round > now:
        return None
    return last_round.replace(microsecond=0)


def _newcomers(pods: Iterable[dict], now: dt.datetime, last_round: dt.datetime | None,
               displaced: Mapping[str, dt.datetime]) -> dict[str, float]:
    """The provisionable pods that arrived since the last round ("namespace/name") -> seconds since they did.

    A pod arrives when it turns unschedulable, or again when the Machine made for it became ready and it is
    still pending (``displaced``: kube-scheduler bound others into its room): such pods are decided together
    too, not one round each as each Machine becomes ready."""
    after = _arrived_after(last_round, now)
    found = {}
    for pod in pods:
        if is_provisionable(pod):
            since = unschedulable_since(pod)
            meta = pod.get("metadata") or {}
            key = f"{meta.get('namespace') or 'default'}/{meta.get('name')}"
            again = displaced.get(key)
            if since is not None and again is not None and again > since:
                since = again
            if since is not None and (after is None or since >= after):
                found[key] = max(0.0, (now - since).total_seconds())  # a clock ahead of ours: just now
    return found


def window(pods: Iterable[dict], now: dt.datetime, idle: float = IDLE_SECONDS,
           maximum: float = MAXIMUM_SECONDS, last_round: dt.datetime | None = None,
           displaced: Mapping[str, dt.datetime] | None = None) -> tuple[bool, float]:
    """(ready, seconds to wait before asking again) from the raw pods and the time of the last round; ready
    with nothing to wait for when no provisionable pod arrived since then (or says when it turned
    unschedulable)."""
    ages = list(_newcomers(pods, now, last_round, displaced or {}).values())
    if not ages:
        return True, 0.0
    newest, oldest = min(ages), max(ages)
    if newest >= idle or oldest >= maximum:
        return True, 0.0
    return False, min(idle - newest, maximum - oldest)


def still_arriving(pods: Iterable[dict], now: dt.datetime, idle: float = IDLE_SECONDS,
                   last_round: dt.datetime | None = None,
                   displaced: Mapping[str, dt.datetime] | None = None) -> frozenset[str]:
    """When pods are still arriving as a round starts (the window closed on its maximum: the newest turned
    unschedulable less than ``idle`` ago), the pods that arrived since the last round, which the next round
    will see again with those that follow them; empty otherwise."""
    ages = _newcomers(pods, now, last_round, displaced or {})
    if not ages or min(ages.values()) >= idle:
        return frozenset()
    return frozenset(ages)


def held_back(claims: Sequence[NewClaim], fill: Mapping[int, float], arriving: frozenset[str],
              minimum: float = FULL_ENOUGH) -> list[int]:
    """Which of a round's new claims (by index) wait for the next round: while pods still arrive, a claim
    filled less than ``minimum`` of the largest Machine it may be (``fill``) and made only of pods that
    arrived since the last round is planned again with the pods that follow, rather than launched as a small
    Machine beside the larger ones those will need. A pod is held back once at most: in the next round it no
    longer counts as arriving."""
    if not arriving:
        return []
    return [i for i, claim in enumerate(claims) if fill.get(i, 1.0) < minimum and set(claim.pods) <= arriving]
