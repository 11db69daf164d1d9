"""The DaemonSets node-detacher manages, as the API server has them, and whether a node's pod-detach request has ended.

Look-ups only; what they mean is decided in hooks.detacher.pod_trigger.
"""
from __future__ import annotations

import datetime as dt
import logging
import threading
import time

from lightkube.resources.apps_v1 import DaemonSet

from hooks import runtime, timefmt
from hooks.contract import HookRequest
from hooks.detacher import names
from hooks.detacher.pod_trigger import configured
from hooks.kube.client import is_not_found

log = logging.getLogger(__name__)

_DS_CACHE_SECONDS = 30.0
_DS_MISS_SECONDS = 2.0


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



def end_of_node_request(request: HookRequest, ctx: runtime.Context, now: dt.datetime) -> str | None:
    """Why the node's pod-detach request ends now, or None (it stays, or there is none)."""
    value = request.annotations.get(names.FOR_POD)
    if not value:
        return None
    return _ended(value, request.annotations.get(names.FOR_POD_SINCE), ctx, now)


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
