"""Initialization: the Node is ready for pods the way the Machine promised (pure).

Initialized once the Node is Ready, every startup taint is gone (removed by
whoever owns it, never by us), so are the taints Kubernetes puts on a
starting Node (``machine_names.EPHEMERAL_TAINTS``: a Ready Node can still
carry not-ready for a moment, and no pod lands while it does), and every
extended resource of the Machine's capacity (a GPU) is reported by the Node.
It is a milestone: a Node that is NotReady later is liveness's and fencing's
business, not a reason to undo it.
"""
from __future__ import annotations

from hooks import conditions, events, fields, machine_names
from hooks.machines.view import MachineView, Progress


def waiting_for(view: MachineView, node: dict) -> list[str]:
    """What the Node still lacks; empty when it is initialized."""
    status = fields.mapping(node, "status", where="node")
    missing = []
    if (conditions.find(status, "Ready") or {}).get("status") != "True":
        missing.append("Node Ready")
    present = {(t.get("key"), t.get("effect")) for t in fields.objects(node, "spec", "taints", where="node")}
    for taint in view.spec.startup_taints:
        if (taint.key, taint.effect) in present:
            missing.append(f"startup taint {taint.key} to go")
    for key in sorted({k for k, _ in present if k in machine_names.EPHEMERAL_TAINTS}):
        missing.append(f"taint {key} to go")
    allocatable = fields.mapping(status, "allocatable", where="node.status")
    for resource in sorted(view.status.get("capacity") or {}):
        if resource not in machine_names.STANDARD_RESOURCES and str(allocatable.get(resource, "0")) in ("0", ""):
            missing.append(f"extended resource {resource}")
    return missing


def step(view: MachineView, progress: Progress, node: dict | None, settings) -> None:
    if node is None or not conditions.is_true(view.status, machine_names.REGISTERED):
        return
    if conditions.is_true(view.status, machine_names.INITIALIZED):
        return
    missing = waiting_for(view, node)
    if missing:
        progress.condition(machine_names.INITIALIZED, "False", "Initializing", "waiting for " + ", ".join(missing))
        progress.again_in(settings.machine_poll_seconds)
        return
    progress.condition(machine_names.INITIALIZED, "True", "Initialized", "Node Ready, startup taints gone")
    progress.events.append(events.normal(events.MACHINE_INITIALIZED, f"Node {node['metadata']['name']} is ready"))
