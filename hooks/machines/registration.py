"""Registration: join the Machine to the Node its instance registered, and keep knowing it (pure).

The kubelet registers with the label ``nodewarden.io/machine=<name>``, so
before it is registered a Machine looks only at Nodes with its label, and
joins the one whose ``spec.providerID`` names its instance. A labelled Node
with any other providerID is reported and never joined: a label can be
copied, an instance id cannot be ours by accident. Two labelled Nodes naming
the instance (any kubelet credential can register such a Node) are both
reported and neither is joined.

Joining mirrors the Machine's labels, annotations and taints (startup taints
included) onto the Node once, with nodewarden's well-known labels of its
instance (capacity type, instance family, size, vCPUs, memory, GPUs: what a
pod's node selector or a pool's requirements may name), and takes the
unregistered taint off in the same patch, so no pod can land before the
labels do. The Node records which keys
were mirrored; a later call sees the record and does not mirror again. Once
joined, the Machine records the Node's name and uid, and from then on knows
its Node by them, whatever its labels say: a label is the kubelet's and the
users' to change. Only the API server saying the recorded Node is not there
(a 404, or another uid under its name) makes it gone; a Node not seen in one
call is not.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from hooks import events, fields, machine_names, provisioning_names
from hooks.machines.view import MachineView, Progress, node_instance_id, read_status
from hooks.plan import Action


@dataclass
class Sight:
    """What one call knows of the Machine's Node."""

    node: dict | None = None  # the Machine's Node: the recorded one, else the only labelled Node naming the instance
    others: list[dict] = field(default_factory=list)  # labelled Nodes naming another instance
    conflict: list[dict] = field(default_factory=list)  # Nodes naming the instance that are not (or cannot be) joined
    lost: bool = False  # the API server said the recorded Node is not there
    unseen: bool = False  # the recorded Node was not in this call's view, and not proven gone


def _meta(node: dict) -> dict:
    return node.get("metadata") if isinstance(node.get("metadata"), dict) else {}


def sight(machine: str, instance_id: str, node_name: str, node_uid: str, nodes: list[dict],
          recorded_gone: bool) -> Sight:
    """The Machine's Node among ``nodes`` (by its recorded name and uid, or by label and providerID).

    ``recorded_gone`` is the API server's answer for the recorded Node (404 or
    another uid); without it, a recorded Node missing from ``nodes`` is unseen.
    """
    labelled = [n for n in nodes
                if fields.mapping(n, "metadata", "labels", where="related.Node").get(machine_names.MACHINE_LABEL) == machine]
    naming = [n for n in labelled if instance_id and node_instance_id(n) == instance_id]
    others = [n for n in labelled if not (instance_id and node_instance_id(n) == instance_id)]
    if node_uid:
        recorded = next((n for n in nodes if _meta(n).get("name") == node_name and _meta(n).get("uid") == node_uid),
                        None)
        if recorded is not None:
            others = [n for n in others if _meta(n).get("uid") != node_uid]
            return Sight(recorded, others, [n for n in naming if _meta(n).get("uid") != node_uid])
        if not recorded_gone:
            return Sight(None, others, unseen=True)
    found = Sight(others=others, lost=bool(node_uid))
    if len(naming) == 1:
        found.node = naming[0]
    else:
        found.conflict = naming
    return found


def call_sight(request, observed: dict) -> Sight:
    """The Machine's Node in this call (``request`` its HookRequest): from the API server when it was asked,
    else the request's related Nodes."""
    status = read_status(request)
    instance_id = status.get("instanceID") or (observed.get("instance") or {}).get("instanceID")
    listed = observed["nodes"] if "nodes" in observed else request.related.of_kind("Node")
    return sight(request.name, instance_id or "", status.get("nodeName") or "", status.get("nodeUID") or "",
                 listed, bool(observed.get("recordedNodeGone")))


def mirrored(node: dict) -> bool:
    meta = node.get("metadata") or {}
    taints = (node.get("spec") or {}).get("taints") or []
    return machine_names.MANAGED_KEYS in (meta.get("annotations") or {}) and \
        not any(isinstance(t, dict) and t.get("key") == machine_names.UNREGISTERED_TAINT for t in taints)


