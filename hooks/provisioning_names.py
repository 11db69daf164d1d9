"""The names provisioning NodePools share with pods, Nodes and users: well-known label keys, requirement
operators, the provisioned-for annotation, the labels an instance type gives its Nodes, and the annotation
consolidation leaves alone. Keep them stable."""
from __future__ import annotations

# Well-known label keys: a pool's requirement or a pod's node selector may name them, and every Node of a
# provisioned Machine carries them.
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
ZONE_LABEL = "topology.kubernetes.io/zone"
ARCH_LABEL = "kubernetes.io/arch"
OS_LABEL = "kubernetes.io/os"
CAPACITY_TYPE_LABEL = "nodewarden.io/capacity-type"  # on-demand or spot
INSTANCE_FAMILY_LABEL = "nodewarden.io/instance-family"  # m5
INSTANCE_SIZE_LABEL = "nodewarden.io/instance-size"  # large
INSTANCE_CPU_LABEL = "nodewarden.io/instance-cpu"  # vCPUs
INSTANCE_MEMORY_LABEL = "nodewarden.io/instance-memory"  # MiB
INSTANCE_GPU_COUNT_LABEL = "nodewarden.io/instance-gpu-count"
WELL_KNOWN = (INSTANCE_TYPE_LABEL, ZONE_LABEL, ARCH_LABEL, OS_LABEL, CAPACITY_TYPE_LABEL, INSTANCE_FAMILY_LABEL,
              INSTANCE_SIZE_LABEL, INSTANCE_CPU_LABEL, INSTANCE_MEMORY_LABEL, INSTANCE_GPU_COUNT_LABEL)
# The well-known labels an instance type decides (instance_labels gives them); the zone and the capacity type
# are where and how it launches.
INSTANCE_TYPE_LABELS = (INSTANCE_TYPE_LABEL, ARCH_LABEL, OS_LABEL, INSTANCE_FAMILY_LABEL, INSTANCE_SIZE_LABEL,
                        INSTANCE_CPU_LABEL, INSTANCE_MEMORY_LABEL, INSTANCE_GPU_COUNT_LABEL)
# Every Node has one, whose value no pod can know before the Node exists.
HOSTNAME_LABEL = "kubernetes.io/hostname"

# Requirement operators, as a Node selector requirement's.
IN, NOT_IN, EXISTS, DOES_NOT_EXIST, GT, LT = "In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"
OPERATORS = (IN, NOT_IN, EXISTS, DOES_NOT_EXIST, GT, LT)

# On a Machine a pool created for pending pods: JSON {"pods": ["ns/name", ...], "more": n}, written once.
PROVISIONED_FOR = "nodewarden.io/provisioned-for"
PROVISIONED_FOR_MAX_PODS = 200
# On a pod, a Node or a Machine, "true": consolidation never removes the Machine it is on, or it.
DO_NOT_DISRUPT = "nodewarden.io/do-not-disrupt"

# The AWS EBS CSI driver: the one driver whose attach limit an instance type decides (hooks.machines.capacity).
EBS_CSI_DRIVER = "ebs.csi.aws.com"

LINUX = "linux"
# EC2's architecture names -> Kubernetes' (GOARCH) names.
ARCHITECTURES = {"x86_64": "amd64", "arm64": "arm64"}


def instance_labels(instance_type: str, facts: dict) -> dict[str, str]:
    """The labels an instance of ``instance_type`` gets from its type (not its zone or capacity type).

    ``facts`` is what hooks.aws.instances.type_facts gives; a fact it lacks
    leaves its label out rather than guessing.
    """
    family, _, size = instance_type.partition(".")
    labels = {INSTANCE_TYPE_LABEL: instance_type, OS_LABEL: LINUX, INSTANCE_FAMILY_LABEL: family}
    if size:
        labels[INSTANCE_SIZE_LABEL] = size
    for name in facts.get("architectures") or ():
        if name in ARCHITECTURES:
            labels[ARCH_LABEL] = ARCHITECTURES[name]
            break
    for key, fact in ((INSTANCE_CPU_LABEL, "vcpus"), (INSTANCE_MEMORY_LABEL, "memoryMiB"),
                      (INSTANCE_GPU_COUNT_LABEL, "gpus")):
        value = facts.get(fact)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            labels[key] = str(value)
    return labels
