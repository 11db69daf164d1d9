"""Which owner a fenced node has, proven from what the owner itself holds, read fresh (pure).

A Node's labels and annotations, and an instance's tags, are anyone's to
write: they only say where to look (``to_read``; a Karpenter node's
NodeClaims are looked for by its Node's label or its instance's tag). The owner is the one whose
own object names this node:

- nodewarden Machine: the Machine the ``nodewarden.io/machine`` label names
  records this Node (name and uid) and this instance in its status;
- Karpenter NodeClaim: its ``status.providerID`` is the Node's
  ``spec.providerID`` and its ``status.nodeName`` the Node's name;
- EC2 Auto Scaling group: DescribeAutoScalingInstances names a group for the
  node's instance;
- Cluster API Machine: the Machine the annotations name has
  ``status.nodeRef.name`` = the Node, and its ``spec.providerID``, when set,
  is the Node's.

Owners are tried in that order. A hint whose proof could not be read, two
NodeClaims naming one node, or instance tags that could not be read (the
only hint of a group) are not "no owner": ``attribute`` raises Unreadable,
and the caller waits.
"""
from __future__ import annotations

from dataclasses import dataclass

from hooks import conditions, machine_names, owner_names, providerid


class Unreadable(Exception):
    """A hint names an owner whose proof could not be read: whether it owns the node is not known."""


@dataclass(frozen=True)
class Owner:
    kind: str  # owner_names.OWNER_*
    name: str  # the NodeClaim, the group, the Machine
    namespace: str = ""
    uid: str = ""
    group: str = ""  # the owner group the guards count: a NodePool, an ASG, a MachineSet or MachineDeployment
    instance_id: str = ""
    region: str = ""

    @property
    def member(self) -> str:
        """The member of its group this node is: what another request's record is matched by."""
        if self.kind == owner_names.OWNER_ASG:
            return self.instance_id
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    def to_dict(self) -> dict:
        out = {"kind": self.kind, "name": self.name, "namespace": self.namespace, "uid": self.uid,
               "group": self.group, "instanceID": self.instance_id, "region": self.region}
        return {k: v for k, v in out.items() if v}


def _section(obj, *path: str) -> dict:
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj if isinstance(obj, dict) else {}


def _text(obj, *path: str) -> str:
    *head, last = path
    value = _section(obj, *head).get(last)
    return value if isinstance(value, str) else ""


def _instance(node: dict) -> providerid.ProviderID | None:
    try:
        return providerid.parse(_text(node, "spec", "providerID"))
    except providerid.ProviderIDError:
        return None


def to_read(node: dict, instance_tags: dict | None) -> dict:
    """Where to look, from the hints: {"machine": name, "nodeClaims": providerID, "asg": instance id,
    "capiMachine": [namespace, name]}; an owner with no hint is not looked for."""
    labels, annotations = _section(node, "metadata", "labels"), _section(node, "metadata", "annotations")
    wanted: dict = {}
    pid = _instance(node)
    if isinstance(labels.get(machine_names.MACHINE_LABEL), str) and labels[machine_names.MACHINE_LABEL]:
        wanted["machine"] = labels[machine_names.MACHINE_LABEL]
    karpenter = labels.get(owner_names.KARPENTER_NODEPOOL_LABEL) or \
        (instance_tags or {}).get(owner_names.KARPENTER_NODEPOOL_LABEL)  # Karpenter tags its instances so too
    if karpenter and _text(node, "spec", "providerID"):
        wanted["nodeClaims"] = _text(node, "spec", "providerID")
    if pid is not None and (instance_tags or {}).get(owner_names.ASG_NAME_TAG):
        wanted["asg"] = pid.instance_id
    machine = annotations.get(owner_names.CAPI_MACHINE_ANNOTATION)
    namespace = annotations.get(owner_names.CAPI_CLUSTER_NAMESPACE_ANNOTATION)
    if isinstance(machine, str) and machine and isinstance(namespace, str) and namespace:
        wanted["capiMachine"] = [namespace, machine]
    return wanted


def _checked(proofs: dict, key: str) -> None:
    if proofs.get(f"{key}Error"):
        raise Unreadable(f"{key}: {proofs[f'{key}Error']}")