def _report(view: MachineView, progress: Progress, seen: Sight) -> None:
    for other in seen.others:
        name = other["metadata"]["name"]
        message = (f"Node {name} carries {machine_names.MACHINE_LABEL}={view.name} but its providerID "
                   f"{(other.get('spec') or {}).get('providerID')!r} is not instance {view.instance_id}: not joined")
        progress.errors.append(message)
        progress.events.append(events.warning(events.NODE_PROVIDER_ID_MISMATCH, message))
    if seen.conflict:
        listed = ", ".join(sorted(n["metadata"]["name"] for n in seen.conflict))
        if seen.node is not None:
            message = (f"Node(s) {listed} also name instance {view.instance_id}, whose Node is "
                       f"{seen.node['metadata']['name']}: not joined")
        else:
            message = f"Nodes {listed} all name instance {view.instance_id}: none is joined"
        progress.errors.append(message)
        progress.events.append(events.warning(events.NODE_PROVIDER_ID_CONFLICT, message))


def instance_labels(view: MachineView) -> dict[str, str] | None:
    """nodewarden's well-known labels of the Machine's instance, which the Node gets when it joins, so a pod's
    node selector on them finds it (the kubelet sets its own: instance type, zone, arch, os). None while its
    type is still to be described; only what its name says when EC2 could not describe it."""
    instance_type = view.status.get("instanceType")
    if not isinstance(instance_type, str) or not instance_type:
        return {}
    facts = (view.observed.get("types") or {}).get(instance_type)
    if facts is None and not view.observed.get("typesError"):
        return None
    described = provisioning_names.instance_labels(instance_type, facts or {})
    labels = {k: v for k, v in described.items() if k.startswith(machine_names.OWN_KEY_PREFIX)}
    labels[provisioning_names.CAPACITY_TYPE_LABEL] = view.spec.capacity_type
    return labels


def step(view: MachineView, progress: Progress, seen: Sight, settings) -> None:
    if not view.instance_id:
        return
    _report(view, progress, seen)
    if seen.unseen:
        # Only the API server can say the recorded Node is gone; until it does, nothing changes.
        progress.again_in(settings.machine_poll_seconds)
        return
    node = seen.node
    if node is None:
        recorded = view.status.get("nodeName")
        if seen.conflict:
            reason, message = events.NODE_PROVIDER_ID_CONFLICT, f"several Nodes name instance {view.instance_id}"
        elif seen.lost:
            reason, message = events.NODE_GONE, f"Node {recorded} is gone"
        elif seen.others:
            reason, message = events.NODE_PROVIDER_ID_MISMATCH, "a labelled Node names another instance"
        else:
            reason, message = "AwaitingNode", f"waiting for a Node with providerID of {view.instance_id}"
        progress.condition(machine_names.REGISTERED, "False", reason, message)
        progress.again_in(settings.machine_poll_seconds)
        return
    meta = node["metadata"]
    if mirrored(node):
        view.status["nodeName"], view.status["nodeUID"] = meta["name"], meta.get("uid") or ""
        if progress.condition(machine_names.REGISTERED, "True", "NodeRegistered", f"joined Node {meta['name']}"):
            progress.events.append(events.normal(events.NODE_REGISTERED, f"joined Node {meta['name']}"))
        return
    spec = view.spec
    described = instance_labels(view)
    if described is None:
        progress.condition(machine_names.REGISTERED, "False", "Registering",
                           f"waiting for instance type {view.status.get('instanceType')} to be described")
        progress.again_in(settings.machine_poll_seconds)
        return
    labels = {**spec.labels, machine_names.POOL_LABEL: view.pool} if view.pool else dict(spec.labels)
    labels.update(described)
    taints = [t.to_dict() for t in spec.taints + spec.startup_taints]
    progress.actions.append(Action("kube.register-node", meta["name"], {
        "uid": meta.get("uid"), "labels": labels, "annotations": dict(spec.annotations), "taints": taints}))
    progress.condition(machine_names.REGISTERED, "False", "Registering", f"mirroring the Machine onto Node {meta['name']}")
    progress.again_in(settings.machine_poll_seconds)
