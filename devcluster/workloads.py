"""Workloads on the local stack: Deployments of identical pods, and how full they leave a pool's Nodes.

The e2e tests of provisioning and the benchmark drive pools with these:

    create_deployment(api, "ns", "web", replicas=40, requests={"cpu": "1", "memory": "256Mi"},
                      node_selector={"example.com/pool": "a"})
    wait_running(api, "ns", "web", 40, timeout=300)
    pool_utilization(api, "a")  # Utilization(cpu=0.84, memory=0.05, ...)

Utilization is the reserved kind a scheduler sees: the requests of the pods
bound to the pool's Nodes over the Nodes' allocatable, not what the
containers use (kwok's pods use nothing).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from lightkube.utils.quantity import parse_quantity

from hooks import machine_names

from .api import AdminApi, wait_for

APP_LABEL = "app.kubernetes.io/name"
IMAGE = "registry.k8s.io/pause:3.10"
# The resources utilization is reported for.
RESOURCES = ("cpu", "memory")
# Pods that hold no resources any more: the API server still lists them until they are deleted.
DONE_PHASES = ("Succeeded", "Failed")


def deployments(namespace: str) -> str:
    return f"/apis/apps/v1/namespaces/{namespace}/deployments"


def pod_template(name: str, *, requests: Mapping[str, str], node_selector: Mapping[str, str] | None = None,
                 zone_spread: bool = False, min_domains: int | None = None,
                 tolerations: Iterable[dict] = ()) -> dict:
    """A pause pod labelled ``app.kubernetes.io/name: <name>`` requesting ``requests`` (limits equal: Guaranteed).

    ``zone_spread``: a hard topology spread of those pods over ``topology.kubernetes.io/zone``
    (maxSkew 1); ``min_domains`` makes the scheduler count zones that have no Node yet as holding
    none of them, so the pods spread before every zone has a Node."""
    labels = {APP_LABEL: name}
    spec: dict = {
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "app", "image": IMAGE,
                        "resources": {"requests": dict(requests), "limits": dict(requests)}}],
    }
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    if zone_spread:
        constraint = {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                      "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": labels}}
        if min_domains:
            constraint["minDomains"] = min_domains
        spec["topologySpreadConstraints"] = [constraint]
    return {"metadata": {"labels": labels}, "spec": spec}


def deployment_manifest(name: str, *, replicas: int, **pod) -> dict:
    """A Deployment of ``replicas`` pods made by ``pod_template(name, **pod)``."""
    template = pod_template(name, **pod)
    labels = template["metadata"]["labels"]
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": labels},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels}, "template": template}}


def daemonset_manifest(name: str, **pod) -> dict:
    """A DaemonSet of pods made by ``pod_template(name, **pod)``."""
    template = pod_template(name, **pod)
    labels = template["metadata"]["labels"]
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "labels": labels},
            "spec": {"selector": {"matchLabels": labels}, "template": template}}


def create_deployment(api: AdminApi, namespace: str, name: str, **manifest) -> dict:
    """Create the Deployment ``deployment_manifest(name, **manifest)`` describes."""
    return api.create(deployments(namespace), deployment_manifest(name, **manifest))


def scale(api: AdminApi, namespace: str, name: str, replicas: int) -> None:
    api.patch(f"{deployments(namespace)}/{name}", {"spec": {"replicas": replicas}})


def deployment_pods(api: AdminApi, namespace: str, name: str) -> list[dict]:
    """The Deployment's pods, those being deleted too."""
    return api.get(f"/api/v1/namespaces/{namespace}/pods", params={"labelSelector": f"{APP_LABEL}={name}"})["items"]


def running(pods: Iterable[dict]) -> list[dict]:
    """The pods that run on a Node and are not being deleted."""
    return [p for p in pods if (p.get("status") or {}).get("phase") == "Running"
            and (p.get("spec") or {}).get("nodeName") and not p["metadata"].get("deletionTimestamp")]


