"""Add and remove Node taints (spec, which no decorator response can change).

A JSON patch with a ``test`` on resourceVersion makes the read-modify-write
safe against concurrent writers (kubelet, cluster-autoscaler, Karpenter);
on a conflict it re-reads and tries again.
"""
from __future__ import annotations

from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Node

_ATTEMPTS = 4


def _node_taints(node) -> list[dict]:
    spec = node.spec
    return [t.to_dict() for t in (spec.taints or [])] if spec else []


def pointer(key: str) -> str:
    """A map key as a JSON-pointer segment."""
    return key.replace("~", "~0").replace("/", "~1")


class NodeReplaced(RuntimeError):
    """The Node under that name is not the one the caller verified."""


def edit(kube, name: str, change, uid: str | None = None, first=None) -> bool:
    """Apply ``change(node) -> JSON patch operations or None`` to the Node; True when it changed.

    The patch is tested against the resourceVersion read, so a concurrent
    writer makes it read again and retry. With ``uid``, only the Node of that
    uid is written (tested in the patch too, so it stays the same object up
    to the write). ``first``, the Node as the API server answered it earlier
    in this call, stands for the first read: only a conflict reads again.
    """
    for attempt in range(_ATTEMPTS):
        node = first if attempt == 0 and first is not None else kube.get(Node, name)
        if uid and node.metadata.uid != uid:
            raise NodeReplaced(f"Node {name} is now uid {node.metadata.uid}, not {uid}: not written")
        ops = change(node)
        if not ops:
            return False
        tests = [{"op": "test", "path": "/metadata/uid", "value": uid}] if uid else []
        try:
            kube.json_patch(Node, name, [
                *tests, {"op": "test", "path": "/metadata/resourceVersion", "value": node.metadata.resourceVersion},
                *ops])
            return True
        except ApiError as exc:
            # 409 Conflict / 422 failed test: somebody else wrote first; re-read.
            if exc.status.code not in (409, 422) or attempt == _ATTEMPTS - 1:
                raise
    return False


def _write(kube, name: str, change, uid: str | None = None) -> bool:
    """Apply ``change(taints) -> new taints or None`` (see ``edit``)."""
    def ops(node):
        new = change(_node_taints(node))
        return None if new is None else [{"op": "add", "path": "/spec/taints", "value": new}]

    return edit(kube, name, ops, uid)


def add(kube, node_name: str, key: str, effect: str, value: str | None = None, uid: str | None = None) -> bool:
    def change(taints):
        if any(t.get("key") == key and t.get("effect") == effect for t in taints):
            return None
        taint = {"key": key, "effect": effect}
        if value is not None:
            taint["value"] = value
        return taints + [taint]

    return _write(kube, node_name, change, uid)


def remove(kube, node_name: str, key: str, effect: str | None = None) -> bool:
    def change(taints):
        kept = [t for t in taints if not (t.get("key") == key and (effect is None or t.get("effect") == effect))]
        return None if len(kept) == len(taints) else kept

    return _write(kube, node_name, change)
