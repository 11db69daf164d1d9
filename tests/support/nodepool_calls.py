"""One nodepool call of a provisioning pool, decided as the pipeline decides a verified one, on readings as
gather stores them: the pool, its Machines (with or without Nodes), the Nodes and the pods bound to them, the
pending pods, EC2's types and prices. For tests of the pool's whole decision."""
from __future__ import annotations

import copy
import dataclasses
import json

from hooks import conditions, controllers, machine_names, provisioning_names
from hooks.config import load_settings
from hooks.contract import parse_request
from hooks.machines import capacity, spec
from hooks.plan import Plan
from tests.support.provisioning import NOW, TYPES, ZONES, facts, stamp
from worlds.envelope import hook_request

POOL = "web"
POOL_UID = "uid-pool-web"
SUBNETS = [{"id": "subnet-a", "zone": ZONES[0]}, {"id": "subnet-b", "zone": ZONES[1]}]


def pool(*, limits: dict | None = None, requirements: list | None = None, budgets: list | None = None,
         consolidate_after: str | None = None, image: str = "ami-1") -> dict:
    spec: dict = {"template": {"metadata": {"labels": {"team": "web"}},
                               "spec": {"subnets": [s["id"] for s in SUBNETS], "imageId": image}}}
    if limits:
        spec["limits"] = limits
    if requirements:
        spec["requirements"] = requirements
    disruption: dict = {}
    if budgets is not None:
        disruption["budgets"] = budgets
    if consolidate_after is not None:
        disruption["consolidateAfter"] = consolidate_after
    if disruption:
        spec["disruption"] = disruption
    return {"apiVersion": machine_names.API_VERSION, "kind": machine_names.NODEPOOL_KIND,
            "metadata": {"name": POOL, "uid": POOL_UID, "generation": 1, "creationTimestamp": stamp(86400)},
            "spec": spec, "status": {}}


def template_hash(obj: dict) -> str:
    return spec.pool(obj).template_hash


def machine(name: str, obj: dict, *, instance_type: str = "m5.xlarge", zone: str = ZONES[0], node: bool = True,
            initialized: bool = True, deleting: bool = False, annotations: dict | None = None,
            created: float = 7200, launched: bool = True, made: dict | None = None) -> dict:
    """A Machine of the pool, made from its template now unless ``annotations`` say otherwise."""
    status: dict = {"conditions": []}
    if launched:
        cap, alloc = capacity.resources(facts(*TYPES[instance_type][:2]))
        status.update(instanceID=f"i-{name}", instanceType=instance_type, zone=zone, capacity=cap, allocatable=alloc,
                      providerID=f"aws:///{zone}/i-{name}")
    if node:
        status.update(nodeName=f"node-{name}", nodeUID=f"nuid-{name}")
        for ctype in (machine_names.LAUNCHED, machine_names.REGISTERED):
            status, _ = conditions.set(status, ctype, "True", ctype, ctype, stamp(created - 60))
    if initialized:
        status, _ = conditions.set(status, machine_names.INITIALIZED, "True", "Initialized", "Initialized",
                                   stamp(created - 90))
    meta = {"name": name, "uid": f"uid-{name}", "creationTimestamp": stamp(created),
            "labels": {machine_names.POOL_LABEL: POOL},
            "annotations": {machine_names.TEMPLATE_HASH: template_hash(obj), **(annotations or {})},
            "ownerReferences": [{"apiVersion": machine_names.API_VERSION, "kind": machine_names.NODEPOOL_KIND,
                                 "name": POOL, "uid": POOL_UID, "controller": True}]}
    if deleting:
        meta["deletionTimestamp"] = stamp(5)
    own = {"instanceTypes": [instance_type], "subnets": ["subnet-a", "subnet-b"], "imageId": "ami-1"}
    return {"apiVersion": machine_names.API_VERSION, "kind": machine_names.MACHINE_KIND, "metadata": meta,
            "spec": made if made is not None else own, "status": status}