def wait_running(api: AdminApi, namespace: str, name: str, count: int, *, timeout: float) -> list[dict]:
    """Until exactly ``count`` of the Deployment's pods run and no other is left; returns them."""
    def check():
        pods = deployment_pods(api, namespace, name)
        return len(pods) == count and len(running(pods)) == count and pods
    return wait_for(check, f"{count} pods of {namespace}/{name} Running", timeout=timeout, interval=0.5)


# -- reserved utilization (pure) -------------------------------------------------------

def _amounts(mapping: Mapping[str, str] | None) -> dict[str, float]:
    return {key: float(parse_quantity(str(value))) for key, value in (mapping or {}).items()}


def _add(total: dict[str, float], more: Mapping[str, float]) -> None:
    for key, value in more.items():
        total[key] = total.get(key, 0.0) + value


def pod_requests(pod: Mapping) -> dict[str, float]:
    """What a pod reserves on its Node, as the scheduler counts it: the larger of its containers'
    requests summed and each init container's, plus its overhead (cpu in cores, memory in bytes)."""
    spec = pod.get("spec") or {}
    total: dict[str, float] = {}
    for container in spec.get("containers") or []:
        _add(total, _amounts((container.get("resources") or {}).get("requests")))
    for container in spec.get("initContainers") or []:
        for key, value in _amounts((container.get("resources") or {}).get("requests")).items():
            total[key] = max(total.get(key, 0.0), value)
    _add(total, _amounts(spec.get("overhead")))
    return total


@dataclass(frozen=True)
class Utilization:
    """The pods' requests over the Nodes' allocatable, per resource (cpu in cores, memory in bytes)."""

    nodes: int
    pods: int
    requested: dict[str, float]
    allocatable: dict[str, float]

    def ratio(self, resource: str) -> float:
        """requested / allocatable; 0 when no Node offers the resource."""
        offered = self.allocatable.get(resource, 0.0)
        return self.requested.get(resource, 0.0) / offered if offered else 0.0

    @property
    def cpu(self) -> float:
        return self.ratio("cpu")

    @property
    def memory(self) -> float:
        return self.ratio("memory")


def utilization(nodes: Iterable[Mapping], pods: Iterable[Mapping]) -> Utilization:
    """Reserved utilization of ``nodes`` by those of ``pods`` bound to one of them and not done."""
    names = set()
    allocatable: dict[str, float] = {}
    for node in nodes:
        names.add(node["metadata"]["name"])
        _add(allocatable, {k: v for k, v in _amounts((node.get("status") or {}).get("allocatable")).items()
                           if k in RESOURCES})
    requested: dict[str, float] = {}
    counted = 0
    for pod in pods:
        if (pod.get("spec") or {}).get("nodeName") not in names:
            continue
        if (pod.get("status") or {}).get("phase") in DONE_PHASES:
            continue
        counted += 1
        _add(requested, {k: v for k, v in pod_requests(pod).items() if k in RESOURCES})
    return Utilization(nodes=len(names), pods=counted, requested=requested, allocatable=allocatable)


# -- reads -------------------------------------------------------------------------------

def pool_nodes(api: AdminApi, pool: str) -> list[dict]:
    """The Nodes of the pool's Machines (their nodewarden.io/nodepool label)."""
    return api.get("/api/v1/nodes", params={"labelSelector": f"{machine_names.POOL_LABEL}={pool}"})["items"]


def bound_pods(api: AdminApi) -> list[dict]:
    """Every pod bound to a Node and not done, in one list."""
    selector = "spec.nodeName!=," + ",".join(f"status.phase!={p}" for p in DONE_PHASES)
    return api.get("/api/v1/pods", params={"fieldSelector": selector})["items"]


def pool_utilization(api: AdminApi, pool: str) -> Utilization:
    return utilization(pool_nodes(api, pool), bound_pods(api))
