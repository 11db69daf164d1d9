"""UnhealthyNode: node-fencing's small record of a node some policy may count as unhealthy.

The policies' counts relate these records instead of the Nodes. A record
carries only what a count reads: the node's conditions that some policy's
rules name, Ready, FencingRequired and FencingComplete (type, status and
lastTransitionTime; no heartbeats, so it changes only when a condition does),
and the node's labels that some policy's nodeSelector names (so each policy's
own selector picks its records). About 1.5 KB as the API server keeps it,
where a real Node is about 13 KB, so a policy's sync request stays small even
when every node it selects is unhealthy.

node-fencing returns the record as an attachment while storm.flagged holds
and leaves it out otherwise; Metacontroller creates, updates and deletes it,
and it carries the Node as its owner, so it goes with the Node.
"""
from __future__ import annotations

from hooks import fencing_names
from hooks.fencing.policy import Policy

KIND = "UnhealthyNode"
RESOURCE = "unhealthynodes"
# Bounds on what a record read back may hold (a Node has about ten conditions).
MAX_CONDITIONS = 64
MAX_TEXT = 1024
_CONDITION_FIELDS = ("type", "status", "lastTransitionTime")


def selector_keys(policies: list[Policy]) -> set[str]:
    """Every label key some policy's nodeSelector names."""
    keys: set[str] = set()
    for policy in policies:
        keys.update((policy.node_selector.get("matchLabels") or {}).keys())
        keys.update(expr["key"] for expr in policy.node_selector.get("matchExpressions") or [])
    return keys


def condition_types(policies: list[Policy]) -> set[str]:
    """Every condition type a count reads: Ready, our fencing conditions, and those the rules name."""
    return {"Ready", fencing_names.REQUIRED, fencing_names.COMPLETE, *(rule.type for p in policies for rule in p.rules)}


def build(node_name: str, node_uid: str | None, labels: dict, status: dict, policies: list[Policy]) -> dict:
    """The record of a node: the conditions ``policies`` read as ``status`` has them, and the labels they
    select on."""
    keys, types = selector_keys(policies), condition_types(policies)
    return {
        "apiVersion": fencing_names.API_VERSION,
        "kind": KIND,
        "metadata": {"name": node_name, "labels": {k: v for k, v in sorted(labels.items()) if k in keys}},
        "spec": {
            **({"nodeUID": node_uid} if node_uid else {}),
            "conditions": [c for c in _conditions((status or {}).get("conditions")) if c.get("type") in types],
        },
    }


def _conditions(raw) -> list[dict]:
    if not isinstance(raw, list):
        return []
    kept = []
    for cond in raw[:MAX_CONDITIONS]:
        if not isinstance(cond, dict) or not isinstance(cond.get("type"), str):
            continue
        kept.append({k: cond[k][:MAX_TEXT] for k in _CONDITION_FIELDS if isinstance(cond.get(k), str)})
    return kept


def as_node(record: dict) -> dict:
    """A record seen as the Node it stands for: name, the copied labels, the conditions.

    Whatever does not read cleanly is left out (a condition without a type,
    a label that is not a string), so a damaged record judges the node on
    less evidence, never fails the count.
    """
    meta = record.get("metadata") if isinstance(record.get("metadata"), dict) else {}
    spec = record.get("spec") if isinstance(record.get("spec"), dict) else {}
    labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
    return {
        "metadata": {"name": meta.get("name"),
                     "labels": {k: v for k, v in labels.items() if isinstance(k, str) and isinstance(v, str)}},
        "status": {"conditions": _conditions(spec.get("conditions"))},
    }
