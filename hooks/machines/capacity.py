"""A Machine's capacity and allocatable from its instance type's facts, before its Node exists (pure).

This is what makes a Machine in-flight capacity: a scheduler can count it
while the instance boots. The figures are Karpenter's for AWS with its
defaults (the EKS-optimized AMIs, no kubelet overrides), so a pod planned
onto a Machine fits the Node that registers:

- capacity: the vCPUs; the memory DescribeInstanceTypes reports, less 64 MiB
  on a Graviton (its reserved CMA), less the VM's overhead
  (``VM_MEMORY_OVERHEAD_PERCENT`` of it, rounded up to a whole MiB); pods:
  the VPC CNI's limit on the default network card, ENIs × (IPv4 addresses
  per ENI − 1) + 2 (``DEFAULT_MAX_PODS`` when the type's network is
  unknown); ephemeral-storage: the default root volume
  (``ROOT_VOLUME_GIB``); GPUs as ``nvidia.com/gpu`` or ``amd.com/gpu``;
- allocatable: capacity less kube-reserved (CPU by the core table, 11 MiB
  per pod plus 255 MiB of memory, 1 GiB of ephemeral-storage) and the hard
  eviction thresholds (``memory.available`` 100 MiB, ``nodefs.available``
  10 %);
- EBS volumes it attaches: as the EBS CSI driver computes them
  (``ebs_volume_limit``).

The Node's own report replaces these once it registers.
"""
from __future__ import annotations

import math

# Share of the reported memory the hypervisor and firmware keep (Karpenter's --vm-memory-overhead-percent).
VM_MEMORY_OVERHEAD_PERCENT = 0.075
# A Graviton's contiguous memory allocator reserve, never available to the kernel's users.
GRAVITON_CMA_MIB = 64
# The kubelet's own pod limit, used when the type's ENI facts are unknown.
DEFAULT_MAX_PODS = 110
ROOT_VOLUME_GIB = 20

KUBE_RESERVED_MEMORY_BASE_MIB = 255
KUBE_RESERVED_MEMORY_PER_POD_MIB = 11
KUBE_RESERVED_EPHEMERAL_GIB = 1
EVICTION_MEMORY_MIB = 100
EVICTION_NODEFS_PERCENT = 10
# kube-reserved CPU: (from, to) millicores of the machine and the share of each, in parts per 10,000,
# each band's share truncated to whole millicores.
KUBE_RESERVED_CPU_BANDS = ((0, 1000, 600), (1000, 2000, 100), (2000, 4000, 50), (4000, 1 << 31, 25))

MIB = 1024 * 1024
GIB = 1024 * MIB

# The EBS CSI driver's attach limit (its pkg/driver/node.go and pkg/cloud/limits): a Xen type attaches 39
# volumes; any other EC2's MaximumEbsAttachments (the driver's default, 27, when unknown); the root volume
# takes one. On a shared limit the driver also counts every network interface beyond the first as attached
# when it starts, which cannot be known before: the limit here counts the first alone, and the Node's CSINode
# replaces it once the driver reports.
XEN_EBS_ATTACHMENTS = 39
DEFAULT_EBS_ATTACHMENTS = 27


def max_pods(facts: dict) -> int:
    """The VPC CNI's pod limit: the default card's ENIs × (IPv4 addresses per ENI − 1), plus two host-network pods."""
    enis, per_eni = facts.get("maxENIs"), facts.get("ipv4PerENI")
    if not isinstance(enis, int) or not isinstance(per_eni, int) or enis < 0 or per_eni < 1:
        return DEFAULT_MAX_PODS
    if enis == 0:
        return 0
    return enis * (per_eni - 1) + 2


def memory_capacity_mib(facts: dict) -> int:
    """The reported memory less a Graviton's CMA and the VM overhead (rounded up, as Karpenter computes it)."""
    mib = facts["memoryMiB"]
    architectures = facts.get("architectures") or []
    if architectures and architectures[0] == "arm64":
        mib -= GRAVITON_CMA_MIB
    # In floating point and in this order, so the rounding up lands where Karpenter's does.
    overhead = math.ceil(mib * MIB * VM_MEMORY_OVERHEAD_PERCENT / 1024 / 1024)
    return mib - overhead


def kube_reserved_millicores(vcpus: int) -> int:
    millicores = vcpus * 1000
    reserved = 0
    for start, end, share in KUBE_RESERVED_CPU_BANDS:
        if millicores >= start:
            reserved += (min(millicores, end) - start) * share // 10_000
    return reserved


def _bytes(amount: int) -> str:
    """A byte count in the largest binary unit that holds it exactly."""
    for unit, size in (("Gi", GIB), ("Mi", MIB), ("Ki", 1024)):
        if amount % size == 0:
            return f"{amount // size}{unit}"
    return str(amount)


def resources(facts: dict | None) -> tuple[dict, dict]:
    """(capacity, allocatable) as Kubernetes quantities; empty when the type is unknown."""
    vcpus, memory = (facts or {}).get("vcpus"), (facts or {}).get("memoryMiB")
    if not isinstance(vcpus, int) or not isinstance(memory, int) or vcpus <= 0 or memory <= 0:
        return {}, {}
    pods = max_pods(facts)
    memory_mib = memory_capacity_mib(facts)
    storage = ROOT_VOLUME_GIB * GIB
    capacity = {"cpu": str(vcpus), "memory": f"{memory_mib}Mi", "pods": str(pods),
                "ephemeral-storage": _bytes(storage)}
    reserved_memory_mib = KUBE_RESERVED_MEMORY_BASE_MIB + KUBE_RESERVED_MEMORY_PER_POD_MIB * pods + EVICTION_MEMORY_MIB
    nodefs_eviction = math.ceil(storage / 100 * EVICTION_NODEFS_PERCENT)
    allocatable = {
        "cpu": f"{vcpus * 1000 - kube_reserved_millicores(vcpus)}m",
        "memory": f"{max(0, memory_mib - reserved_memory_mib)}Mi",
        "pods": str(pods),
        "ephemeral-storage": _bytes(max(0, storage - KUBE_RESERVED_EPHEMERAL_GIB * GIB - nodefs_eviction)),
    }
    gpus = facts.get("gpus")
    if isinstance(gpus, int) and gpus > 0:
        vendor = "amd.com/gpu" if "amd" in str(facts.get("gpuManufacturer", "")).lower() else "nvidia.com/gpu"
        capacity[vendor] = allocatable[vendor] = str(gpus)
    return capacity, allocatable


def ebs_volume_limit(facts: dict | None) -> int:
    """How many EBS volumes a Node of the type attaches besides its root volume (at least one, as the driver
    never reports fewer)."""
    facts = facts or {}
    attachments = facts.get("ebsAttachments")
    if facts.get("hypervisor") == "xen":
        attachments = XEN_EBS_ATTACHMENTS
    elif isinstance(attachments, bool) or not isinstance(attachments, int) or attachments < 1:
        attachments = DEFAULT_EBS_ATTACHMENTS
    return max(1, attachments - 1)
