"""A Machine's capacity and allocatable from its instance type, before its Node exists (pure).

This is what makes a Machine in-flight capacity: a scheduler-side consumer
can count it while the instance boots. The reservations follow the amounts
the EKS AMI's bootstrap gives the kubelet (kube-reserved CPU by core count,
11 MiB per pod plus 255 MiB of memory, a 100 MiB hard eviction threshold),
so allocatable is an estimate the Node's own report later replaces.
"""
from __future__ import annotations

MAX_PODS_CAP = 110
ROOT_VOLUME_GIB = 20


def max_pods(facts: dict) -> int:
    """The VPC CNI's pod limit: every ENI's secondary IPv4 addresses, plus two host-network pods."""
    enis, per_eni = facts.get("maxENIs"), facts.get("ipv4PerENI")
    if isinstance(enis, int) and isinstance(per_eni, int) and enis > 0 and per_eni > 1:
        return min(MAX_PODS_CAP, enis * (per_eni - 1) + 2)
    return MAX_PODS_CAP


def _reserved_millicores(vcpus: int) -> int:
    steps = ((1, 0.06), (1, 0.01), (2, 0.005))
    reserved, left = 0.0, vcpus
    for cores, share in steps:
        used = min(left, cores)
        reserved += used * 1000 * share
        left -= used
    reserved += max(0, left) * 1000 * 0.0025
    return int(round(reserved))


def resources(facts: dict | None) -> tuple[dict, dict]:
    """(capacity, allocatable) as Kubernetes quantities; empty when the type is unknown."""
    vcpus, memory = (facts or {}).get("vcpus"), (facts or {}).get("memoryMiB")
    if not isinstance(vcpus, int) or not isinstance(memory, int) or vcpus <= 0 or memory <= 0:
        return {}, {}
    pods = max_pods(facts)
    capacity = {"cpu": str(vcpus), "memory": f"{memory}Mi", "pods": str(pods),
                "ephemeral-storage": f"{ROOT_VOLUME_GIB}Gi"}
    reserved_memory = 255 + 11 * pods + 100
    storage_mib = ROOT_VOLUME_GIB * 1024
    allocatable = {
        "cpu": f"{vcpus * 1000 - _reserved_millicores(vcpus)}m",
        "memory": f"{max(0, memory - reserved_memory)}Mi",
        "pods": str(pods),
        "ephemeral-storage": f"{int(storage_mib * 0.9) - 1024}Mi",
    }
    gpus = facts.get("gpus")
    if isinstance(gpus, int) and gpus > 0:
        vendor = "amd.com/gpu" if "amd" in str(facts.get("gpuManufacturer", "")).lower() else "nvidia.com/gpu"
        capacity[vendor] = allocatable[vendor] = str(gpus)
    return capacity, allocatable
