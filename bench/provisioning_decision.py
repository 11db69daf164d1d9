"""Provisioning's placement decision at scale: CPU time of hooks.provisioning.scheduling.schedule.

    .venv/bin/python bench/provisioning_decision.py [--pods 1000] [--types 50] [--slots 40] [--residents N]
        [--repeat 20]

A large cluster: ``--slots 300 --residents 25`` (300 existing Nodes running
25 pods each, 7,500 pods in all).

The world: --types instance types (families m5, c5, r5, m6g, c6g, r6g in
sizes large to 24xlarge, with prices) offered in three zones, spot in two;
three provisioning pools (general; arm64 spot; a tainted GPU-less batch
pool with a cpu limit); --slots existing Nodes with 3 to 11 pods on them;
four DaemonSets; and --pods pending pods from 40 Deployments of assorted sizes, a
quarter of them spread over zones, some with hostname anti-affinity, node
selectors, tolerations or preferred zones, and 5 % lone pods. Times are the
CPU time (time.process_time) of schedule() including reading the raw pods
into PodViews, median and worst of --repeat runs; the grouped run and the
one-pod-at-a-time run are checked to decide the same.

With --residents, the existing Nodes run that many pods each (one in five a
replica of a pending Deployment, with its constraints), and are read from
raw Nodes and pods into Slots (hooks.provisioning.slots.of_node) within the
time, as a round reads them; that reading is also timed alone.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import random
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hooks import provisioning_names  # noqa: E402
from hooks.machines.spec import Taint  # noqa: E402
from hooks.provisioning import catalog, pods, requirements, resources, scheduling, slots  # noqa: E402

ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
FAMILIES = {"m5": (4, 0.048, "x86_64"), "c5": (2, 0.0425, "x86_64"), "r5": (8, 0.063, "x86_64"),
            "m6g": (4, 0.0385, "arm64"), "c6g": (2, 0.034, "arm64"), "r6g": (8, 0.0504, "arm64"),
            "m5a": (4, 0.043, "x86_64"), "c5a": (2, 0.0385, "x86_64"), "r5a": (8, 0.0565, "x86_64")}
DEPLOYMENTS = 40
SIZES = (("large", 2), ("xlarge", 4), ("2xlarge", 8), ("4xlarge", 16), ("8xlarge", 32), ("12xlarge", 48),
         ("16xlarge", 64), ("24xlarge", 96))


def world_catalog(count: int) -> list[catalog.InstanceOption]:
    facts, zones, on_demand, spot = {}, {}, {}, {}
    for family, (gib_per_cpu, price_per_cpu, arch) in FAMILIES.items():
        for size, vcpus in SIZES:
            name = f"{family}.{size}"
            facts[name] = {"vcpus": vcpus, "memoryMiB": vcpus * gib_per_cpu * 1024, "maxENIs": 8, "ipv4PerENI": 30,
                           "gpus": 0, "gpuManufacturer": "", "architectures": [arch]}
            zones[name] = list(ZONES)
            on_demand[name] = round(vcpus * price_per_cpu, 4)
            for i, zone in enumerate(ZONES[:2]):
                spot[(name, zone)] = round(on_demand[name] * (0.3 + 0.05 * i), 4)
    chosen = sorted(facts)[:count]
    return catalog.options({n: facts[n] for n in chosen}, zones, {"on-demand": on_demand, "spot": spot})


def world_pools() -> list[scheduling.PoolView]:
    return [
        scheduling.PoolView("general", weight=10, requirements=requirements.of(
            [(provisioning_names.ARCH_LABEL, "In", ("amd64",))])),
        scheduling.PoolView("arm-spot", weight=5, requirements=requirements.of(
            [(provisioning_names.ARCH_LABEL, "In", ("arm64",)), (provisioning_names.CAPACITY_TYPE_LABEL, "In", ("spot", "on-demand"))])),
        scheduling.PoolView("batch", weight=0, taints=(Taint("batch", "NoSchedule", "true"),),
                            labels={"workload": "batch"}, limits=scheduling.Limits(cpu=400_000),
                            used=scheduling.Limits(cpu=16_000, memory=64 << 30, machines=2)),
    ]


def world_slots(count: int, rng: random.Random) -> list[scheduling.Slot]:
    found = []
    for i in range(count):
        zone = ZONES[i % 3]
        residents = tuple(pods.Resident("default", {"app": f"web-{rng.randrange(10)}"}) for _ in range(rng.randrange(3, 12)))
        found.append(scheduling.Slot(
            name=f"node-{i}", pool="general", labels={provisioning_names.ZONE_LABEL: zone, provisioning_names.HOSTNAME_LABEL: f"node-{i}",
                                                      provisioning_names.ARCH_LABEL: "amd64"},
            taints=(), allocatable=resources.parse({"cpu": "7910m", "memory": "30Gi", "pods": "58"}),
            requested=resources.parse({"cpu": f"{rng.randrange(4000, 7800)}m", "memory": f"{rng.randrange(10, 29)}Gi",
                                       "pods": str(len(residents))}),
            pods=residents, machine=f"machine-{i}", in_flight=i >= count - 3))
    return found


def world_nodes(count: int, per_node: int, rng: random.Random) -> list[tuple[dict, list[dict]]]:
    """Existing Nodes as the API server has them, each with ``per_node`` running pods: one in five a replica
    of a pending Deployment (with its constraints), the others of ten other apps."""
    found = []
    for i in range(count):
        name = f"node-{i}"
        node = {"metadata": {"name": name, "labels": {provisioning_names.ZONE_LABEL: ZONES[i % 3],
                                                      provisioning_names.HOSTNAME_LABEL: name,
                                                      provisioning_names.ARCH_LABEL: "amd64"}},
                "spec": {}, "status": {"allocatable": {"cpu": "7910m", "memory": "30Gi", "pods": "58"}}}
        cpu, memory = rng.randrange(4000, 7800) // per_node, rng.randrange(10 << 10, 29 << 10) // per_node
        bound = []
        for j in range(per_node):
            if rng.randrange(5):
                app, spec = f"web-{rng.randrange(10)}", {}
            else:
                d = rng.randrange(DEPLOYMENTS)
                app, spec = f"app-{d}", _constraints(d)
            running = _raw(f"{app}-{i}-{j}", app, cpu, memory, {**spec, "nodeName": name})
            running["status"] = {"phase": "Running"}
            bound.append(running)
        found.append((node, bound))
    return found


def read_slots(nodes: list[tuple[dict, list[dict]]]) -> list[scheduling.Slot]:
    """The existing Nodes' Slots as a round reads them (the last three still in flight)."""
    found = []
    for i, (node, bound) in enumerate(nodes):
        slot = slots.of_node(node, bound, "general", f"machine-{i}")
        found.append(dataclasses.replace(slot, in_flight=True) if i >= len(nodes) - 3 else slot)
    return found


