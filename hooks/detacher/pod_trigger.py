"""Ingress DaemonSets: a terminating managed pod detaches its node.

The node-detacher-pods controller sees one pod per call, so no Node sync's
payload grows with the number of pods. It records the request on the Node
(``nodewarden.io/detach-for-pod: <ns>/<daemonset>/<old pod uid>``, and when,
in ``nodewarden.io/detach-for-pod-since``), which the Node hook treats as a
detach trigger. Every such request ends, whichever comes first:

- a replacement pod of the same DaemonSet is Ready on that node (node-detacher-pods);
- the DaemonSet is gone or no longer managed (the Node hook looks it up);
- no replacement came within NODEWARDEN_DAEMONSET_REPLACEMENT_TIMEOUT_SECONDS,
  e.g. the DaemonSet no longer runs on that node (the Node hook's clock).

A pod we evicted ourselves from a leaving node starts no request: the node
is already out of every load balancer for a reason that has its own end.

This module holds what both controllers share: which DaemonSets are managed,
and the Node side of a request (when it ends, and its clock).
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import threading
import time

from hooks import events, runtime, timefmt
from hooks.config import Settings
from hooks.contract import HookRequest
from hooks.detacher import names, triggers
from hooks.plan import Plan

log = logging.getLogger(__name__)

_DS_CACHE_SECONDS = 30.0
_DS_MISS_SECONDS = 2.0


def configured(daemonset: str, settings: Settings) -> bool:
    _, _, name = daemonset.partition("/")
    return any(entry == daemonset or ("/" not in entry and entry == name) for entry in settings.managed_daemonsets)


class _ManagedDaemonSets:
    """DaemonSets annotated managed-by=<our name>, listed cluster-wide and cached per process.

    A DaemonSet found managed stays so for 30 s; one not found is looked up
    again after 2 s, so a newly annotated DaemonSet counts almost at once.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._at = float("-inf")
        self._keys: frozenset[str] = frozenset()

    def contains(self, kube, detacher_name: str, key: str) -> bool:
        with self._lock:
            age = time.monotonic() - self._at
            if (key in self._keys and age < _DS_CACHE_SECONDS) or (key not in self._keys and age < _DS_MISS_SECONDS):
                return key in self._keys
        from lightkube.resources.apps_v1 import DaemonSet

        keys = frozenset(
            f"{ds.metadata.namespace}/{ds.metadata.name}"
            for ds in kube.list(DaemonSet, namespace="*")
            if (ds.metadata.annotations or {}).get(names.MANAGED_BY) == detacher_name
        )
        with self._lock:
            self._keys, self._at = keys, time.monotonic()
        return key in keys


MANAGED = _ManagedDaemonSets()


def leaving(node: dict, settings: Settings) -> bool:
    """Cordoned, deleting or tainted to go: its pods are being shut down on purpose, ours included."""
    return any(r in ("cordoned", "deleting") or r.startswith("taint:") for r in triggers.reasons(node, settings))


# ------------------------------------------------------------ the Node hook's side


def end_of_node_request(request: HookRequest, ctx: runtime.Context, now: dt.datetime) -> str | None:
    """Why the node's pod-detach request ends now, or None (it stays, or there is none)."""
    value = request.annotations.get(names.FOR_POD)
    if not value:
        return None
    return _ended(value, request.annotations.get(names.FOR_POD_SINCE), ctx, now)


def without_node_request(request: HookRequest) -> HookRequest:
    """The request as if the node carried no pod-detach request."""
    parent = dict(request.parent)
    meta = dict(parent["metadata"])
    meta["annotations"] = {k: v for k, v in request.annotations.items() if k not in (names.FOR_POD, names.FOR_POD_SINCE)}
    parent["metadata"] = meta
    return dataclasses.replace(request, parent=parent)


def _ended(value: str, since: str | None, ctx: runtime.Context, now: dt.datetime) -> str | None:
    namespace, _, rest = value.partition("/")
    name = rest.partition("/")[0]
    if not namespace or not name:
        return f"unreadable request {value[:100]!r}"
    waited = timefmt.seconds_since(since, now)
    if waited is not None and waited >= ctx.settings.daemonset_replacement_timeout_seconds:
        return f"no Ready replacement of DaemonSet {namespace}/{name} within {waited:.0f}s"
    daemonset = f"{namespace}/{name}"
    try:
        if configured(daemonset, ctx.settings):
            from lightkube.resources.apps_v1 import DaemonSet

            from hooks.kube.client import is_not_found

            try:
                ctx.kube.get(DaemonSet, name, namespace=namespace)
            except Exception as exc:  # noqa: BLE001 - only a 404 proves it gone
                if is_not_found(exc):
                    return f"DaemonSet {daemonset} is gone"
                raise
        elif not MANAGED.contains(ctx.kube, ctx.settings.detacher_name, daemonset):
            return f"DaemonSet {daemonset} is gone or no longer managed by {ctx.settings.detacher_name}"
    except Exception as exc:  # noqa: BLE001 - unknown: the clock still ends it
        log.warning("DaemonSet look-up failed", extra={"daemonset": daemonset, "error": str(exc)})
    return None


def withdraw_node_request(plan: Plan, why: str) -> Plan:
    """The plan, plus taking the ended request off the Node."""
    response = dict(plan.response)
    response["annotations"] = {**(response.get("annotations") or {}), names.FOR_POD: None, names.FOR_POD_SINCE: None}
    said = events.normal(events.DAEMONSET_POD_REQUEST_ENDED, f"Pod-triggered detach withdrawn: {why}")
    return dataclasses.replace(plan, response=response, events=[*plan.events, said])


def keep_node_request_clock(request: HookRequest, response: dict, settings: Settings, now: dt.datetime) -> dict:
    """Start the clock of a request that has none, and look again when it runs out."""
    if not request.annotations.get(names.FOR_POD):
        return response
    since = timefmt.parse(request.annotations.get(names.FOR_POD_SINCE))
    annotations = dict(response.get("annotations") or {})
    if since is None:
        since = now
        annotations[names.FOR_POD_SINCE] = timefmt.fmt(now)
    left = settings.daemonset_replacement_timeout_seconds - (now - since).total_seconds()
    resync = max(1.0, min(response.get("resyncAfterSeconds") or left, left))
    return dict(response, annotations=annotations, resyncAfterSeconds=resync)
