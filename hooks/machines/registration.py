"""Registration: join the Machine to the Node its instance registered (pure).

The kubelet registers with the label ``nodewarden.io/machine=<name>``, so
the Machine is shown only Nodes with its label (customize), and joins the
one whose ``spec.providerID`` names its instance. A labelled Node with any
other providerID is reported and never joined: a label can be copied, an
instance id cannot be ours by accident.

Joining mirrors the Machine's labels, annotations and taints (startup taints
included) onto the Node once and takes the unregistered taint off in the same
patch, so no pod can land before the labels do. The Node records which keys
were mirrored; a later call sees the record and does not mirror again.
"""
from __future__ import annotations

from hooks import events, fields
from hooks.machines import names
from hooks.machines.view import MachineView, Progress, node_instance_id
from hooks.plan import Action


def candidates(machine: str, instance_id: str, nodes: list[dict]) -> tuple[dict | None, list[dict]]:
    """(the Node whose providerID names the instance, the Nodes labelled for the Machine that do not)."""
    labelled = [n for n in nodes
                if fields.mapping(n, "metadata", "labels", where="related.Node").get(names.MACHINE_LABEL) == machine]
    ours = [n for n in labelled if instance_id and node_instance_id(n) == instance_id]
    others = [n for n in labelled if n not in ours]
    return (ours[0] if ours else None), others


def mirrored(node: dict) -> bool:
    meta = node.get("metadata") or {}
    taints = (node.get("spec") or {}).get("taints") or []
    return names.MANAGED_KEYS in (meta.get("annotations") or {}) and \
        not any(isinstance(t, dict) and t.get("key") == names.UNREGISTERED_TAINT for t in taints)


def step(view: MachineView, progress: Progress, node: dict | None, others: list[dict], settings) -> None:
    if not view.instance_id:
        return
    for other in others:
        name = other["metadata"]["name"]
        message = (f"Node {name} carries {names.MACHINE_LABEL}={view.name} but its providerID "
                   f"{(other.get('spec') or {}).get('providerID')!r} is not instance {view.instance_id}: not joined")
        progress.errors.append(message)
        progress.events.append(events.warning(events.NODE_PROVIDER_ID_MISMATCH, message))
    if node is None:
        reason = "NodeProviderIDMismatch" if others else "AwaitingNode"
        progress.condition(names.REGISTERED, "False", reason,
                           "a labelled Node names another instance" if others
                           else f"waiting for a Node with providerID of {view.instance_id}")
        progress.again_in(settings.machine_poll_seconds)
        return
    meta = node["metadata"]
    view.status["nodeName"], view.status["nodeUID"] = meta["name"], meta.get("uid") or ""
    if mirrored(node):
        if progress.condition(names.REGISTERED, "True", "NodeRegistered", f"joined Node {meta['name']}"):
            progress.events.append(events.normal(events.NODE_REGISTERED, f"joined Node {meta['name']}"))
        return
    spec = view.spec
    labels = {**spec.labels, names.POOL_LABEL: view.pool} if view.pool else dict(spec.labels)
    taints = [t.to_dict() for t in spec.taints + spec.startup_taints]
    progress.actions.append(Action("kube.register-node", meta["name"], {
        "uid": meta.get("uid"), "labels": labels, "annotations": dict(spec.annotations), "taints": taints}))
    progress.condition(names.REGISTERED, "False", "Registering", f"mirroring the Machine onto Node {meta['name']}")
    progress.again_in(settings.machine_poll_seconds)