def world_daemonsets() -> list[pods.PodView]:
    found = []
    for name, cpu, memory, spec in (("kube-proxy", "100m", "128Mi", {}), ("aws-node", "25m", "64Mi", {}),
                                    ("logging", "200m", "256Mi", {"tolerations": [{"operator": "Exists"}]}),
                                    ("arm-agent", "50m", "64Mi", {"nodeSelector": {provisioning_names.ARCH_LABEL: "arm64"}})):
        found.append(pods.from_daemonset({"metadata": {"name": name, "namespace": "kube-system"}, "spec": {"template": {
            "metadata": {"labels": {"app": name}},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}], **spec}}}}))
    return found


def _raw(name: str, app: str, cpu: int, memory_mi: int, spec: dict) -> dict:
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "labels": {"app": app}},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": f"{cpu}m", "memory": f"{memory_mi}Mi"}}}],
                     **spec},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                           "reason": "Unschedulable"}]}}


def _constraints(d: int) -> dict:
    """The constraints of Deployment ``d``: spread over zones, anti-affinity, a node selector, ..."""
    app = f"app-{d}"
    spec: dict = {}
    kind = d % 8
    selector = {"matchLabels": {"app": app}}
    if kind in (0, 1):
        spec["topologySpreadConstraints"] = [{"maxSkew": 1, "topologyKey": provisioning_names.ZONE_LABEL,
                                              "whenUnsatisfiable": "DoNotSchedule", "labelSelector": selector}]
    elif kind == 2:
        spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": provisioning_names.HOSTNAME_LABEL, "labelSelector": selector}]}}
    elif kind == 3:
        spec["nodeSelector"] = {provisioning_names.ARCH_LABEL: "arm64"}
    elif kind == 4:
        spec["tolerations"] = [{"key": "batch", "operator": "Equal", "value": "true", "effect": "NoSchedule"}]
        spec["nodeSelector"] = {"workload": "batch"}
    elif kind == 5:
        spec["affinity"] = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 50, "preference": {"matchExpressions": [
                {"key": provisioning_names.ZONE_LABEL, "operator": "In", "values": [ZONES[d % 3]]}]}}]}}
    elif kind == 6:
        spec["topologySpreadConstraints"] = [{"maxSkew": 2, "topologyKey": provisioning_names.HOSTNAME_LABEL,
                                              "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": selector}]
    return spec


