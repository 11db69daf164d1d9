"""What the hand-over of a Node from the old DecoratorControllers reads and writes on the API server
(the decisions are hooks/handover/'s).

Every read is fresh: whether an old DecoratorController still exists, and
each attachment they kept. The writes carry their own preconditions: a
claim is a merge patch with the resourceVersion the attachment was read at,
the finalizers' removal a JSON patch that tests each entry it removes.
"""
from __future__ import annotations

import threading
import time

from hooks.contract import DECORATOR_CLAIM
from hooks.handover.names import OLD_CONTROLLERS
from hooks.kube import fresh

# How long one answer about the old controllers serves this process.
_GONE_CACHE_SECONDS = 30.0


class _Gone:
    """Whether every old DecoratorController is gone, asked at most once per interval per process."""

    def __init__(self):
        self._lock = threading.Lock()
        self._answer: tuple[float, bool] | None = None

    def __call__(self, kube) -> bool:
        with self._lock:
            if self._answer and time.monotonic() - self._answer[0] < _GONE_CACHE_SECONDS:
                return self._answer[1]
        gone = all(fresh.read(kube, "DecoratorController", name) is None for name in OLD_CONTROLLERS)
        with self._lock:
            self._answer = (time.monotonic(), gone)
        return gone

    def forget(self) -> None:
        with self._lock:
            self._answer = None


OLD_GONE = _Gone()


def attachments(kube, looked_up: list[tuple[str, str, str | None]]) -> list[dict]:
    """``{kind, name, namespace, found}`` of each of ``looked_up`` the API server has now; raises Unverified."""
    found = []
    for kind, name, namespace in looked_up:
        obj = fresh.read(kube, kind, name, namespace)
        if obj is not None:
            found.append({"kind": kind, "name": name, "namespace": namespace, "found": obj})
    return found


def claim(kube, kind: str, name: str, namespace: str | None, resource_version: str | None, controller: str) -> None:
    """The attachment claimed for the DecoratorController ``controller``, if unchanged since it was read at
    ``resource_version`` (else the API server refuses it: a conflict)."""
    patch = {"metadata": {"resourceVersion": resource_version, "annotations": {DECORATOR_CLAIM: controller}}}
    kube.merge_patch(fresh.resource(kind), name, patch, namespace=namespace)


def remove_finalizers(kube, node: str, patch: list[dict]) -> None:
    """The JSON patch of the Node's finalizers (each removal after a test of its entry)."""
    kube.json_patch(fresh.resource("Node"), node, patch)
