"""Nodes read and written by the hooks themselves: which a selector selects and which of them are
not Ready, in one compact list; annotations set on the one Node a decision was made on."""
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
    """Set ``annotations`` on the Node of ``uid``; True when that changed it.

    Tested against the resourceVersion it read and retried on a conflict
    (``taints.edit``): another writer of the Node never makes it fail, and a
    Node re-created under the same name is never written.
    """
    def change(node):
        current = node.metadata.annotations
        ops = [{"op": "add", "path": f"/metadata/annotations/{pointer(k)}", "value": v}
               for k, v in sorted(annotations.items()) if (current or {}).get(k) != v]
        if ops and current is None:
            ops.insert(0, {"op": "add", "path": "/metadata/annotations", "value": {}})
        return ops

    return edit(kube, name, change, uid)