def world_pods(count: int, rng: random.Random) -> list[dict]:
    found = []
    lone = count // 20
    per = (count - lone) // DEPLOYMENTS
    for d in range(DEPLOYMENTS):
        app = f"app-{d}"
        cpu, memory = rng.choice((100, 250, 500, 1000, 2000, 3500)), rng.choice((128, 512, 1024, 2048, 4096, 8192))
        spec = _constraints(d)
        for i in range(per):
            found.append(_raw(f"{app}-{i}", app, cpu, memory, spec))
    while len(found) < count:
        i = len(found)
        found.append(_raw(f"lone-{i}", f"lone-{i}", rng.randrange(50, 4000), rng.randrange(64, 16384), {}))
    return found


def decide(raw_pods, world, group: bool = True, nodes=None) -> scheduling.Result:
    """The round's decision: the pending pods read, the existing Nodes read when given raw, the placement."""
    views = [pods.view(p) for p in raw_pods if pods.is_provisionable(p)]
    pools, existing, options, daemonsets = world
    if nodes is not None:
        existing = read_slots(nodes)
    return scheduling.schedule(views, pools, existing, options, daemonsets, group_identical=group)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--types", type=int, default=50)
    parser.add_argument("--slots", type=int, default=40)
    parser.add_argument("--residents", type=int, help="pods on each existing Node (default: 3 to 11)")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", type=pathlib.Path)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    nodes = None if args.residents is None else world_nodes(args.slots, args.residents, rng)
    existing = world_slots(args.slots, rng) if nodes is None else read_slots(nodes)
    world = (world_pools(), existing, world_catalog(args.types), world_daemonsets())
    raw_pods = world_pods(args.pods, rng)
    grouped, single = decide(raw_pods, world, nodes=nodes), decide(raw_pods, world, group=False, nodes=nodes)
    assert grouped == single, "grouped and one-at-a-time placement differ"
    times = {}
    for label, group in (("grouped", True), ("one at a time", False)):
        runs = []
        for _ in range(args.repeat):
            start = time.process_time()
            decide(raw_pods, world, group, nodes)
            runs.append(time.process_time() - start)
        times[label] = {"median_ms": round(statistics.median(runs) * 1000, 1), "max_ms": round(max(runs) * 1000, 1)}
    if nodes is not None:
        runs = []
        for _ in range(args.repeat):
            start = time.process_time()
            read_slots(nodes)
            runs.append(time.process_time() - start)
        times["of which reading the Nodes"] = {"median_ms": round(statistics.median(runs) * 1000, 1),
                                               "max_ms": round(max(runs) * 1000, 1)}
    results = {"pods": args.pods, "types": len(world[2]), "slots": args.slots,
               "residents": sum(len(s.pods) for s in existing),
               "placed_on_slots": len(grouped.placed), "claims": len(grouped.claims),
               "pods_on_claims": sum(len(c.pods) for c in grouped.claims),
               "unschedulable": len(grouped.unschedulable), "cpu_time": times}
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
