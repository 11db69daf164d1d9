"""Small builders for provisioning tests: raw pods and DaemonSets as the API server has them, instance types
as hooks.aws.instances.type_facts gives them, a catalog, Slots."""
from __future__ import annotations

import datetime as dt

from hooks import provisioning_names
from hooks.machines.spec import Taint
from hooks.provisioning import catalog, pods, resources, scheduling

NOW = dt.datetime(2026, 11, 27, 13, 0, 0, tzinfo=dt.timezone.utc)
ZONES = ("us-east-1a", "us-east-1b")


def stamp(seconds_ago: float) -> str:
    return (NOW - dt.timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def raw_pod(name: str, cpu: str = "500m", memory: str = "512Mi", *, namespace: str = "default",
            labels: dict | None = None, since: float = 5.0, **spec) -> dict:
    """A pending pod the scheduler found unschedulable ``since`` seconds before NOW."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}",
                     "labels": dict(labels if labels is not None else {"app": name.rsplit("-", 1)[0]})},
        "spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
                 **spec},
        "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "lastTransitionTime": stamp(since)}]},
    }


def pod(name: str, cpu: str = "500m", memory: str = "512Mi", **kwargs) -> pods.PodView:
    return pods.view(raw_pod(name, cpu, memory, **kwargs))


def daemonset(name: str, cpu: str = "100m", memory: str = "128Mi", **spec) -> pods.PodView:
    return pods.from_daemonset({
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {"template": {"metadata": {"labels": {"app": name}}, "spec": {
            "containers": [{"name": "main", "resources": {"requests": {"cpu": cpu, "memory": memory}}}], **spec}}}})


def facts(vcpus: int, memory_gib: float, *, arch: str = "x86_64", gpus: int = 0) -> dict:
    return {"vcpus": vcpus, "memoryMiB": int(memory_gib * 1024), "maxENIs": 4, "ipv4PerENI": 15, "gpus": gpus,
            "gpuManufacturer": "NVIDIA" if gpus else "", "architectures": [arch]}


# name: (vcpus, memory GiB, on-demand USD per hour)
TYPES = {
    "m5.large": (2, 8, 0.096), "m5.xlarge": (4, 16, 0.192), "m5.2xlarge": (8, 32, 0.384),
    "c5.large": (2, 4, 0.085), "c5.xlarge": (4, 8, 0.17), "r5.large": (2, 16, 0.126),
}


def type_facts(types: dict, *, arm64: frozenset = frozenset(), gpus: dict | None = None) -> dict[str, dict]:
    """``facts`` of each of ``types`` (TYPES' shape); ``arm64`` names the Graviton ones, ``gpus`` a type's GPUs."""
    return {n: facts(v, m, arch="arm64" if n in arm64 else "x86_64", gpus=(gpus or {}).get(n, 0))
            for n, (v, m, _) in types.items()}


def options(types: dict | None = None, zones: tuple = ZONES, spot: dict | None = None, *,
            arm64: frozenset = frozenset(), gpus: dict | None = None) -> list[catalog.InstanceOption]:
    types = TYPES if types is None else types
    return catalog.options(type_facts(types, arm64=arm64, gpus=gpus), {n: list(zones) for n in types},
                           {"on-demand": {n: p for n, (_, _, p) in types.items() if p is not None},
                            "spot": dict(spot or {})})


def pool(name: str = "general", **kwargs) -> scheduling.PoolView:
    return scheduling.PoolView(name, **kwargs)


def node_slot(name: str, cpu: str = "2", memory: str = "8Gi", *, pool_name: str = "general", zone: str = ZONES[0],
              requested: dict | None = None, labels: dict | None = None, taints: tuple = (), residents: tuple = (),
              in_flight: bool = False, provisioned_for: tuple = ()) -> scheduling.Slot:
    all_labels = {provisioning_names.ZONE_LABEL: zone, provisioning_names.HOSTNAME_LABEL: name, **(labels or {})}
    return scheduling.Slot(name=name, pool=pool_name, labels=all_labels, taints=tuple(taints),
                           allocatable=resources.parse({"cpu": cpu, "memory": memory, "pods": "110"}),
                           requested=resources.parse(requested or {}), pods=tuple(residents),
                           machine=name, in_flight=in_flight, provisioned_for=tuple(provisioned_for),
                           host_ports=frozenset(p for r in residents for p in r.host_ports))


def taint(key: str, value: str | None = None, effect: str = "NoSchedule") -> Taint:
    return Taint(key, effect, value)


def placements(result: scheduling.Result) -> dict[str, str]:
    """Every placed pod -> its Slot, or "claim<i>" for the i-th new claim."""
    found = dict(result.placed)
    for index, claim in enumerate(result.claims):
        for key in claim.pods:
            found[key] = f"claim{index}"
    return found