def attribute(node: dict, proofs: dict) -> Owner | None:
    """The node's owner, proven by ``proofs`` (what gather read for ``to_read``), or None when none is."""
    pid = _instance(node)
    if pid is None:
        return None
    region = pid.region or ""
    for kind, prove in ((owner_names.OWNER_MACHINE, _machine), (owner_names.OWNER_NODECLAIM, _nodeclaim),
                        (owner_names.OWNER_ASG, _asg), (owner_names.OWNER_CAPI_MACHINE, _capi)):
        found = prove(node, pid, proofs)
        if found is not None:
            return Owner(kind=kind, region=region, instance_id=pid.instance_id, **found)
    # The instance's tags are the only hint of an Auto Scaling group (and of Karpenter once its label is gone):
    # tags that could not be read are no proof of "no owner".
    _checked(proofs, "instance")
    return None


def _machine(node: dict, pid: providerid.ProviderID, proofs: dict) -> dict | None:
    _checked(proofs, "machine")
    machine = proofs.get("machine")
    if not isinstance(machine, dict):
        return None
    status, meta = _section(machine, "status"), _section(machine, "metadata")
    node_uid = _text(node, "metadata", "uid")
    if status.get("nodeName") != _text(node, "metadata", "name") or not node_uid or status.get("nodeUID") != node_uid \
            or status.get("instanceID") != pid.instance_id:
        return None
    return {"name": _text(machine, "metadata", "name"), "uid": _text(machine, "metadata", "uid"),
            "group": _section(meta, "labels").get(machine_names.POOL_LABEL) or ""}


def _nodeclaim(node: dict, pid: providerid.ProviderID, proofs: dict) -> dict | None:
    _checked(proofs, "nodeClaims")
    claims = proofs.get("nodeClaims")
    provider, name = _text(node, "spec", "providerID"), _text(node, "metadata", "name")
    matching = [c for c in claims or [] if isinstance(c, dict) and provider
                and _text(c, "status", "providerID") == provider and _text(c, "status", "nodeName") == name]
    if not matching:
        return None
    if len(matching) > 1:  # which of them Karpenter keeps for the node cannot be told: wait, naming them
        named = ", ".join(sorted(_text(c, "metadata", "name") or "(unnamed)" for c in matching))
        raise Unreadable(f"nodeClaims: {len(matching)} NodeClaims ({named}) name this node; which one owns it "
                         "cannot be told")
    claim = matching[0]
    return {"name": _text(claim, "metadata", "name"), "uid": _text(claim, "metadata", "uid"),
            "group": nodeclaim_pool(claim)}


def nodeclaim_pool(claim: dict) -> str:
    """The NodePool of a NodeClaim, as Karpenter labels the claim it made."""
    pool = _section(claim, "metadata", "labels").get(owner_names.KARPENTER_NODEPOOL_LABEL)
    return pool if isinstance(pool, str) else ""


def _asg(node: dict, pid: providerid.ProviderID, proofs: dict) -> dict | None:
    _checked(proofs, "asg")
    found = proofs.get("asgInstance")
    if not isinstance(found, dict) or found.get("instanceId") != pid.instance_id or not found.get("group"):
        return None
    return {"name": found["group"], "group": found["group"]}


def _capi(node: dict, pid: providerid.ProviderID, proofs: dict) -> dict | None:
    _checked(proofs, "capiMachine")
    machine = proofs.get("capiMachine")
    if not isinstance(machine, dict):
        return None
    if _text(machine, "status", "nodeRef", "name") != _text(node, "metadata", "name"):
        return None
    declared = _text(machine, "spec", "providerID")
    if declared and declared != _text(node, "spec", "providerID"):
        return None
    namespace = _text(machine, "metadata", "namespace")
    return {"name": _text(machine, "metadata", "name"), "namespace": namespace,
            "uid": _text(machine, "metadata", "uid"), "group": capi_group(machine)}


def capi_group(machine: dict) -> str:
    """A Cluster API Machine's group: its controller (a MachineSet, a KubeadmControlPlane), else its
    MachineDeployment, else itself."""
    namespace = _text(machine, "metadata", "namespace")
    refs = machine.get("metadata", {}).get("ownerReferences") if isinstance(machine.get("metadata"), dict) else None
    for ref in refs if isinstance(refs, list) else []:
        if isinstance(ref, dict) and ref.get("controller") is True and isinstance(ref.get("kind"), str) \
                and isinstance(ref.get("name"), str):
            return f"{namespace}/{ref['kind']}/{ref['name']}"
    deployment = _section(machine, "metadata", "labels").get(owner_names.CAPI_DEPLOYMENT_LABEL)
    if isinstance(deployment, str) and deployment:
        return f"{namespace}/MachineDeployment/{deployment}"
    return f"{namespace}/{owner_names.CAPI_MACHINE_KIND}/{_text(machine, 'metadata', 'name')}"


def condition_is(status: dict, ctype: str, value: str) -> bool:
    return (conditions.find(status, ctype) or {}).get("status") == value
