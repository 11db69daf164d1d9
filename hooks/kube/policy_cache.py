"""The NodeFencingPolicies as this process last listed them, for the Node hook's unverified view.

The Node decorator does not relate the policies: Metacontroller enqueues
every parent relating an object whenever that object changes, so a related
policy put every Node in the queue at each write of its status (its count,
every count interval). Instead the Node hook reads them through this cache,
listed at most once per ``ttl`` seconds per process, and sooner when a Node
carries the count annotation (names.COUNT_ANNOTATION) newer than any count the cache
holds: the policy controller writes it on the Nodes its count just admitted
for fencing, so they are synced at once on a count they can see.

Nothing irreversible rests on this copy: every taint, force delete and
FencingRequest waits for node-fencing's verify, which lists the policies
again from the API server.
"""
from __future__ import annotations

import datetime as dt
import threading
import time

from hooks.fencing import names
from hooks.fencing.policy import counted_since
from hooks.kube import fresh

# Bounds how often a stream of Nodes announcing a count the API server does not show yet re-lists.
_MIN_RELIST_SECONDS = 0.5


class PolicyCache:
    def __init__(self):
        self._lock = threading.Lock()
        self._policies: dict[str, dict] | None = None
        self._read_at = float("-inf")  # monotonic

    def policies(self, kube, ttl: float, announced: dt.datetime | None = None) -> dict[str, dict]:
        """Every NodeFencingPolicy by name; listed again when older than ``ttl`` seconds or, at most every
        half second, when no cached count is as recent as ``announced``. A failed list raises."""
        with self._lock:
            age = time.monotonic() - self._read_at
            stale = self._policies is None or age >= ttl or \
                (announced is not None and age >= _MIN_RELIST_SECONDS
                 and not counted_since(self._policies.values(), announced))
            if not stale:
                return self._policies
            found = read_all(kube)
            self._policies, self._read_at = found, time.monotonic()
            return found

    def clear(self) -> None:
        with self._lock:
            self._policies, self._read_at = None, float("-inf")


def read_all(kube) -> dict[str, dict]:
    """Every NodeFencingPolicy as the API server has it now, by name. A failed list raises."""
    found = {}
    for item in kube.list(fresh.resource(names.POLICY_KIND)):
        obj = fresh.as_dict(item)
        found[obj["metadata"]["name"]] = obj
    return found


def related(found: dict[str, dict]) -> dict:
    """The policies as a hook request's related objects (``ObjectGroups.parse`` input)."""
    return {f"{names.POLICY_KIND}.{names.API_VERSION}": found}


CACHE = PolicyCache()