def node_of(machine_obj: dict, *, ready: bool = True, unschedulable: bool = False) -> dict:
    """The Machine's Node, Ready, with its instance type's allocatable."""
    status = machine_obj["status"]
    name = status["nodeName"]
    labels = {machine_names.MACHINE_LABEL: machine_obj["metadata"]["name"], machine_names.POOL_LABEL: POOL,
              provisioning_names.ZONE_LABEL: status.get("zone") or ZONES[0],
              provisioning_names.HOSTNAME_LABEL: name,
              provisioning_names.INSTANCE_TYPE_LABEL: status.get("instanceType") or "m5.xlarge"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": status["nodeUID"], "labels": labels, "annotations": {}},
            "spec": {"unschedulable": unschedulable, "providerID": status.get("providerID")},
            "status": {"allocatable": dict(status["allocatable"]),
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def bound(name: str, on: dict, cpu: str = "500m", memory: str = "512Mi", *, owner: str = "ReplicaSet",
          labels: dict | None = None, namespace: str = "default", started: float = 3600, **spec) -> dict:
    """A pod running on the Node ``on``."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}",
                         "labels": dict(labels if labels is not None else {"app": name.rsplit("-", 1)[0]}),
                         "creationTimestamp": stamp(started),
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": owner, "name": f"{name}-owner",
                                              "uid": f"uid-{name}-owner", "controller": True}]},
            "spec": {"nodeName": on["metadata"]["name"],
                     "containers": [{"name": "main", "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
                     **spec},
            "status": {"phase": "Running", "startTime": stamp(started)}}


@dataclasses.dataclass
class World:
    obj: dict
    machines: list = dataclasses.field(default_factory=list)
    nodes: list = dataclasses.field(default_factory=list)
    bound: list = dataclasses.field(default_factory=list)
    pending: list = dataclasses.field(default_factory=list)
    extra: dict = dataclasses.field(default_factory=dict)  # more readings (PodDisruptionBudgets, ...)
    fencing_requests: list = dataclasses.field(default_factory=list)  # ours, as the API server lists them

    def add(self, name: str, *pods_on: tuple, node: bool = True, **kwargs) -> dict:
        """A Machine (and its Node, with the pods given as (name, cpu, memory) on it)."""
        made = machine(name, self.obj, node=node, **kwargs)
        self.machines.append(made)
        if node and made["status"].get("allocatable"):
            found = node_of(made)
            self.nodes.append(found)
            for pod_name, cpu, memory in pods_on:
                self.bound.append(bound(pod_name, found, cpu, memory))
        return made

    def readings(self) -> dict:
        named = self.obj["spec"]["template"]["spec"].get("subnets") or []
        subnets = [s for s in SUBNETS if s["id"] in named]
        return {"pending": self.pending, "bound": self.bound, "nodes": self.nodes, "pools": [self.obj],
                "machines": self.machines, "daemonsets": [],
                "typeFacts": {n: facts(v, m) for n, (v, m, _) in TYPES.items()},
                "zoneOfferings": {n: list(ZONES) for n in TYPES},
                "prices": {"on-demand": {n: p for n, (_, _, p) in TYPES.items()}, "spot": []},
                "zones": {POOL: sorted({s["zone"] for s in subnets})}, "subnets": subnets, **self.extra}

    def call(self, now=NOW, settings: dict | None = None) -> Plan:
        kind, module = controllers.load("nodepool")
        shown = json.loads(json.dumps(self.machines))
        body = hook_request("nodepool", copy.deepcopy(self.obj), children=shown)
        request = dataclasses.replace(parse_request(body, kind, "sync"), verified=True)
        observed = {"machines": json.loads(json.dumps(self.machines)),
                    "fencingRequests": json.loads(json.dumps(self.fencing_requests)),
                    "provisioning": json.loads(json.dumps(self.readings()))}
        env = {"NODEWARDEN_CLUSTER_NAME": "test-cluster", **(settings or {})}
        return module.decide(request, load_settings(env), now, observed)


def created(plan: Plan, world: World) -> list[dict]:
    """The children the call asks Metacontroller to create."""
    have = {m["metadata"]["name"] for m in world.machines}
    return [c for c in plan.response["children"] if c["metadata"]["name"] not in have]


def removed(plan: Plan, world: World) -> set[str]:
    """The live Machines the call leaves out of its children (Metacontroller deletes them)."""
    kept = {c["metadata"]["name"] for c in plan.response["children"]}
    return {m["metadata"]["name"] for m in world.machines
            if not m["metadata"].get("deletionTimestamp") and m["metadata"]["name"] not in kept}

