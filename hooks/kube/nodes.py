"""Nodes read and written by the hooks themselves: which a selector selects and which of them are
not Ready, in one compact list; labels and annotations set on the one Node a decision was made on."""
from __future__ import annotations

from lightkube.resources.core_v1 import Node

from hooks.fencing import selectors
from hooks.kube.taints import edit, pointer


def readiness(kube, selector: dict) -> dict:
    """``{"total": n, "notReady": [names]}`` for the Nodes ``selector`` selects, from the API server.

    Read as a Table (hooks/kube/client.py): its Status column is what
    ``kubectl get nodes`` shows, "Ready" while the Ready condition is True
    (",SchedulingDisabled" added for a cordoned node) and "NotReady" or
    "Unknown" otherwise. So the whole list costs about 150 bytes per Node,
    and the Nodes that need a closer look are the few not Ready.
    """
    total, not_ready = 0, []
    for row in kube.table(Node, labels=selectors.to_query(selector)):
        name, status = row.get("Name"), row.get("Status")
        if not isinstance(name, str) or not isinstance(status, str):
            raise ValueError(f"a Node row without a Name and a Status column: {sorted(row)}")
        total += 1
        if status.split(",")[0] != "Ready":
            not_ready.append(name)
    return {"total": total, "notReady": sorted(not_ready)}


def annotate(kube, name: str, annotations: dict[str, str], uid: str) -> bool:
    """Set ``annotations`` on the Node of ``uid``; True when that changed it (see ``write_metadata``)."""
    return write_metadata(kube, name, uid, annotations=annotations)


def write_metadata(kube, name: str, uid: str, *, labels: dict[str, str | None] | None = None,
                   annotations: dict[str, str | None] | None = None, seen: dict | None = None) -> bool:
    """Set ``labels`` and ``annotations`` on the Node of ``uid`` in one write (None: remove the key); True when
    that changed it.

    Tested against the resourceVersion it read and retried on a conflict
    (``taints.edit``): another writer of the Node never makes it fail, and a
    Node re-created under the same name is never written. ``seen``, the
    Node's metadata as the API server answered it in this call (its uid,
    resourceVersion, labels and annotations), saves the first read: the
    write is tested against that resourceVersion, and only a conflict reads.
    """
    def ops(node):
        return (_map_ops(node.metadata.labels, "labels", labels or {})
                + _map_ops(node.metadata.annotations, "annotations", annotations or {}))

    first = Node.from_dict({"metadata": seen}) if seen and isinstance(seen.get("resourceVersion"), str) else None
    return edit(kube, name, ops, uid, first=first)


def record(kube, name: str, changes: list, uid: str) -> bool:
    """Apply ``changes`` ((hooks.plan.Change, the result it reads) pairs on annotations) to the Node of ``uid``
    as the API server has it now; True when that changed it. A list kept in an annotation is merged with what
    is there, so what another call recorded meanwhile stays."""
    def change(node):
        current = dict(node.metadata.annotations or {})
        response = {"annotations": dict(current)}
        for one, result in changes:
            one.apply(response, result)
        wanted = {k: v for k, v in response["annotations"].items() if isinstance(v, str)}
        return _map_ops(node.metadata.annotations, "annotations", wanted)

    return edit(kube, name, change, uid)


def _map_ops(current: dict | None, field: str, wanted: dict[str, str | None]) -> list[dict]:
    """JSON patch operations that set ``wanted`` in the metadata map ``field`` (made if missing); a key wanted
    None is removed where present."""
    have = current or {}
    ops = [{"op": "remove", "path": f"/metadata/{field}/{pointer(k)}"} if v is None else
           {"op": "add", "path": f"/metadata/{field}/{pointer(k)}", "value": v}
           for k, v in sorted(wanted.items()) if have.get(k) != v and (v is not None or k in have)]
    if ops and current is None:
        ops.insert(0, {"op": "add", "path": f"/metadata/{field}", "value": {}})
    return ops
