"""The names provisioning shares with users, pods and Nodes: well-known label keys, requirement operators,
annotations on a provisioned Machine and on what consolidation must leave alone.

A NodePool requirement or a pod's node selector may name any of WELL_KNOWN;
every Node of a provisioned Machine carries all of them (the Machine's
registration mirrors them onto the Node with its other labels).
"""
from __future__ import annotations

INSTANCE_TYPE = "node.kubernetes.io/instance-type"
ZONE = "topology.kubernetes.io/zone"
ARCH = "kubernetes.io/arch"
OS = "kubernetes.io/os"
CAPACITY_TYPE = "nodewarden.io/capacity-type"
INSTANCE_FAMILY = "nodewarden.io/instance-family"
INSTANCE_SIZE = "nodewarden.io/instance-size"
INSTANCE_CPU = "nodewarden.io/instance-cpu"
INSTANCE_MEMORY = "nodewarden.io/instance-memory"
INSTANCE_GPU_COUNT = "nodewarden.io/instance-gpu-count"
# Every Node has one, but its value is unknown until the Node exists.
HOSTNAME = "kubernetes.io/hostname"

# The labels an instance type decides (instance_labels gives them).
INSTANCE_TYPE_KEYS = (INSTANCE_TYPE, ARCH, OS, INSTANCE_FAMILY, INSTANCE_SIZE, INSTANCE_CPU, INSTANCE_MEMORY,
                      INSTANCE_GPU_COUNT)
# The labels of where and how it launches.
WELL_KNOWN = INSTANCE_TYPE_KEYS + (ZONE, CAPACITY_TYPE)

# Requirement operators, as a Node selector requirement's.
IN, NOT_IN, EXISTS, DOES_NOT_EXIST, GT, LT = "In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"
OPERATORS = (IN, NOT_IN, EXISTS, DOES_NOT_EXIST, GT, LT)

LINUX = "linux"
# EC2 architecture names -> Kubernetes' (GOARCH) names.
ARCHITECTURES = {"x86_64": "amd64", "arm64": "arm64"}

# On a Machine created for pending pods: JSON {"pods": ["ns/name", ...], "more": 0}.
PROVISIONED_FOR = "nodewarden.io/provisioned-for"
PROVISIONED_FOR_MAX_PODS = 50
# On a pod, a Node or a Machine, "true": consolidation never removes the Machine it is on, or it.
DO_NOT_DISRUPT = "nodewarden.io/do-not-disrupt"


def instance_labels(instance_type: str, facts: dict) -> dict[str, str]:
    """The labels an instance of ``instance_type`` gets from its type (not its zone or capacity type).

    ``facts`` is what hooks.aws.instances.type_facts gives; a fact it lacks
    leaves its label out rather than guessing.
    """
    family, _, size = instance_type.partition(".")
    labels = {INSTANCE_TYPE: instance_type, OS: LINUX, INSTANCE_FAMILY: family}
    if size:
        labels[INSTANCE_SIZE] = size
    for name in facts.get("architectures") or ():
        if name in ARCHITECTURES:
            labels[ARCH] = ARCHITECTURES[name]
            break
    for key, fact in ((INSTANCE_CPU, "vcpus"), (INSTANCE_MEMORY, "memoryMiB"), (INSTANCE_GPU_COUNT, "gpus")):
        value = facts.get(fact)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            labels[key] = str(value)
    return labels
