"""Why a node should be out of its load balancers (pure)."""
from __future__ import annotations

from hooks import fields
from hooks.config import Settings
from hooks.detacher import names
from hooks.machines.names import DISRUPTED_TAINT

# Taints that mean "this node is about to go": cluster-autoscaler, Karpenter, NTH, a Machine's termination.
_LEAVING_TAINT_KEYS = ("ToBeDeletedByClusterAutoscaler", "karpenter.sh/disrupted", DISRUPTED_TAINT)
_LEAVING_TAINT_VALUES = {"karpenter.sh/disruption": "disrupting"}
_LEAVING_TAINT_PREFIXES = ("aws-node-termination-handler/",)


def _configured_match(key: str, value: str | None, configured: tuple[str, ...]) -> bool:
    for entry in configured:
        want_key, sep, want_value = entry.partition("=")
        if key == want_key and (not sep or value == want_value):
            return True
    return False


def leaving_taints(node: dict, settings: Settings) -> list[str]:
    found = []
    for i, taint in enumerate(fields.objects(node, "spec", "taints")):
        key = fields.item_string(taint, "key", f"parent.spec.taints[{i}]") or ""
        value = fields.item_string(taint, "value", f"parent.spec.taints[{i}]")
        if (
            key in _LEAVING_TAINT_KEYS
            or _LEAVING_TAINT_VALUES.get(key, object()) == value
            or key.startswith(_LEAVING_TAINT_PREFIXES)
            or _configured_match(key, value, settings.detach_taint_keys)
        ):
            found.append(f"taint:{key}")
    return found


def reasons(node: dict, settings: Settings) -> list[str]:
    """Every reason the node should be detached now; empty means it may serve traffic."""
    annotations = fields.mapping(node, "metadata", "annotations")
    found = []
    if fields.boolean(node, "spec", "unschedulable"):
        found.append("cordoned")
    found.extend(leaving_taints(node, settings))
    if fields.string(node, "metadata", "deletionTimestamp"):
        found.append("deleting")
    if annotations.get(names.FOR_POD):
        found.append("daemonset-pod")
    if external_detach_request(annotations):
        found.append("annotation")
    return found


def external_detach_request(annotations: dict) -> bool:
    """``detaching=true`` set by someone else (or kept by them after we started)."""
    if annotations.get(names.DETACHING) != "true":
        return False
    if not annotations.get(names.SINCE):
        return True  # we never started a detach: it is someone else's request
    return "annotation" in (annotations.get(names.REASON) or "").split(",")


def ours_present(node: dict) -> bool:
    """Whether anything of a detach we started is still on the node."""
    annotations = fields.mapping(node, "metadata", "annotations")
    labels = fields.mapping(node, "metadata", "labels")
    if any(annotations.get(k) for k in (names.SINCE, names.DEREGISTERED, names.DEREGISTERING, names.DETACHED_AT)):
        return True
    if labels.get(names.EXCLUDE_LABEL) == names.EXCLUDE_VALUE:
        return True
    return any(t.get("key") == names.DETACHING_TAINT for t in fields.objects(node, "spec", "taints"))
