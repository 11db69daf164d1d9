"""The names provisioning NodePools share with pods, Nodes and users: well-known label keys, requirement
operators, the provisioned-for annotation. Keep them stable."""
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

# Requirement operators, as a Node selector requirement's.
IN, NOT_IN, EXISTS, DOES_NOT_EXIST, GT, LT = "In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"
OPERATORS = (IN, NOT_IN, EXISTS, DOES_NOT_EXIST, GT, LT)

# On a Machine a pool created for pending pods: JSON {"pods": ["ns/name", ...], "more": n}, written once.
PROVISIONED_FOR = "nodewarden.io/provisioned-for"
PROVISIONED_FOR_MAX_PODS = 50
