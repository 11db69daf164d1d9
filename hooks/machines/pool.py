"""A pool's Machines as its decisions read them: typed, with their phase (pure).

The NodePool's decision itself is hooks.nodepools.
"""
from __future__ import annotations

from hooks import conditions, machine_names


def _str(value) -> str:
    return value if isinstance(value, str) else ""


def machines_of(children: list[dict]) -> list[dict]:
    """The pool's Machines as the decisions read them: every field typed, nothing else kept.

    A child's metadata and status come from the API server through
    Metacontroller's cache, but are read through here all the same: a field of
    the wrong type reads as absent, never as an exception.
    """
    found = []
    for child in children:
        meta = child.get("metadata") if isinstance(child.get("metadata"), dict) else {}
        if not _str(meta.get("name")):
            continue
        labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
        annotations = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
        found.append({
            "apiVersion": _str(child.get("apiVersion")) or machine_names.API_VERSION,
            "kind": machine_names.MACHINE_KIND,
            "metadata": {"name": meta["name"], "uid": _str(meta.get("uid")),
                         "creationTimestamp": _str(meta.get("creationTimestamp")),
                         "deletionTimestamp": _str(meta.get("deletionTimestamp")),
                         "labels": {k: v for k, v in labels.items() if isinstance(v, str)},
                         "annotations": {k: v for k, v in annotations.items() if isinstance(v, str)}},
            "spec": child.get("spec") if isinstance(child.get("spec"), dict) else {},
            "status": child.get("status") if isinstance(child.get("status"), dict) else {},
        })
    return found


def phase(machine: dict) -> str:
    meta = machine["metadata"]
    status = machine["status"]
    if meta["deletionTimestamp"]:
        return "Terminating"
    if conditions.is_true(status, machine_names.INITIALIZED):
        return "Initialized"
    if conditions.is_true(status, machine_names.REGISTERED):
        return "Registered"
    return "Launching"


def has_node(machine: dict) -> bool:
    """Whether the Machine ever joined a Node (pods may run there): disrupting it counts against a budget."""
    return bool(machine["status"].get("nodeName")) or phase(machine) in ("Registered", "Initialized")


def by_phase(machines: list[dict]) -> dict[str, int]:
    counts = {p: 0 for p in machine_names.PHASES}
    for machine in machines:
        counts[phase(machine)] += 1
    return counts
