"""Ingress DaemonSets: a terminating managed pod detaches its node.

The Pod decorator hook sees one pod per call, so no Node sync's payload grows
with the number of pods. It records the request on the Node
(``nodewarden.io/detach-for-pod: <ns>/<daemonset>/<old pod uid>``), which the
Node hook treats as a detach trigger, and removes it once a replacement pod
of the same DaemonSet is Ready on that node.
"""
from __future__ import annotations

import threading
import time

from hooks import fields, runtime
from hooks.config import Settings
from hooks.contract import HookRequest, decorator_response
from hooks.detacher import names
from hooks.plan import Action, Plan

_DS_CACHE_SECONDS = 30.0
_DS_MISS_SECONDS = 2.0


def owning_daemonset(pod: dict) -> str | None:
    for i, ref in enumerate(fields.objects(pod, "metadata", "ownerReferences")):
        if ref.get("kind") == "DaemonSet" and ref.get("controller") is not False:
            name = fields.item_string(ref, "name", f"parent.metadata.ownerReferences[{i}]")
            return f"{fields.string(pod, 'metadata', 'namespace') or ''}/{name}"
    return None


def configured(daemonset: str, settings: Settings) -> bool:
    _, _, name = daemonset.partition("/")
    return any(entry == daemonset or ("/" not in entry and entry == name) for entry in settings.managed_daemonsets)


def is_ready(pod: dict) -> bool:
    for cond in fields.objects(pod, "status", "conditions"):
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


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


def gather_pod(request: HookRequest, ctx: runtime.Context) -> dict:
    pod = request.parent
    daemonset = owning_daemonset(pod)
    node_name = fields.string(pod, "spec", "nodeName")
    if daemonset is None or not node_name or not (request.deleting or is_ready(pod)):
        return {}  # only a terminating pod or a Ready replacement can change anything
    observed: dict = {"daemonset": daemonset, "node": node_name}
    try:
        managed = configured(daemonset, ctx.settings) or MANAGED.contains(ctx.kube, ctx.settings.detacher_name, daemonset)
        observed["managed"] = managed
        if managed:
            from lightkube.resources.core_v1 import Node

            node = ctx.kube.get(Node, node_name)
            observed["nodeRequest"] = (node.metadata.annotations or {}).get(names.FOR_POD)
    except Exception as exc:  # noqa: BLE001 - retried on the next resync
        from hooks.kube.client import describe_error

        observed["error"] = describe_error(exc)
    return observed


def decide_pod(request: HookRequest, settings: Settings, observed: dict) -> Plan:
    if observed.get("error"):
        return Plan(decorator_response(resync_after=settings.error_backoff_seconds))
    if not observed.get("managed"):
        return Plan(decorator_response())
    pod = request.parent
    daemonset, node = observed["daemonset"], observed["node"]
    uid = fields.string(pod, "metadata", "uid") or request.name
    current = observed.get("nodeRequest")
    ours = f"{daemonset}/{uid}"
    actions = []
    if request.deleting:
        if current is None:
            actions = [
                Action("kube.annotate-node", node, {"annotations": {names.FOR_POD: ours}}),
                Action("event", node, {"reason": "DaemonSetPodTerminating",
                                       "message": f"{daemonset} pod {request.name} is terminating: detaching the node"}),
            ]
    elif is_ready(pod) and current and current.startswith(f"{daemonset}/") and current != ours:
        actions = [
            Action("kube.annotate-node", node, {"annotations": {names.FOR_POD: None}}),
            Action("event", node, {"reason": "DaemonSetPodReady",
                                   "message": f"{daemonset} replacement pod {request.name} is Ready: re-attaching"}),
        ]
    return Plan(decorator_response(), actions)
