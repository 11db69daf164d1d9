"""What a Machine does to its Node and to Machines through the Kubernetes API.

Each write names the uid it was decided on, so a Node or Machine replaced
under the same name is never the one written or deleted.
"""
from __future__ import annotations

import json

from lightkube.resources.core_v1 import Node

from hooks import machine_names
from hooks.kube import fresh
from hooks.kube.deletes import delete_exact
from hooks.kube.taints import edit, pointer
from hooks.machines import signals


def register_node(kube, name: str, uid: str, labels: dict, annotations: dict, taints: list[dict]) -> bool:
    """Mirror the Machine onto its Node once, then let pods in: one patch, so none lands before the labels.

    The first time (no managed-keys record on the Node), add the labels,
    annotations and taints and record their keys; whatever the record, take
    the unregistered taint off. Later calls never touch a label the Machine
    mirrored before: a user's change to it stays.
    """
    def change(node):
        ops = []
        meta = node.metadata
        current_annotations = dict(meta.annotations or {})
        current_taints = [t.to_dict() for t in (node.spec.taints or [])] if node.spec else []
        kept = [t for t in current_taints if t.get("key") != machine_names.UNREGISTERED_TAINT]
        if machine_names.MANAGED_KEYS not in current_annotations:
            if meta.labels is None:
                ops.append({"op": "add", "path": "/metadata/labels", "value": {}})
            for key, value in sorted(labels.items()):
                ops.append({"op": "add", "path": f"/metadata/labels/{pointer(key)}", "value": value})
            if meta.annotations is None:
                ops.append({"op": "add", "path": "/metadata/annotations", "value": {}})
            record = {"labels": sorted(labels), "annotations": sorted(annotations),
                      "taints": sorted({t["key"] for t in taints})}
            for key, value in sorted({**annotations, machine_names.MANAGED_KEYS: json.dumps(record, separators=(",", ":"))}
                                     .items()):
                ops.append({"op": "add", "path": f"/metadata/annotations/{pointer(key)}", "value": value})
            present = {(t.get("key"), t.get("effect")) for t in kept}
            kept = kept + [t for t in taints if (t["key"], t["effect"]) not in present]
        if kept != current_taints:
            ops.append({"op": "add", "path": "/spec/taints", "value": kept})
        return ops

    return edit(kube, name, change, uid)


def cordon_disrupted(kube, name: str, uid: str, reason: str = "") -> bool:
    """Taint the Node disrupted and mark it unschedulable, with why on it, in one patch."""
    def change(node):
        ops = []
        annotations = node.metadata.annotations or {}
        if reason and annotations.get(machine_names.DISRUPTION_REASON) != reason:
            if node.metadata.annotations is None:
                ops.append({"op": "add", "path": "/metadata/annotations", "value": {}})
            ops.append({"op": "add", "path": f"/metadata/annotations/{pointer(machine_names.DISRUPTION_REASON)}",
                        "value": reason})
        taints = [t.to_dict() for t in (node.spec.taints or [])] if node.spec else []
        if not any(t.get("key") == machine_names.DISRUPTED_TAINT for t in taints):
            ops.append({"op": "add", "path": "/spec/taints",
                        "value": taints + [{"key": machine_names.DISRUPTED_TAINT, "effect": machine_names.DISRUPTED_EFFECT}]})
        if not (node.spec and node.spec.unschedulable):
            ops.append({"op": "add", "path": "/spec/unschedulable", "value": True})
        return ops

    return edit(kube, name, change, uid)


def mark_disrupted(kube, name: str, uid: str, value: str) -> bool:
    """Write the pool's choice (``nodewarden.io/disruption``) on the Machine of ``uid``, in one patch that
    tests the uid: a Machine replaced under the name is never written."""
    res = fresh.resource(machine_names.MACHINE_KIND)
    ops = [{"op": "test", "path": "/metadata/uid", "value": uid}]
    machine = fresh.as_dict(kube.get(res, name))
    if not isinstance((machine.get("metadata") or {}).get("annotations"), dict):
        ops.append({"op": "add", "path": "/metadata/annotations", "value": {}})
    ops.append({"op": "add", "path": f"/metadata/annotations/{pointer(signals.DISRUPTION_ANNOTATION)}",
                "value": value})
    kube.json_patch(res, name, ops)
    return True


def delete_node(kube, name: str, uid: str) -> bool:
    return delete_exact(kube, Node, name, uid)


def delete_machine(kube, name: str, uid: str) -> bool:
    return delete_exact(kube, fresh.resource(machine_names.MACHINE_KIND), name, uid)


def listed(kube, pool: str | None = None) -> list[dict]:
    """Every Machine the API server has now (of one pool, by its label, or all), as dicts."""
    labels = {machine_names.POOL_LABEL: pool} if pool else None
    return [fresh.as_dict(m) for m in kube.list(fresh.resource(machine_names.MACHINE_KIND), labels=labels)]


def claims(kube) -> tuple[set[str], set[str]]:
    """(every Machine's uid, every instance a Machine records in status.instanceID), from the API server now."""
    uids, recorded = set(), set()
    for machine in listed(kube):
        uids.add((machine.get("metadata") or {}).get("uid"))
        status = machine.get("status") if isinstance(machine.get("status"), dict) else {}
        if isinstance(status.get("instanceID"), str) and status["instanceID"]:
            recorded.add(status["instanceID"])
    return uids, recorded
