"""How many Nodes a label selector selects, and which of them are not Ready, in one compact list."""
from __future__ import annotations

from lightkube.resources.core_v1 import Node

from hooks.fencing import selectors


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
