"""The names Machines and NodePools share with Nodes, EC2 and users: keep them stable."""
from __future__ import annotations

from hooks.ec2_names import OWNED, cluster_owned, cluster_tag

GROUP = "nodewarden.io"
# Label, annotation and taint keys under this prefix are nodewarden's own: a
# spec may not set them (a template setting nodewarden.io/machine would hide
# a Node from its Machine).
OWN_KEY_PREFIX = "nodewarden.io/"
# A Machine's name is the value of its Node's nodewarden.io/machine label, a
# NodePool's the value of nodewarden.io/nodepool: label values are at most 63 characters.
MAX_NAME = 63
API_VERSION = "nodewarden.io/v1alpha1"
MACHINE_KIND = "Machine"
NODEPOOL_KIND = "NodePool"

# On Machines (set by the nodepool) and on Nodes (mirrored at registration).
POOL_LABEL = "nodewarden.io/nodepool"
# On the Node: the kubelet registers with it, so a Machine relates only its own Node.
MACHINE_LABEL = "nodewarden.io/machine"
# On a Machine: the hash of the pool template it was made from (drift).
TEMPLATE_HASH = "nodewarden.io/template-hash"
# On a Machine the pool made to replace another: which one, and why (JSON, hooks.nodepools.records).
REPLACES = "nodewarden.io/replaces"
# On the Node: the label, annotation and taint keys the Machine mirrored (JSON), written once.
MANAGED_KEYS = "nodewarden.io/managed-keys"

# Taints. The kubelet registers with the first: no pod lands before the labels do.
UNREGISTERED_TAINT = "nodewarden.io/unregistered"
UNREGISTERED_EFFECT = "NoExecute"
# Taints Kubernetes puts on a Node while it starts and takes off by itself (the node lifecycle controller
# until it has seen the Node Ready, the cloud controller until it has initialized it): no pod lands meanwhile.
EPHEMERAL_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable",
                    "node.cloudprovider.kubernetes.io/uninitialized")
# A Machine being terminated: node-detacher takes the node out of its load balancers.
DISRUPTED_TAINT = "nodewarden.io/disrupted"
DISRUPTED_EFFECT = "NoSchedule"
# On the Node, with the disrupted taint: why its Machine is going (a disruption reason, or Deleted).
DISRUPTION_REASON = "nodewarden.io/disruption-reason"

# EC2 tags on every instance and volume a Machine launches.
TAG_POOL = "nodewarden.io/nodepool"
TAG_MACHINE = "nodewarden.io/machine"
TAG_MACHINE_UID = "nodewarden.io/machine-uid"
TAG_NAME = "Name"


def instance_tags(cluster_name: str, pool: str, machine: str, uid: str) -> list[dict]:
    """The tags a Machine launches its instance with."""
    return [
        {"Key": cluster_tag(cluster_name), "Value": OWNED},
        {"Key": TAG_POOL, "Value": pool},
        {"Key": TAG_MACHINE, "Value": machine},
        {"Key": TAG_MACHINE_UID, "Value": uid},
        {"Key": TAG_NAME, "Value": machine},
    ]


def machines_instance(tags: dict, machine_uid: str, cluster_name: str = "") -> bool:
    """Whether an instance's tags make it the Machine's to act on: its UID tag, or (given ``cluster_name``
    only for the instance the Machine itself records) this cluster's tag: a user's edit of the UID tag
    does not make our own record someone else's instance."""
    if tags.get(TAG_MACHINE_UID) == machine_uid:
        return True
    return cluster_owned(tags, cluster_name)

# Machine conditions.
LAUNCHED = "Launched"
REGISTERED = "Registered"
INITIALIZED = "Initialized"
DRIFTED = "Drifted"
DISRUPTED = "Disrupted"
TERMINATING = "Terminating"
CONDITION_TYPES = (LAUNCHED, REGISTERED, INITIALIZED, DRIFTED, DISRUPTED, TERMINATING)

# Phases as counted in a NodePool's status.machines.
PHASES = ("Launching", "Registered", "Initialized", "Terminating")

# Resources every kubelet reports; any other capacity key is an extended resource.
STANDARD_RESOURCES = ("cpu", "memory", "pods", "ephemeral-storage")

# The reasons of nodewarden_machines_launched_total: why a pool created a Machine.
LAUNCH_PROVISIONING, LAUNCH_REPLACEMENT, LAUNCH_REPLICAS = "Provisioning", "Replacement", "Replicas"
