#!/usr/bin/env python3
"""Provisioning NodePools: the decision's CPU time, Machines launched round by round, and the local stack's
pending-to-Machine latency and Karpenter's basic performance workload.

    .venv/bin/python bench/provisioning.py decision [--pods 1000] [--types 50] [--slots 40] [--repeat 20]
    .venv/bin/python bench/provisioning.py storm [--deployments 500] [--replicas 10] [--slots 40] [--repeat 5]
    .venv/bin/python bench/provisioning.py consolidation [--machines 100] [--pods 20] [--repeat 5]
    .venv/bin/python bench/provisioning.py arrivals [--sequences 20] [--pods 300] [--rounds 5]
    .venv/bin/python bench/provisioning.py stream [--small 500] [--large 500] [--rate 40]
    .venv/bin/python bench/provisioning.py latency [--batches 5] [--pods 20]
    .venv/bin/python bench/provisioning.py workload [--small 500] [--large 500] [--scale-to 350]

Every sub-command takes --json PATH and --seed.

``decision`` (the venv): --types instance types (families m5, c5, r5, m6g,
c6g, r6g, m5a, c5a, r5a in sizes large to 24xlarge, with prices) offered in
three zones, spot in two; three provisioning pools (general; arm64 spot; a
tainted batch pool with a cpu limit); --slots existing Nodes with pods on
them, the last 3 still in flight; four DaemonSets; --pods pending pods of
40 Deployments of assorted sizes, a quarter spread over zones, some with
hostname anti-affinity, node selectors, tolerations or preferred zones, and
5 % lone pods. Two measures, CPU time (time.process_time), median and worst
of --repeat runs:

- schedule: hooks.provisioning.scheduling.schedule over those PodViews,
  reading the raw pods included, grouped and one pod at a time (checked to
  decide the same);
- round: hooks.provisioning.rounds.readings and rounds.provision for the
  general pool over the same world as gather stores it (raw pods, Nodes,
  Machines, NodePools, DaemonSets, EC2's instance types, offerings and
  prices), so building the catalog and reading the objects count. Twice:
  with EC2's answers holding the --types types only, and with every type
  moto's DescribeInstanceTypes answers (each pool then allowed the same
  --types by an instance-type requirement). "first": the process's first
  round, before anything was read (one sample); "cold": the catalog built
  again (as when EC2's zone offerings are read again, hourly); "warm":
  the catalog kept, as in every other round. The worlds and moto are frozen
  out of the garbage collector (gc.freeze): the runs pay for collecting
  their own objects, not the benchmark's heap.

``storm`` (the venv): --deployments Deployments of --replicas pending pods
(100m to 1 cpu, 128Mi to 2Gi), every pod spread over the three zones
(maxSkew 1, DoNotSchedule) and kept off its Deployment's other pods' Nodes
(required hostname anti-affinity), both by its own app label; the three
pools of ``decision``, allowing every type moto's DescribeInstanceTypes
answers (the bundled on-demand prices, spot in two zones); --slots existing
Nodes with pods (the last 3 in flight); four DaemonSets. CPU time, median
and worst of --repeat runs: schedule (the placement alone, over the pods
read), and the round of each pool (rounds.readings and rounds.provision)
over readings of its own, equal to the others' and not the same objects,
as each pool's call reads the API server: one pool after the other, the
first computing the placement (hooks/provisioning/placements.py), the
others answered it; and the three together. Checked: every pool's round
has the placement computed afresh, and the pools compute it once.

``consolidation`` (the venv): --machines Initialized Machines of one pool,
each with a Ready Node of 8 cpu and 32 GiB in one of three zones, a
DaemonSet pod, and up to --pods pods of a few Deployments (some spread over
zones, some with a node selector, some with a volume claim). Every Machine
has been a candidate for an hour, so each is judged Empty or tried as
Underutilized (one scheduling run per Machine) on every call: the CPU time
of the consolidation methods (hooks.nodepools.methods.empty and underutilized).

``arrivals`` (the venv): how many Machines provisioning launches when pods
arrive over --rounds rounds, each round seeing the Machines of the earlier
ones in flight, against one round over all the pods at once, and against
the lower bound: per resource the pods' total requests over the largest
allocatable any allowed type has (cpu, memory, pods; the largest of the
three). --sequences seeded sequences of --pods pods from 6 Deployments of
sizes drawn from a menu; "uniform": each pod turns unschedulable in a round
drawn at random, "bursts": each Deployment's pods all in one round. In
flight means launched (its instance type, zone and allocatable recorded, the
common case a round later) or not yet (only its ranked types known: the
least allocatable of them counts). One pool: m5, c5, r5 without metal, three
zones, every type moto's catalog has with the bundled on-demand prices.

``stream`` (the venv): the arrival of ``workload``'s pods replayed in
process, every pod bound where its round planned it: --small pods of 900m /
3100Mi and --large of 3500m / 28Gi turn Unschedulable at --rate a second,
one Deployment's pod after the other's ("interleaved", as two ReplicaSets
scaled at once create them) or one Deployment's after the other's
("blocks"); the pool polls every 0.5 s with the real batch window (its last
round in its status), and each round's Machines are in flight in the next,
launched. The Machines per round and in all, against one round over every
pod and the lower bound.

``latency`` (the local stack): --batches batches of --pods bare pods created
at once for a provisioning pool of their own (created and idle before the
batch); for each pod the time from its creation (the API server's answer)
to the Machine naming it in ``nodewarden.io/provisioned-for`` arriving on a
watch of Machines, and split at the first sight of the pod's PodScheduled
condition turning Unschedulable (a watch of the pods). The pool's Machines
are Initialized and the pool deleted before the next batch, which starts at
a random phase of the pools' poll. Summed over every batch, and over all but
the first: a hook worker's first round reads EC2's whole instance catalog.

``workload`` (the local stack): Karpenter's basic performance test. One
provisioning pool (m5, c5, r5 in sizes large to 24xlarge, three zones,
consolidateAfter --consolidate-after, the default budget); a Deployment of
--small pods of 900m / 3100Mi and one of --large pods of 3500m / 28Gi. Timed
from their creation until every pod runs, with when the pods were created,
first seen Unschedulable and Running, the Machines created and Initialized,
and how many pods named by a Machine's provisioned-for ran on it; then
reserved utilization of the pool's Nodes (the pods' requests over the Nodes'
allocatable). For comparison, computed in process before the stack starts:
the Machines one round over all the pods would launch, and the lower bound
(as ``arrivals``), for both sizes of the workload. Then both are
scaled to --scale-to and timed until consolidation is done: every pod
running, the pool's status listing no consolidation candidate and no
disruption, no Machine of it being deleted, for --quiet seconds on end (the
figure is when that stretch began). Counted since the scale-in: Machines
removed and their reasons, pods evicted (pods running once the scale-in had
deleted its pods, deleted later), and Machines created (the no-churn claim:
none, and none within consolidateAfter of a removal).

The local-stack sub-commands start their own stack (etcd, kube-apiserver,
kube-scheduler, kube-controller-manager, Metacontroller, kwok, moto, the
hook server, the kubelet stand-in; `make controlplane-bins`) and give the
hook server the settings of BENCH_HOOK_ENV below, plus any --hook-env
KEY=VALUE. Every wait has a deadline.
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import datetime as dt
import gc
import json
import math
import os
import pathlib
import random
import re
import shutil
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from measure import percentile, sampled_buckets, write_json  # noqa: E402

from hooks import machine_names, provisioning_names, timefmt  # noqa: E402
from hooks.machines import pool, signals, spec  # noqa: E402
from hooks.machines.budgets import Budget  # noqa: E402
from hooks.machines.spec import Taint  # noqa: E402
from hooks.provisioning import (catalog, inputs, placements, pods, requirements, resources, rounds,  # noqa: E402
                                scheduling, slots)
from worlds import pool_inputs  # noqa: E402

NOW = dt.datetime(2026, 11, 27, 13, 0, tzinfo=dt.timezone.utc)
HOUR_AGO = timefmt.fmt(NOW - dt.timedelta(hours=1))
FIVE_SECONDS_AGO = timefmt.fmt(NOW - dt.timedelta(seconds=5))  # a batch window closed
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
REGION = "us-east-1"
TYPE_KEY = provisioning_names.INSTANCE_TYPE_LABEL
FAMILY_KEY = provisioning_names.INSTANCE_FAMILY_LABEL
SIZE_KEY = provisioning_names.INSTANCE_SIZE_LABEL
ARCH_KEY = provisioning_names.ARCH_LABEL


def _cpu_times(run, repeat: int) -> dict:
    """CPU time of ``run()`` over ``repeat`` runs: median and worst, in ms."""
    runs = []
    for _ in range(repeat):
        start = time.process_time()
        run()
        runs.append(time.process_time() - start)
    return _median_and_worst(runs)


def _median_and_worst(runs: list[float]) -> dict:
    return {"median_ms": round(statistics.median(runs) * 1000, 1), "max_ms": round(max(runs) * 1000, 1)}


# =========================================================================== decision: the world


FAMILIES = {"m5": (4, 0.048, "x86_64"), "c5": (2, 0.0425, "x86_64"), "r5": (8, 0.063, "x86_64"),
            "m6g": (4, 0.0385, "arm64"), "c6g": (2, 0.034, "arm64"), "r6g": (8, 0.0504, "arm64"),
            "m5a": (4, 0.043, "x86_64"), "c5a": (2, 0.0385, "x86_64"), "r5a": (8, 0.0565, "x86_64")}
SIZES = (("large", 2), ("xlarge", 4), ("2xlarge", 8), ("4xlarge", 16), ("8xlarge", 32), ("12xlarge", 48),
         ("16xlarge", 64), ("24xlarge", 96))


def world_ec2(count: int) -> dict:
    """EC2's answers for ``count`` instance types, as gather stores them: typeFacts, zoneOfferings, prices."""
    facts, zones, on_demand, spot = {}, {}, {}, []
    for family, (gib_per_cpu, price_per_cpu, arch) in FAMILIES.items():
        for size, vcpus in SIZES:
            name = f"{family}.{size}"
            facts[name] = {"vcpus": vcpus, "memoryMiB": vcpus * gib_per_cpu * 1024, "maxENIs": 8, "ipv4PerENI": 30,
                           "gpus": 0, "gpuManufacturer": "", "architectures": [arch]}
            zones[name] = list(ZONES)
            on_demand[name] = round(vcpus * price_per_cpu, 4)
            for i, zone in enumerate(ZONES[:2]):
                spot.append([name, zone, round(on_demand[name] * (0.3 + 0.05 * i), 4)])
    chosen = sorted(facts)[:count]
    return {"typeFacts": {n: facts[n] for n in chosen}, "zoneOfferings": {n: zones[n] for n in chosen},
            "prices": {spec.ON_DEMAND: {n: on_demand[n] for n in chosen},
                       spec.SPOT: [s for s in spot if s[0] in chosen]}}


def world_catalog(ec2: dict) -> list[catalog.InstanceOption]:
    prices = ec2["prices"]
    return catalog.options(ec2["typeFacts"], ec2["zoneOfferings"],
                           {spec.ON_DEMAND: prices[spec.ON_DEMAND],
                            spec.SPOT: {(t, z): p for t, z, p in prices[spec.SPOT]}})


def world_pools() -> list[scheduling.PoolView]:
    return [
        scheduling.PoolView("general", weight=10, requirements=requirements.of([(ARCH_KEY, "In", ("amd64",))])),
        scheduling.PoolView("arm-spot", weight=5, requirements=requirements.of(
            [(ARCH_KEY, "In", ("arm64",)), (provisioning_names.CAPACITY_TYPE_LABEL, "In", ("spot", "on-demand"))])),
        scheduling.PoolView("batch", weight=0, taints=(Taint("batch", "NoSchedule", "true"),),
                            labels={"workload": "batch"}, limits=scheduling.Limits(cpu=400_000),
                            used=scheduling.Limits(cpu=16_000, memory=64 << 30, machines=2)),
    ]


def raw_pools(types: list[str] | None = None) -> list[dict]:
    """world_pools as NodePools; ``types``: each also allowed only these instance types."""
    only = [{"key": TYPE_KEY, "operator": "In", "values": sorted(types)}] if types else []

    def made(name: str, weight: int, needs: list[dict], *, taints=(), labels=None, limits=None) -> dict:
        template = {"subnets": [f"subnet-{z[-1]}" for z in ZONES], "imageId": "ami-1"}
        if taints:
            template["taints"] = list(taints)
        obj = {"apiVersion": machine_names.API_VERSION, "kind": machine_names.NODEPOOL_KIND,
               "metadata": {"name": name, "uid": f"uid-{name}"},
               "spec": {"weight": weight, "requirements": needs + only,
                        "template": {"metadata": {"labels": labels or {}}, "spec": template}}}
        if limits:
            obj["spec"]["limits"] = limits
        return obj

    return [
        made("general", 10, [{"key": ARCH_KEY, "operator": "In", "values": ["amd64"]}]),
        made("arm-spot", 5, [{"key": ARCH_KEY, "operator": "In", "values": ["arm64"]},
                             {"key": provisioning_names.CAPACITY_TYPE_LABEL, "operator": "In",
                              "values": ["spot", "on-demand"]}]),
        made("batch", 0, [], taints=[{"key": "batch", "value": "true", "effect": "NoSchedule"}],
             labels={"workload": "batch"}, limits={"cpu": "400"}),
    ]


def _slot_shape(i: int, rng: random.Random) -> tuple[str, list[str], int, int]:
    """Node i: its zone, the apps of its pods, and what they request (millicores, GiB)."""
    apps = [f"web-{rng.randrange(10)}" for _ in range(rng.randrange(3, 12))]
    return ZONES[i % 3], apps, rng.randrange(4000, 7800), rng.randrange(10, 29)


def world_slots(count: int, rng: random.Random) -> list[scheduling.Slot]:
    found = []
    for i in range(count):
        zone, apps, cpu, memory = _slot_shape(i, rng)
        found.append(scheduling.Slot(
            name=f"node-{i}", pool="general", labels={provisioning_names.ZONE_LABEL: zone,
                                                      provisioning_names.HOSTNAME_LABEL: f"node-{i}",
                                                      ARCH_KEY: "amd64"},
            taints=(), allocatable=resources.parse({"cpu": "7910m", "memory": "30Gi", "pods": "58"}),
            requested=resources.parse({"cpu": f"{cpu}m", "memory": f"{memory}Gi", "pods": str(len(apps))}),
            pods=tuple(pods.Resident("default", {"app": app}) for app in apps),
            machine=f"machine-{i}", in_flight=i >= count - 3))
    return found


def world_nodes(count: int, per_node: int, rng: random.Random) -> list[tuple[dict, list[dict]]]:
    """Existing Nodes as the API server has them, each with ``per_node`` running pods: one in five a replica
    of a pending Deployment (with its constraints), the others of ten other apps."""
    found = []
    for i in range(count):
        name = f"node-{i}"
        node = {"metadata": {"name": name, "labels": {provisioning_names.ZONE_LABEL: ZONES[i % 3],
                                                      provisioning_names.HOSTNAME_LABEL: name, ARCH_KEY: "amd64"}},
                "spec": {}, "status": {"allocatable": {"cpu": "7910m", "memory": "30Gi", "pods": "58"}}}
        cpu, memory = rng.randrange(4000, 7800) // per_node, rng.randrange(10 << 10, 29 << 10) // per_node
        bound = []
        for j in range(per_node):
            if rng.randrange(5):
                app, extra = f"web-{rng.randrange(10)}", {}
            else:
                d = rng.randrange(DEPLOYMENTS)
                app, extra = f"app-{d}", _constraints(d)
            bound.append(_bound_pod(f"{app}-{i}-{j}", name, {"app": app}, cpu, memory, extra))
        found.append((node, bound))
    return found


def default_nodes(count: int, rng: random.Random) -> list[tuple[dict, list[dict]]]:
    """Nodes shaped as world_slots' (3 to 11 pods of ten apps), as the API server has them."""
    found = []
    for i in range(count):
        zone, apps, cpu, memory = _slot_shape(i, rng)
        name = f"node-{i}"
        node = {"metadata": {"name": name, "labels": {provisioning_names.ZONE_LABEL: zone,
                                                      provisioning_names.HOSTNAME_LABEL: name, ARCH_KEY: "amd64"}},
                "spec": {}, "status": {"allocatable": {"cpu": "7910m", "memory": "30Gi", "pods": "58"}}}
        found.append((node, [_bound_pod(f"{app}-{i}-{j}", name, {"app": app}, cpu // len(apps),
                                        memory * 1024 // len(apps)) for j, app in enumerate(apps)]))
    return found


def read_slots(nodes: list[tuple[dict, list[dict]]]) -> list[scheduling.Slot]:
    """The existing Nodes' Slots as a round reads them (the last three still in flight)."""
    found = []
    for i, (node, bound) in enumerate(nodes):
        slot = slots.of_node(node, bound, "general", f"machine-{i}")
        found.append(dataclasses.replace(slot, in_flight=True) if i >= len(nodes) - 3 else slot)
    return found


def raw_room(nodes: list[tuple[dict, list[dict]]]) -> dict:
    """The Nodes as a round reads them: each of a Machine of the general pool (the last three in flight), the
    pods bound to them; and the batch pool's two Machines whose Nodes are gone (its ``used``)."""
    found: dict = {"nodes": [], "machines": [], "bound": []}
    for i, (node, bound) in enumerate(nodes):
        name, machine = node["metadata"]["name"], f"machine-{i}"
        found["nodes"].append({**node, "metadata": {**node["metadata"], "labels": {
            **node["metadata"]["labels"], machine_names.POOL_LABEL: "general", machine_names.MACHINE_LABEL: machine}},
            "status": {**node["status"], "conditions": [{"type": "Ready", "status": "True"}]}})
        conditions = [] if i >= len(nodes) - 3 else [{"type": machine_names.INITIALIZED, "status": "True"}]
        found["machines"].append({"metadata": {"name": machine, "uid": f"uid-{machine}",
                                               "creationTimestamp": HOUR_AGO,
                                               "labels": {machine_names.POOL_LABEL: "general"}},
                                  "spec": {"instanceTypes": ["m5.2xlarge"]},
                                  "status": {"nodeName": name, "instanceID": f"i-{i:08x}",
                                             "conditions": conditions}})
        found["bound"] += bound
    for i in range(2):
        found["machines"].append({"metadata": {"name": f"batch-{i}", "uid": f"uid-batch-{i}",
                                               "creationTimestamp": HOUR_AGO,
                                               "labels": {machine_names.POOL_LABEL: "batch"}},
                                  "spec": {"instanceTypes": ["m5.2xlarge"]},
                                  "status": {"capacity": {"cpu": "8", "memory": "32Gi"}, "instanceID": f"i-b{i:07x}",
                                             "conditions": [{"type": machine_names.INITIALIZED, "status": "True"}]}})
    return found


def _bound_pod(name: str, node: str, labels: dict, cpu: int, memory_mi: int, spec_extra: dict | None = None,
               owner: str = "ReplicaSet") -> dict:
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "labels": labels,
                         "ownerReferences": [{"kind": owner, "name": "x", "uid": "x", "controller": True}],
                         "creationTimestamp": HOUR_AGO},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {
                "cpu": f"{cpu}m", "memory": f"{memory_mi}Mi"}}}], **(spec_extra or {})},
            "status": {"phase": "Running", "startTime": HOUR_AGO}}


DAEMONSETS = (("kube-proxy", "100m", "128Mi", {}), ("aws-node", "25m", "64Mi", {}),
              ("logging", "200m", "256Mi", {"tolerations": [{"operator": "Exists"}]}),
              ("arm-agent", "50m", "64Mi", {"nodeSelector": {ARCH_KEY: "arm64"}}))


def raw_daemonsets() -> list[dict]:
    return [{"metadata": {"name": name, "namespace": "kube-system", "uid": f"uid-{name}"}, "spec": {"template": {
        "metadata": {"labels": {"app": name}},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}], **extra}}}}
        for name, cpu, memory, extra in DAEMONSETS]


def _pending(name: str, app: str, cpu: int, memory_mi: int, spec_extra: dict, since: str | None = None) -> dict:
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    if since:
        condition["lastTransitionTime"] = since
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "labels": {"app": app}},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": f"{cpu}m",
                                                                             "memory": f"{memory_mi}Mi"}}}],
                     **spec_extra},
            "status": {"phase": "Pending", "conditions": [condition]}}


DEPLOYMENTS = 40


def _constraints(d: int) -> dict:
    """The constraints of Deployment ``d``: spread over zones, anti-affinity, a node selector, ..."""
    app = f"app-{d}"
    extra: dict = {}
    kind = d % 8
    selector = {"matchLabels": {"app": app}}
    if kind in (0, 1):
        extra["topologySpreadConstraints"] = [{"maxSkew": 1, "topologyKey": provisioning_names.ZONE_LABEL,
                                               "whenUnsatisfiable": "DoNotSchedule", "labelSelector": selector}]
    elif kind == 2:
        extra["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": provisioning_names.HOSTNAME_LABEL, "labelSelector": selector}]}}
    elif kind == 3:
        extra["nodeSelector"] = {ARCH_KEY: "arm64"}
    elif kind == 4:
        extra["tolerations"] = [{"key": "batch", "operator": "Equal", "value": "true", "effect": "NoSchedule"}]
        extra["nodeSelector"] = {"workload": "batch"}
    elif kind == 5:
        extra["affinity"] = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 50, "preference": {"matchExpressions": [
                {"key": provisioning_names.ZONE_LABEL, "operator": "In", "values": [ZONES[d % 3]]}]}}]}}
    elif kind == 6:
        extra["topologySpreadConstraints"] = [{"maxSkew": 2, "topologyKey": provisioning_names.HOSTNAME_LABEL,
                                               "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": selector}]
    return extra


def world_pods(count: int, rng: random.Random) -> list[dict]:
    found = []
    lone = count // 20
    per = (count - lone) // DEPLOYMENTS
    for d in range(DEPLOYMENTS):
        app = f"app-{d}"
        cpu, memory = rng.choice((100, 250, 500, 1000, 2000, 3500)), rng.choice((128, 512, 1024, 2048, 4096, 8192))
        extra = _constraints(d)
        for i in range(per):
            found.append(_pending(f"{app}-{i}", app, cpu, memory, extra))
    while len(found) < count:
        i = len(found)
        found.append(_pending(f"lone-{i}", f"lone-{i}", rng.randrange(50, 4000), rng.randrange(64, 16384), {}))
    return found


def moto_ec2() -> dict:
    """Every instance type, its zones and the bundled on-demand prices, read as gather reads them (moto in
    process)."""
    import boto3
    from moto import mock_aws

    from hooks.aws import instance_catalog, pricing
    with mock_aws():
        ec2 = boto3.client("ec2", region_name=REGION)
        facts = instance_catalog.read_type_facts(ec2)
        zones = instance_catalog.read_zone_offerings(ec2)
    return {"typeFacts": facts, "zoneOfferings": zones,
            "prices": {spec.ON_DEMAND: pricing.bundled_prices(REGION), spec.SPOT: []}}


def decide(raw_pods, world, group: bool = True, nodes=None) -> scheduling.Result:
    """The placement: the pending pods read, the existing Nodes read when given raw, the schedule."""
    views = [pods.view(p) for p in raw_pods if pods.is_provisionable(p)]
    pools, existing, options, daemonsets = world
    if nodes is not None:
        existing = read_slots(nodes)
    return scheduling.schedule(views, pools, existing, options, daemonsets, group_identical=group)


def round_worlds(args, raw_pods: list[dict], ec2: dict, nodes) -> dict[str, tuple[dict, spec.PoolSpec]]:
    """The world as gather stores it for the general pool's round, by catalog: EC2 answering ``ec2``'s types
    only, and EC2 answering every type moto has (each pool then allowed ``ec2``'s types). ``nodes``: the
    existing Nodes with their pods (default_nodes' when None)."""
    world = raw_room(nodes if nodes is not None else default_nodes(args.slots, random.Random(args.seed + 1)))
    types = sorted(ec2["typeFacts"])
    whole = moto_ec2()
    names = [n for n in types if n in whole["typeFacts"]]
    spot = [[n, z, round(whole["prices"][spec.ON_DEMAND].get(n, 1.0) * 0.35, 4)] for n in names
            for z in ZONES[:2]]
    whole["prices"] = {spec.ON_DEMAND: whole["prices"][spec.ON_DEMAND], spec.SPOT: spot}
    found = {}
    for label, answers, pools_raw in ((f"{len(types)} types", ec2, raw_pools()),
                                      (f"every type moto has ({len(whole['typeFacts'])}), {len(names)} allowed",
                                       whole, raw_pools(names))):
        raw = {"pending": raw_pods, "bound": world["bound"], "nodes": world["nodes"], "pools": pools_raw,
               "machines": world["machines"], "daemonsets": raw_daemonsets(),
               "zones": {p["metadata"]["name"]: list(ZONES) for p in pools_raw},
               "subnets": [{"id": f"subnet-{z[-1]}", "zone": z} for z in ZONES], **answers}
        found[label] = (raw, spec.pool(pools_raw[0]))
    return found


def full_round(raw: dict, parsed: spec.PoolSpec, *, cold: bool) -> rounds.Round:
    """The general pool's round as the hook runs it on gather's readings. ``cold``: the catalog is built again
    (a copy of the facts is a new object, so the catalog memo misses, as in a process's first round and when
    EC2's zone offerings are read again). The placement is computed, never another round's (``storm`` measures
    the rounds that share one)."""
    given = {**raw, "typeFacts": dict(raw["typeFacts"])} if cold else raw
    placements.PLACEMENTS.clear()
    return rounds.provision("general", parsed, rounds.readings(given), NOW)


def decision(args) -> dict:
    rng = random.Random(args.seed)
    ec2 = world_ec2(args.types)
    nodes = None if args.residents is None else world_nodes(args.slots, args.residents, rng)
    existing = world_slots(args.slots, rng) if nodes is None else read_slots(nodes)
    raw_pods = world_pods(args.pods, rng)
    worlds = round_worlds(args, raw_pods, ec2, nodes)
    # The worlds and moto are no hook's heap: out of the collector's sight, so a full collection in a timed run
    # costs what the round's own objects cost it.
    gc.freeze()
    # Before anything else has read a quantity or built a catalog in this process: one sample.
    whole_label = list(worlds)[-1]
    started = time.process_time()
    full_round(*worlds[whole_label], cold=True)
    first = round((time.process_time() - started) * 1000, 1)
    world = (world_pools(), existing, world_catalog(ec2), [pods.from_daemonset(d) for d in raw_daemonsets()])
    grouped, single = decide(raw_pods, world, nodes=nodes), decide(raw_pods, world, group=False, nodes=nodes)
    assert grouped == single, "grouped and one-at-a-time placement differ"
    times = {label: _cpu_times(lambda g=group: decide(raw_pods, world, g, nodes), args.repeat)
             for label, group in (("grouped", True), ("one at a time", False))}
    if nodes is not None:
        times["of which reading the Nodes"] = _cpu_times(lambda: read_slots(nodes), args.repeat)
    found = {}
    for label, (raw, parsed) in worlds.items():
        out = full_round(raw, parsed, cold=False)
        found[label] = {
            "claims_of_general": len(out.claims), "pods_on_them": sum(len(c.pods) for c in out.claims),
            "placed_on_slots": len(out.result.placed), "claims_all_pools": len(out.result.claims),
            "unschedulable": len(out.result.unschedulable),
            "cpu_time_cold": _cpu_times(lambda r=raw, p=parsed: full_round(r, p, cold=True),
                                        max(3, args.repeat // 4)),
            "cpu_time_warm": _cpu_times(lambda r=raw, p=parsed: full_round(r, p, cold=False), args.repeat)}
    found[whole_label]["cpu_time_first_round_of_the_process_ms"] = first
    return {"pods": args.pods, "types": len(world[2]), "slots": args.slots,
            "residents": sum(len(s.pods) for s in existing),
            "schedule": {"placed_on_slots": len(grouped.placed), "claims": len(grouped.claims),
                         "pods_on_claims": sum(len(c.pods) for c in grouped.claims),
                         "unschedulable": len(grouped.unschedulable), "cpu_time": times},
            "round": found}


# =========================================================================== storm


def storm_pods(deployments: int, replicas: int, rng: random.Random) -> list[dict]:
    """``deployments`` Deployments of ``replicas`` pending pods each, every pod spread over zones (maxSkew 1,
    DoNotSchedule) and kept off the Nodes of its Deployment's other pods (required hostname anti-affinity),
    both by its own app label."""
    found = []
    for d in range(deployments):
        app = f"storm-{d}"
        cpu, memory = rng.choice((100, 250, 500, 1000)), rng.choice((128, 256, 512, 1024, 2048))
        selector = {"matchLabels": {"app": app}}
        extra = {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": provisioning_names.ZONE_LABEL,
                                                "whenUnsatisfiable": "DoNotSchedule", "labelSelector": selector}],
                 "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                     {"topologyKey": provisioning_names.HOSTNAME_LABEL, "labelSelector": selector}]}}}
        found.extend(_pending(f"{app}-{i}", app, cpu, memory, extra, since=FIVE_SECONDS_AGO)
                     for i in range(replicas))
    return found


def storm_world(args) -> dict:
    """The storm as gather stores it: its pods, --slots existing Nodes with pods, the three pools allowing
    every instance type, every type moto has (the bundled on-demand prices, spot in two zones)."""
    whole = moto_ec2()
    whole["prices"][spec.SPOT] = [[n, z, round(p * 0.35, 4)] for n, p in sorted(whole["prices"][spec.ON_DEMAND].items())
                                  if n in whole["typeFacts"] for z in ZONES[:2]]
    room = raw_room(default_nodes(args.slots, random.Random(args.seed + 1)))
    pools_raw = raw_pools()
    return {"pending": storm_pods(args.deployments, args.replicas, random.Random(args.seed)), "bound": room["bound"],
            "nodes": room["nodes"], "pools": pools_raw, "machines": room["machines"], "daemonsets": raw_daemonsets(),
            "zones": {p["metadata"]["name"]: list(ZONES) for p in pools_raw},
            "subnets": [{"id": f"subnet-{z[-1]}", "zone": z} for z in ZONES], **whole}


def _as_read(raw: dict) -> dict:
    """The readings as another call reads them: equal, not the same objects (the EC2 answers kept per process
    are the same objects, as hooks.aws.instance_catalog keeps them)."""
    kept = ("typeFacts", "zoneOfferings", "prices")
    return {**json.loads(json.dumps({k: v for k, v in raw.items() if k not in kept})), **{k: raw[k] for k in kept}}


def _placement_inputs(name: str, parsed: spec.PoolSpec, raw: dict) -> tuple:
    """What the round of ``name`` over ``raw`` gives the scheduler to place, as rounds.provision builds it."""
    given = []
    schedule = scheduling.schedule
    scheduling.schedule = lambda *args, **kwargs: given.append(args) or schedule(*args, **kwargs)
    try:
        placements.PLACEMENTS.clear()
        rounds.provision(name, parsed, rounds.readings(raw), NOW)
    finally:
        scheduling.schedule = schedule
    return given[0]


def storm(args) -> dict:
    raw = storm_world(args)
    parsed = {p["metadata"]["name"]: spec.pool(p) for p in raw["pools"]}
    reads = [_as_read(raw) for _ in range(len(parsed) * (args.repeat + 2))]
    names = sorted(parsed)
    world = _placement_inputs(names[0], parsed[names[0]], raw)  # the catalog built too, as in every later round
    gc.freeze()
    afresh = scheduling.schedule(*world)

    def every_pool() -> list[rounds.Round]:
        placements.PLACEMENTS.clear()
        return [rounds.provision(n, parsed[n], rounds.readings(reads.pop()), NOW) for n in names]

    decided = every_pool()
    for out in decided:
        assert out.result == afresh, f"{out.claims[:1]}: the shared placement differs from one computed afresh"
    computed = placements.PLACEMENTS.computed
    every_pool()
    computed = placements.PLACEMENTS.computed - computed
    assert computed == 1, f"the pools computed {computed} placements over equal readings"
    pool_times = {n: [] for n in names}

    def timed_pools() -> None:
        placements.PLACEMENTS.clear()
        for n in names:
            started = time.process_time()
            rounds.provision(n, parsed[n], rounds.readings(reads.pop()), NOW)
            pool_times[n].append(time.process_time() - started)
    total = _cpu_times(timed_pools, args.repeat)
    return {
        "pending_pods": len(raw["pending"]), "deployments": args.deployments, "types": len(raw["typeFacts"]),
        "slots": args.slots, "pools": names,
        "claims": len(afresh.claims), "placed_on_slots": len(afresh.placed), "unschedulable": len(afresh.unschedulable),
        "placements_computed_for_the_pools": computed,
        "cpu_time": {
            "schedule": _cpu_times(lambda: scheduling.schedule(*world), args.repeat),
            **{f"round of {n} ({'placement computed' if i == 0 else 'placement shared'})": _median_and_worst(t)
               for i, (n, t) in enumerate(pool_times.items())},
            "every pool's round": total}}


# =========================================================================== consolidation


LAYOUTS = ("random", "even", "full")


def _sizes(layout: str, per_node: int, rng: random.Random) -> Iterator[int]:
    """The cpu (millicores) of the pods one Node runs besides its DaemonSet pod (100m), one at a time."""
    room = 7900
    if layout == "full":
        each = room // per_node
        yield from [each] * (per_node - 1) + [room - each * (per_node - 1)]
        return
    if layout == "even":
        choices = [c for c in (50, 100, 250, 500, 1000) if c * per_node <= room] or [room // per_node]
        for _ in range(per_node):
            yield rng.choice(choices)
        return
    used = 0
    for _ in range(rng.randrange(per_node + 1)):
        cpu = rng.choice((100, 250, 500, 1000))
        if used + cpu > room:
            return
        used += cpu
        yield cpu


def consolidation_world(machines: int, per_node: int, rng: random.Random,
                        layout: str = "random") -> tuple[list, list, dict]:
    found, nodes, by_node = [], [], {}
    for i in range(machines):
        name, node = f"m{i:04d}", f"node-{i:04d}"
        found.append({"metadata": {"name": name, "uid": f"uid-{name}", "creationTimestamp": HOUR_AGO,
                                   "labels": {machine_names.POOL_LABEL: "general"}},
                      "status": {"nodeName": node, "conditions": [{"type": machine_names.INITIALIZED,
                                                                   "status": "True"}]}})
        nodes.append({"metadata": {"name": node, "labels": {
            machine_names.MACHINE_LABEL: name, provisioning_names.ZONE_LABEL: ZONES[i % 3],
            provisioning_names.HOSTNAME_LABEL: node, "disk": "ssd" if i % 4 == 0 else "hdd"}},
            "spec": {}, "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                                   "conditions": [{"type": "Ready", "status": "True"}]}})
        bound = [_bound_pod(f"ds-{i}", node, {"app": "ds"}, 100, 128, owner="DaemonSet")]
        for j, cpu in enumerate(_sizes(layout, per_node, rng)):
            kind = rng.randrange(8)
            extra: dict = {}
            if kind == 0:
                extra["topologySpreadConstraints"] = [{"maxSkew": 1, "topologyKey": provisioning_names.ZONE_LABEL,
                                                       "whenUnsatisfiable": "DoNotSchedule",
                                                       "labelSelector": {"matchLabels": {"app": "spread"}}}]
            elif kind == 1 and i % 4 == 0:
                extra["nodeSelector"] = {"disk": "ssd"}
            elif kind == 2:
                extra["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": f"d-{i}-{j}"}}]
            app = "spread" if kind == 0 else f"app{kind}"
            bound.append(_bound_pod(f"{app}-{i}-{j}", node, {"app": app}, cpu, cpu * 2, extra))
        by_node[node] = bound
    return pool.machines_of(found), nodes, by_node


def consolidation_bench(args) -> dict:
    machines, nodes, by_node = consolidation_world(args.machines, args.pods, random.Random(args.seed), args.layout)
    previous = [{"machine": m["metadata"]["name"], "uid": m["metadata"]["uid"], "reason": reason, "since": HOUR_AGO}
                for m in machines for reason in signals.CONSOLIDATION]
    bound = [p for on_node in by_node.values() for p in on_node]

    def run():
        return pool_inputs.consolidated(machines, nodes, bound, name="general", now=NOW,
                                        rules=(Budget("10%"),), previous=previous)[1]

    out = run()
    return {"machines": args.machines, "layout": args.layout, "pods": sum(len(p) for p in by_node.values()),
            "candidates": {reason: sum(1 for r in out.consolidation or [] if r["reason"] == reason)
                           for reason in signals.CONSOLIDATION},
            "removals": [(c.name, c.reason) for c in out.chosen],
            "cpu_time": _cpu_times(run, args.repeat)}


# =========================================================================== arrivals


# (cpu millicores, memory MiB) a Deployment's pods may ask for.
MENU = ((250, 512), (500, 1024), (1000, 2048), (2000, 4096), (900, 3100), (3500, 28 * 1024), (1000, 8192),
        (4000, 8192), (250, 4096), (1500, 1536))
GENERAL_FAMILIES = ("m5", "c5", "r5")


def general_requirements(sizes: list[str] | None = None) -> list[dict]:
    """The general-purpose pool's requirements: m5, c5, r5 in ``sizes`` (every size but metal when None)."""
    return [{"key": FAMILY_KEY, "operator": "In", "values": list(GENERAL_FAMILIES)},
            {"key": SIZE_KEY, "operator": "In", "values": list(sizes)} if sizes
            else {"key": SIZE_KEY, "operator": "NotIn", "values": ["metal"]}]


class Planner:
    """Rounds of one general-purpose pool in process, over every type moto's catalog has (three zones, the
    bundled on-demand prices): what provisioning would launch, and the lower bound."""

    def __init__(self, sizes: list[str] | None = None):
        subnets = [f"subnet-{z[-1]}" for z in ZONES]
        self.pool_obj = {"apiVersion": machine_names.API_VERSION, "kind": machine_names.NODEPOOL_KIND,
                         "metadata": {"name": "general", "uid": "uid-general"},
                         "spec": {"requirements": general_requirements(sizes), "template": {
                             "metadata": {"labels": {}}, "spec": {"subnets": subnets, "imageId": "ami-1"}}}}
        self.parsed = spec.pool(self.pool_obj)
        self.base = {"bound": [], "nodes": [], "pools": [self.pool_obj], "daemonsets": [],
                     "zones": {"general": list(ZONES)},
                     "subnets": [{"id": f"subnet-{z[-1]}", "zone": z} for z in ZONES], **moto_ec2()}
        self.types = {o.name: o for o in rounds.readings(self.base).catalog}
        allowed = requirements.of(self.parsed.provisioning.requirements)
        self.largest = resources.ZERO
        for option in self.types.values():
            if allowed.allows(option.labels):
                self.largest = self.largest.maximum(option.allocatable)

    def round(self, raw_pods: list[dict], machines: list[dict] = ()) -> rounds.Round:
        return rounds.provision("general", self.parsed, rounds.readings(
            {**self.base, "pending": raw_pods, "machines": list(machines)}), NOW)

    def bound(self, raw_pods: list[dict]) -> int:
        """Per resource, the pods' total requests over the largest allocatable of any allowed type; the most."""
        total = resources.ZERO
        for raw in raw_pods:
            total += pods.view(raw).requests
        largest = self.largest
        return max(math.ceil(total.cpu / largest.cpu), math.ceil(total.memory / largest.memory),
                   math.ceil(total.pods / largest.pods))

    def price(self, claims: list) -> float:
        """USD per hour of the claims' first-choice types."""
        return sum(min(o.price for o in self.types[c.instance_types[0]].offerings
                       if o.capacity_type == c.capacity_type and o.price is not None) for c in claims)


def arrival_sequence(count: int, rounds_count: int, rng: random.Random, pattern: str) -> list[tuple[int, dict]]:
    """(round, raw pod) for ``count`` pods of 6 Deployments."""
    sizes = [rng.choice(MENU) for _ in range(6)]
    start = [rng.randrange(rounds_count) for _ in range(6)]
    found = []
    for i in range(count):
        d = i % 6
        cpu, memory = sizes[d]
        when = start[d] if pattern == "bursts" else rng.randrange(rounds_count)
        found.append((when, _pending(f"app-{d}-{i}", f"app-{d}", cpu, memory, {}, FIVE_SECONDS_AGO)))
    return found


def _in_flight(made: list[tuple[dict, dict]], claims: list, first: int, types: dict, launched: bool) -> list[dict]:
    """The Machines a round created, as the next round lists them: launched (its first-choice type, zone and
    allocatable recorded) or not yet."""
    found = []
    for i, ((machine_spec, annotations), claim) in enumerate(zip(made, claims), first):
        status: dict = {}
        if launched:
            option = types[claim.instance_types[0]]
            zone = claim.zone or next(o.zone for o in option.offerings if o.capacity_type == claim.capacity_type)
            status = {"instanceID": f"i-{i:08x}", "instanceType": option.name, "zone": zone,
                      "capacity": option.capacity.to_quantities(), "allocatable": option.allocatable.to_quantities()}
        # Created a round ago: well within the time a launch may take.
        found.append({"metadata": {"name": f"general-{i}", "uid": f"uid-general-{i}",
                                   "creationTimestamp": FIVE_SECONDS_AGO,
                                   "labels": {machine_names.POOL_LABEL: "general"}, "annotations": dict(annotations)},
                      "spec": copy.deepcopy(machine_spec), "status": status})
    return found


def arrivals(args) -> dict:
    planner = Planner()
    rng = random.Random(args.seed)
    results: dict = {}
    for pattern in ("uniform", "bursts"):
        rows = []
        for _ in range(args.sequences):
            sequence = arrival_sequence(args.pods, args.rounds, rng, pattern)
            everything = [p for _, p in sequence]
            once = planner.round(everything)
            row = {"one": len(once.claims), "bound": planner.bound(everything),
                   "one_price": planner.price(once.claims)}
            for launched in (True, False):
                machines: list[dict] = []
                claims: list = []
                for r in range(args.rounds):
                    arrived = [p for when, p in sequence if when <= r]
                    out = planner.round(arrived, machines)
                    assert not out.result.unschedulable, out.result.unschedulable
                    machines += _in_flight(out.machines, out.claims, len(machines), planner.types, launched)
                    claims += out.claims
                key = "launched" if launched else "not_launched"
                row[key], row[f"{key}_price"] = len(machines), planner.price(claims)
            rows.append(row)
        summary = {"sequences": len(rows), "pods_each": args.pods, "rounds": args.rounds}
        for key in ("launched", "not_launched", "one", "bound"):
            summary[f"machines_{key}"] = sum(r[key] for r in rows)
        for key in ("launched", "not_launched"):
            summary[f"{key}_over_one"] = round(summary[f"machines_{key}"] / summary["machines_one"], 3)
            summary[f"{key}_over_bound"] = round(summary[f"machines_{key}"] / summary["machines_bound"], 3)
            summary[f"worst_{key}_over_one"] = round(max(r[key] / r["one"] for r in rows), 3)
            summary[f"{key}_price_over_one"] = round(sum(r[f"{key}_price"] for r in rows)
                                                     / sum(r["one_price"] for r in rows), 3)
        summary["one_over_bound"] = round(summary["machines_one"] / summary["machines_bound"], 3)
        summary["worst_one_over_bound"] = round(max(r["one"] / r["bound"] for r in rows), 3)
        results[pattern] = summary
    return {"largest_allocatable": planner.largest.to_quantities(), **results}


def stream(args) -> dict:
    planner = Planner()
    specs = [("small", 900, 3100), ("large", 3500, 28 * 1024)]
    results: dict = {}
    for order in ("interleaved", "blocks"):
        kinds = ([specs[0], specs[1]] * max(args.small, args.large))[:args.small + args.large] \
            if order == "interleaved" else [specs[0]] * args.small + [specs[1]] * args.large
        start = NOW - dt.timedelta(seconds=600)
        arrival = [(start + dt.timedelta(seconds=i / args.rate), kind) for i, kind in enumerate(kinds)]
        machines: list[dict] = []
        made: dict[str, int] = {}
        last: dt.datetime | None = None
        clock = start
        end = arrival[-1][0] + dt.timedelta(seconds=30)
        while clock < end:
            clock += dt.timedelta(seconds=0.5)
            arrived = [_pending(f"{app}-{i}", app, cpu, memory, {}, timefmt.fmt(when))
                       for i, (when, (app, cpu, memory)) in enumerate(arrival) if when <= clock]
            pool_obj = copy.deepcopy(planner.pool_obj)
            if last is not None:
                pool_obj["status"] = {"provisioning": {"lastRound": timefmt.fmt(last)}}
            out = rounds.provision("general", planner.parsed, rounds.readings(
                {**planner.base, "pools": [pool_obj], "pending": arrived, "machines": list(machines)}), clock)
            if not out.ready:
                continue
            last = clock
            if out.claims:
                made[f"{(clock - start).total_seconds():.1f}"] = len(out.claims)
                machines += _in_flight(out.machines, out.claims, len(machines), planner.types, True)
        everything = [_pending(f"{app}-{i}", app, cpu, memory, {}, FIVE_SECONDS_AGO)
                      for i, (_, (app, cpu, memory)) in enumerate(arrival)]
        results[order] = {"machines": len(machines), "machines_by_round_s": made,
                          "one_round": len(planner.round(everything).claims), "bound": planner.bound(everything)}
    return {"small": args.small, "large": args.large, "rate": args.rate, **results}


# =========================================================================== the local stack

# The hook server's settings for the local-stack sub-commands: the defaults, but moto shows an instance the
# moment it is launched, so a Machine removed soon after its launch need not wait out EC2's visibility window.
BENCH_HOOK_ENV = {
    "NODEWARDEN_MACHINE_LAUNCH_VISIBILITY_SECONDS": "2",
}
NAMESPACE = "bench"
POOL_LABEL_KEY = "e2e-pool"  # devcluster.pools' pool label on every Node of the pool


class Watcher(threading.Thread):
    """A watch of one collection, relisted whenever the API server ends it: when each object (by uid) was
    first seen, first met each of ``marks`` (name -> test of the object) and was deleted; its latest state."""

    def __init__(self, api, path: str, params: dict | None = None, marks: dict | None = None):
        super().__init__(daemon=True)
        self.api, self.path, self.params = api, path, dict(params or {})
        self.marks = dict(marks or {})
        self.first_seen: dict[str, float] = {}
        self.marked: dict[str, dict[str, float]] = {name: {} for name in self.marks}
        self.deleted: dict[str, float] = {}
        self.latest: dict[str, dict] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.synced = threading.Event()
        self.errors = 0

    def _seen(self, kind: str, obj: dict, at: float) -> None:
        uid = obj["metadata"]["uid"]
        with self.lock:
            self.first_seen.setdefault(uid, at)
            self.latest[uid] = obj
            for name, test in self.marks.items():
                if uid not in self.marked[name] and test(obj):
                    self.marked[name][uid] = at
            if kind == "DELETED":
                self.deleted.setdefault(uid, at)

    def run(self) -> None:
        version = None
        while not self.stopping.is_set():
            try:
                if version is None:
                    listed = self.api.get(self.path, params=self.params, timeout=60)
                    at = time.time()
                    items = listed.get("items") or []
                    for item in items:
                        self._seen("ADDED", item, at)
                    present = {item["metadata"]["uid"] for item in items}
                    with self.lock:  # gone while no watch ran
                        for uid in set(self.latest) - present:
                            self.deleted.setdefault(uid, at)
                    version = listed["metadata"]["resourceVersion"]
                    self.synced.set()
                for event in self.api.watch(self.path, params={**self.params, "resourceVersion": version,
                                                               "allowWatchBookmarks": "true"}, seconds=5):
                    if event["type"] == "ERROR":
                        version = None
                        break
                    obj = event["object"]
                    version = obj["metadata"].get("resourceVersion") or version
                    if event["type"] != "BOOKMARK":
                        self._seen(event["type"], obj, time.time())
                    if self.stopping.is_set():
                        break
            except Exception:  # noqa: BLE001 - a dropped watch is listed again
                self.errors += 1
                version = None
                time.sleep(0.2)

    def objects(self) -> list[dict]:
        """The objects not deleted, latest state."""
        with self.lock:
            return [o for uid, o in self.latest.items() if uid not in self.deleted]

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=15)


def _watching(*watchers: Watcher) -> None:
    for watcher in watchers:
        watcher.start()
    for watcher in watchers:
        _deadline_wait(watcher.synced.is_set, f"the first list of {watcher.path}", 60)


def _unschedulable(pod: dict) -> bool:
    return any(c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
               for c in (pod.get("status") or {}).get("conditions") or [])


def _running(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running"


def _spread(times: list[float], since: float) -> dict:
    """When the first, half and last of ``times`` came, in seconds after ``since``."""
    if not times:
        return {}
    ordered = sorted(t - since for t in times)
    return {"first": round(ordered[0], 1), "half": round(percentile(ordered, 50), 1), "last": round(ordered[-1], 1)}


def _deadline_wait(check, what: str, timeout: float, interval: float = 0.2):
    """Poll ``check`` until it returns something truthy; AssertionError naming ``what`` at the deadline."""
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last: {str(last)[:300]}")


def _provisioned_for(machine: dict) -> list[str]:
    """The pods a Machine (as the API server has it) was created for."""
    return list(inputs.provisioned_for(pool.machines_of([machine])[0]))


def _metrics(cluster) -> dict[str, float]:
    """The hook server's provisioning metrics, summed over labels."""
    import requests
    text = requests.get(f"{cluster.hook_server.metrics_url}/metrics", timeout=10).text
    wanted = ("nodewarden_provisioning_decision_seconds_sum", "nodewarden_provisioning_decision_seconds_count",
              "nodewarden_machines_launched_total", "nodewarden_consolidations_total",
              "nodewarden_machines_disrupted_total",
              # The hooks' own limiter: calls it held back, and the seconds calls waited for tokens.
              "nodewarden_aws_rate_limited_total", "nodewarden_aws_rate_wait_seconds_sum")
    found: dict[str, float] = {}
    for line in text.splitlines():
        name = re.split(r"[{ ]", line, maxsplit=1)[0]
        if name in wanted:
            label = re.search(r'reason="([^"]*)"', line)
            key = f"{name}{{{label.group(1)}}}" if label else name
            found[key] = found.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return found


def _hook_env(args) -> dict:
    env = dict(BENCH_HOOK_ENV)
    for item in args.hook_env or []:
        key, equals, value = item.partition("=")
        if not key.startswith("NODEWARDEN_") or not equals:
            raise SystemExit(f"--hook-env {item!r}: give NODEWARDEN_NAME=value")
        env[key] = value
    return env


def _stack(args, name: str):
    from devcluster import Cluster, Layout
    from devcluster.components import LEAST_ALLOCATED
    layout = Layout(workdir=ROOT / ".local" / "bench" / f"provisioning-{name}-{os.getpid()}")
    return Cluster(layout, port_mode="dynamic", hook_env=_hook_env(args),
                   scheduler_scoring=getattr(args, "scheduler_scoring", LEAST_ALLOCATED))


def _namespace(api) -> None:
    api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    _deadline_wait(lambda: api.get_or_none(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default"),
                   "the namespace's default ServiceAccount", 60)


def _pool_ready(api, name: str, timeout: float = 60) -> None:
    """Until the pool has run a round (its status says when)."""
    from devcluster.pools import POOLS
    _deadline_wait(lambda: ((api.get(f"{POOLS}/{name}").get("status") or {}).get("provisioning") or {})
                   .get("lastRound"), f"NodePool {name}'s first round", timeout)


def _general_pool(cloud, name: str, sizes: list[str] | None, consolidate_after: str) -> dict:
    from devcluster.pools import pool_subnet, provisioning_pool_manifest
    return provisioning_pool_manifest(name, [pool_subnet(cloud, z) for z in ZONES],
                                      requirements=general_requirements(sizes),
                                      disruption={"consolidateAfter": consolidate_after})


def _bare_pod(name: str, pool_name: str, cpu: str, memory: str) -> dict:
    from devcluster import workloads
    template = workloads.pod_template(name.rsplit("-", 1)[0], requests={"cpu": cpu, "memory": memory},
                                      node_selector={POOL_LABEL_KEY: pool_name})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, **template["metadata"]},
            "spec": template["spec"]}


def latency(args) -> dict:
    from devcluster import fleet
    from devcluster.api import AdminApi
    from devcluster.pools import MACHINES, POOLS, condition_status, live_machines, pool_machines

    rng = random.Random(args.seed)
    samples: list[float] = []
    later: list[float] = []  # after the first batch: every hook worker has read EC2's catalog by then
    to_unschedulable: list[float] = []
    unschedulable_to_machine: list[float] = []
    batches = []
    with _stack(args, "latency") as cluster:
        api = AdminApi(cluster.kubeconfig)
        cloud = fleet.Aws(cluster.aws_env())
        _namespace(api)
        machines = Watcher(api, MACHINES)
        pod_watch = Watcher(api, f"/api/v1/namespaces/{NAMESPACE}/pods", marks={"unschedulable": _unschedulable})
        _watching(machines, pod_watch)
        pool_posts = ThreadPoolExecutor(8)
        try:
            for number in range(args.batches):
                name = f"latency-{number}"
                api.create(POOLS, _general_pool(cloud, name, ["xlarge", "2xlarge", "4xlarge"], "Never"))
                _pool_ready(api, name)
                time.sleep(rng.uniform(0.5, 1.5))  # the batch meets the pools' 0.5 s poll at a random phase
                sizes = [rng.choice(((500, 1024), (1000, 2048), (2000, 4096), (250, 512)))
                         for _ in range(args.pods)]

                def post(i: int, name=name, sizes=sizes) -> tuple[str, float]:
                    cpu, memory = sizes[i]
                    api.create(f"/api/v1/namespaces/{NAMESPACE}/pods",
                               _bare_pod(f"{name}-{i}", name, f"{cpu}m", f"{memory}Mi"))
                    return f"{NAMESPACE}/{name}-{i}", time.time()

                started = time.time()
                created = dict(pool_posts.map(post, range(args.pods)))

                def named() -> dict[str, float] | None:
                    found = {}
                    for machine in machines.objects():
                        if machine["metadata"]["labels"].get(machine_names.POOL_LABEL) != name:
                            continue
                        seen = machines.first_seen[machine["metadata"]["uid"]]
                        for key in _provisioned_for(machine):
                            found[key] = min(found.get(key, seen), seen)
                    return found if set(created) <= set(found) else None

                found = _deadline_wait(named, f"Machines naming every pod of batch {number}", 120, 0.05)
                waits = [found[key] - at for key, at in created.items()]
                samples += waits
                if number:
                    later += waits
                with pod_watch.lock:
                    uids = {f"{NAMESPACE}/{o['metadata']['name']}": uid for uid, o in pod_watch.latest.items()}
                    marked = dict(pod_watch.marked["unschedulable"])
                for key, at in created.items():
                    seen = marked.get(uids.get(key, ""))
                    if seen is not None:
                        to_unschedulable.append(seen - at)
                        unschedulable_to_machine.append(found[key] - seen)
                made = [m for m in machines.objects() if m["metadata"]["labels"].get(machine_names.POOL_LABEL) == name]
                batch = {"pods": args.pods, "machines": len(made),
                         "posting_s": round(max(created.values()) - started, 3),
                         "p50_s": round(percentile(waits, 50), 3), "max_s": round(max(waits), 3),
                         "last_pod_to_last_machine_s": round(max(found.values()) - max(created.values()), 3)}
                batches.append(batch)
                print(f"batch {number + 1}: {batch}", flush=True)
                _deadline_wait(lambda: all(condition_status(m, machine_names.INITIALIZED) == "True"
                                           for m in live_machines(pool_machines(api, name))),
                               f"batch {number}'s Machines Initialized", 180, 0.5)
                for i in range(args.pods):
                    api.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/{name}-{i}")
                api.delete(f"{POOLS}/{name}")
                _deadline_wait(lambda: api.get_or_none(f"{POOLS}/{name}") is None, f"NodePool {name} gone", 240, 0.5)
            metrics = _metrics(cluster)
        finally:
            pool_posts.shutdown()
            for watcher in (machines, pod_watch):
                watcher.stop()

    def summary(values: list[float]) -> dict:
        if not values:
            return {}
        return {"p50": round(percentile(values, 50), 3), "p99": round(percentile(values, 99), 3),
                "max": round(max(values), 3), "n": len(values)}

    return {"batches": batches, "pods": len(samples), "pending_to_machine_s": summary(samples),
            "pending_to_machine_after_the_first_batch_s": summary(later),
            "pending_to_unschedulable_s": summary(to_unschedulable),
            "unschedulable_to_machine_s": summary(unschedulable_to_machine),
            "hook_settings": _hook_env(args), "metrics": metrics}


def _phase(pod: dict) -> str:
    if pod["metadata"].get("deletionTimestamp"):
        return "Terminating"
    return (pod.get("status") or {}).get("phase") or "?"


def _workload_plans(args) -> dict:
    """For comparison: the Machines one round over all the workload's pods would launch, and the lower bound,
    before and after the scale-in."""
    planner = Planner(args.sizes)
    found = {}
    for label, small, large in (("scale_out", args.small, args.large), ("scale_in", args.scale_to, args.scale_to)):
        raw = [_pending(f"small-{i}", "small", 900, 3100, {}, FIVE_SECONDS_AGO) for i in range(small)]
        raw += [_pending(f"large-{i}", "large", 3500, 28 * 1024, {}, FIVE_SECONDS_AGO) for i in range(large)]
        out = planner.round(raw)
        types: dict[str, int] = {}
        for claim in out.claims:
            types[claim.instance_types[0]] = types.get(claim.instance_types[0], 0) + 1
        found[label] = {"machines": len(out.claims), "bound": planner.bound(raw), "instance_types": types}
    return found


def workload(args) -> dict:
    from devcluster import fleet, workloads
    from devcluster.api import AdminApi
    from devcluster.pools import MACHINES, POOLS, condition_status

    name = "perf"
    result: dict = {"small": args.small, "large": args.large, "scale_to": args.scale_to,
                    "consolidate_after": args.consolidate_after, "hook_settings": _hook_env(args),
                    "scheduler_scoring": args.scheduler_scoring,
                    "one_round_in_process": _workload_plans(args)}
    with _stack(args, "workload") as cluster:
        api = AdminApi(cluster.kubeconfig)
        cloud = fleet.Aws(cluster.aws_env())
        _namespace(api)
        api.create(POOLS, _general_pool(cloud, name, args.sizes, args.consolidate_after))
        _pool_ready(api, name)
        machines = Watcher(api, MACHINES, {"labelSelector": f"{machine_names.POOL_LABEL}={name}"},
                           {"initialized": lambda m: condition_status(m, machine_names.INITIALIZED) == "True"})
        pod_watch = Watcher(api, f"/api/v1/namespaces/{NAMESPACE}/pods", marks={
            "unschedulable": _unschedulable, "running": _running})
        _watching(machines, pod_watch)
        buckets = sampled_buckets(cluster)
        try:
            started = time.time()
            for deployment, count, cpu, memory in (("small", args.small, "900m", "3100Mi"),
                                                   ("large", args.large, "3500m", "28Gi")):
                workloads.create_deployment(api, NAMESPACE, deployment, replicas=count,
                                            requests={"cpu": cpu, "memory": memory},
                                            node_selector={POOL_LABEL_KEY: name})
            total = args.small + args.large

            def count_phases() -> dict:
                counted: dict[str, int] = {}
                for pod in pod_watch.objects():
                    phase = _phase(pod)
                    if phase == "Pending" and (pod.get("spec") or {}).get("nodeName"):
                        phase = "Bound"
                    counted[phase] = counted.get(phase, 0) + 1
                return counted

            def progress(since: float, what: str) -> None:
                live = [m for m in machines.objects() if not m["metadata"].get("deletionTimestamp")]
                ready = sum(1 for m in live if condition_status(m, machine_names.INITIALIZED) == "True")
                print(f"{what} +{time.time() - since:5.0f}s: pods {count_phases()}, Machines {len(live)} live "
                      f"({ready} Initialized), {len(machines.first_seen)} made, {len(machines.deleted)} gone",
                      flush=True)

            last_report = time.time()

            def all_running() -> bool:
                nonlocal last_report
                if time.time() - last_report >= 10:
                    progress(started, "scale-out")
                    last_report = time.time()
                return count_phases().get("Running", 0) == total and len(pod_watch.objects()) == total

            _deadline_wait(all_running, f"{total} pods Running", args.timeout, 0.2)
            running_at = time.time()
            aws_buckets = buckets.stop() if buckets else None
            made = machines.objects()
            first_machine = min(machines.first_seen.values(), default=running_at)
            initialized = [m for m in made if condition_status(m, machine_names.INITIALIZED) == "True"]
            util = workloads.pool_utilization(api, name)
            types: dict[str, int] = {}
            for machine in made:
                shown = machine["status"].get("instanceType") or "?"
                types[shown] = types.get(shown, 0) + 1
            # Whether kube-scheduler put the pods where provisioning planned them (provisioned-for names the pods
            # a Machine was created for): a pod placed elsewhere leaves its planned room to another, or to none.
            planned: dict[str, set[str]] = {}
            for machine in made:
                for key in _provisioned_for(machine):
                    planned.setdefault(key, set()).add(machine["status"].get("nodeName") or "")
            landed = {f"{NAMESPACE}/{p['metadata']['name']}": p["spec"].get("nodeName") for p in pod_watch.objects()}
            as_planned = sum(1 for key, nodes in planned.items() if landed.get(key) in nodes)
            created_at: dict[str, int] = {}
            for seen in sorted(machines.first_seen.values()):
                key = f"{seen - started:.0f}"
                created_at[key] = created_at.get(key, 0) + 1
            result["scale_out"] = {
                "all_running_s": round(running_at - started, 1),
                "first_machine_s": round(first_machine - started, 1),
                "last_machine_s": round(max(machines.first_seen.values()) - started, 1),
                "pods_created_s": _spread(list(pod_watch.first_seen.values()), started),
                "pods_unschedulable_s": _spread(list(pod_watch.marked["unschedulable"].values()), started),
                "pods_running_s": _spread(list(pod_watch.marked["running"].values()), started),
                "machines_created_s": _spread(list(machines.first_seen.values()), started),
                "machines_initialized_s": _spread(list(machines.marked["initialized"].values()), started),
                "machines_created_by_second": created_at,
                "pods_named_by_machines": len(planned), "of_them_on_a_machine_made_for_them": as_planned,
                "named_by_several_machines": sum(1 for nodes in planned.values() if len(nodes) > 1),
                "machines": len(made), "initialized": len(initialized), "instance_types": types,
                "nodes": util.nodes, "pods_on_nodes": util.pods,
                "cpu_utilization": round(util.cpu, 3), "memory_utilization": round(util.memory, 3),
                "metrics": _metrics(cluster), "aws_buckets": aws_buckets,
                "instances": _instances_of_machines(cloud, name, made)}
            print(f"scale-out: {result['scale_out']}", flush=True)

            def settled(kept: int, since: float, what: str) -> float | None:
                """When consolidation was done, for ``args.quiet`` seconds on end: the pool's status lists no
                candidate and no disruption, no Machine is being deleted, ``kept`` pods run; None by the
                deadline."""
                def settled_now() -> bool:
                    status = api.get(f"{POOLS}/{name}").get("status") or {}
                    deleting = [m for m in machines.objects() if m["metadata"].get("deletionTimestamp")]
                    phases = count_phases()
                    return (not status.get("consolidation") and not status.get("disruptions") and not deleting
                            and phases.get("Running", 0) == kept and len(pod_watch.objects()) == kept)

                stretch, reported = None, time.time()
                end = time.monotonic() + args.timeout
                while time.monotonic() < end:
                    now = time.time()
                    if settled_now():
                        stretch = stretch or now
                        if now - stretch >= args.quiet:
                            return stretch
                    else:
                        stretch = None
                    if now - reported >= 10:
                        progress(since, what)
                        reported = now
                    time.sleep(0.5)
                return None

            # ---- consolidation with the demand unchanged: what it takes back of the scale-out
            ran = {p["metadata"]["uid"] for p in pod_watch.objects()}
            machines_running = {uid for uid, m in machines.latest.items() if uid not in machines.deleted}
            calm = settled(total, running_at, "after the scale-out")
            gone = [uid for uid in machines_running if uid in machines.deleted
                    or machines.latest[uid]["metadata"].get("deletionTimestamp")]
            result["after_scale_out"] = {
                "consolidation_done_s": round(calm - running_at, 1) if calm else None,
                "machines_removed": len(gone),
                "pods_evicted": sum(1 for uid in ran if uid in pod_watch.deleted
                                    or pod_watch.latest[uid]["metadata"].get("deletionTimestamp")),
                "of_pods": len(ran)}
            print(f"after the scale-out: {result['after_scale_out']}", flush=True)

            # ---- scale-in and consolidation
            before = {uid for uid, m in machines.latest.items() if uid not in machines.deleted}
            pods_before = set(pod_watch.first_seen)
            scaled = time.time()
            for deployment in ("small", "large"):
                workloads.scale(api, NAMESPACE, deployment, args.scale_to)
            kept = 2 * args.scale_to

            def scaled_in() -> set | None:
                live = [p for p in pod_watch.objects() if not p["metadata"].get("deletionTimestamp")]
                return {p["metadata"]["uid"] for p in live} if len(live) == kept else None

            staying = _deadline_wait(scaled_in, f"the Deployments down to {kept} pods", 120, 0.1)
            scaled_in_at = time.time()

            done = settled(kept, scaled, "scale-in")
            removed, reasons, evictions_recorded, removal_times = [], {}, 0, []
            for uid in before:
                machine = machines.latest[uid]
                gone = uid in machines.deleted or machine["metadata"].get("deletionTimestamp")
                if not gone:
                    continue
                removed.append(machine["metadata"]["name"])
                mark = signals.of(pool.machines_of([machine])[0], signals.DISRUPTION_ANNOTATION)
                reason = mark.reason if mark else "?"
                reasons[reason] = reasons.get(reason, 0) + 1
                evictions_recorded += int(((machine["status"].get("termination") or {}).get("evictions")) or 0)
                stamp = timefmt.parse(machine["metadata"].get("deletionTimestamp"))
                removal_times.append(stamp.timestamp() if stamp else machines.deleted.get(uid, time.time()))
            evicted = [uid for uid in staying if uid in pod_watch.deleted
                       or pod_watch.latest[uid]["metadata"].get("deletionTimestamp")]
            created_after = []
            for uid, seen in machines.first_seen.items():
                if uid in before or seen < scaled:
                    continue
                machine = machines.latest[uid]
                near = any(0 <= seen - t <= _seconds(args.consolidate_after) for t in removal_times)
                created_after.append({"machine": machine["metadata"]["name"], "at_s": round(seen - scaled, 1),
                                      "within_consolidate_after_of_a_removal": near,
                                      "pods": _provisioned_for(machine)[:5]})
            result["scale_in"] = {
                "consolidation_done_s": round(done - scaled, 1) if done else None,
                "deployments_scaled_in_s": round(scaled_in_at - scaled, 1),
                "machines_before": len(before), "machines_removed": len(removed), "removed_by_reason": reasons,
                "pods_evicted": len(evicted), "evictions_recorded_by_machines": evictions_recorded,
                "pods_created_since": len(set(pod_watch.first_seen) - pods_before),
                "machines_created_since": len(created_after), "machines_created": created_after,
                "metrics": _metrics(cluster)}
            if done:
                util = workloads.pool_utilization(api, name)
                result["scale_in"].update(nodes_after=util.nodes, cpu_utilization=round(util.cpu, 3),
                                          memory_utilization=round(util.memory, 3))
            else:
                result["scale_in"]["status_at_deadline"] = {
                    k: v for k, v in (api.get(f"{POOLS}/{name}").get("status") or {}).items()
                    if k in ("consolidation", "disruptions", "disruption")}
        finally:
            for watcher in (machines, pod_watch):
                watcher.stop()
            if buckets:
                buckets.stop()
    return result


def _instances_of_machines(cloud, pool_name: str, made: list[dict]) -> dict:
    """What EC2 holds for the pool's Machines: each Machine's instances by its UID tag. ``duplicated``: Machines
    with more than one instance not terminated; ``lost``: Machines with none; ``unowned``: the pool's
    instances no Machine made has."""
    held: dict[str, list[str]] = {}
    pool_instances: set[str] = set()
    pages = cloud.ec2.get_paginator("describe_instances").paginate(
        Filters=[{"Name": f"tag:{machine_names.TAG_POOL}", "Values": [pool_name]},
                 {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]}])
    for page in pages:
        for reservation in page["Reservations"]:
            for instance in reservation["Instances"]:
                tags = {t["Key"]: t["Value"] for t in instance.get("Tags") or []}
                pool_instances.add(instance["InstanceId"])
                held.setdefault(tags.get(machine_names.TAG_MACHINE_UID, ""), []).append(instance["InstanceId"])
    uids = {m["metadata"]["uid"] for m in made if not m["metadata"].get("deletionTimestamp")}
    return {"machines": len(uids), "instances": len(pool_instances),
            "duplicated": sorted(uid for uid in uids if len(held.get(uid, [])) > 1),
            "lost": sorted(uid for uid in uids if not held.get(uid)),
            "unowned": sorted(i for uid, ids in held.items() if uid not in uids for i in ids)}


def _seconds(duration: str) -> float:
    from hooks import bounds
    return float(bounds.duration(duration, "--consolidate-after"))


# =========================================================================== the command line


def _batch_size(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= provisioning_names.PROVISIONED_FOR_MAX_PODS:
        raise argparse.ArgumentTypeError(f"{text!r}: from 1 to {provisioning_names.PROVISIONED_FOR_MAX_PODS}")
    return int(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="mode", required=True)

    d = sub.add_parser("decision", help="CPU time of a round's decision (the venv)")
    d.add_argument("--pods", type=int, default=1000)
    d.add_argument("--types", type=int, default=50)
    d.add_argument("--slots", type=int, default=40)
    d.add_argument("--residents", type=int,
                   help="pods on each existing Node, read from raw Nodes and pods within the time "
                        "(default: 3 to 11, as Slots)")
    d.add_argument("--repeat", type=int, default=20)
    st = sub.add_parser("storm", help="CPU time of the rounds of every pool over a storm of pending pods (the venv)")
    st.add_argument("--deployments", type=int, default=500)
    st.add_argument("--replicas", type=int, default=10)
    st.add_argument("--slots", type=int, default=40)
    st.add_argument("--repeat", type=int, default=5)
    c = sub.add_parser("consolidation", help="CPU time of consolidation's decision for one pool (the venv)")
    c.add_argument("--machines", type=int, default=100)
    c.add_argument("--pods", type=int, default=20, help="pods per Node: at most (random), exactly (even, full)")
    c.add_argument("--layout", choices=LAYOUTS, default="random",
                   help="random: 100m to 1 cpu, as many as fit; even: sizes that fit; full: filling each Node")
    c.add_argument("--repeat", type=int, default=5)
    a = sub.add_parser("arrivals", help="Machines launched round by round against one round (the venv)")
    a.add_argument("--sequences", type=int, default=20)
    a.add_argument("--pods", type=int, default=300)
    a.add_argument("--rounds", type=int, default=5)
    sr = sub.add_parser("stream", help="workload's arrival replayed in process, pods bound as planned (the venv)")
    sr.add_argument("--small", type=int, default=500, help="pods of 900m / 3100Mi")
    sr.add_argument("--large", type=int, default=500, help="pods of 3500m / 28Gi")
    sr.add_argument("--rate", type=float, default=40.0, help="pods turning Unschedulable a second")
    lat = sub.add_parser("latency", help="pending pods to their Machine (the local stack)")
    lat.add_argument("--batches", type=int, default=5)
    lat.add_argument("--pods", type=_batch_size, default=20,
                     help="pods per batch (a Machine names at most "
                          f"{provisioning_names.PROVISIONED_FOR_MAX_PODS} it was made for)")
    w = sub.add_parser("workload", help="Karpenter's basic performance workload (the local stack)")
    w.add_argument("--small", type=int, default=500, help="pods of 900m / 3100Mi")
    w.add_argument("--large", type=int, default=500, help="pods of 3500m / 28Gi")
    w.add_argument("--scale-to", type=int, default=350, help="each Deployment's replicas after the scale-in")
    w.add_argument("--sizes", nargs="*", default=["large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge",
                                                   "16xlarge", "24xlarge"],
                   help="the instance sizes the pool allows (families m5, c5, r5)")
    w.add_argument("--consolidate-after", default="10s")
    w.add_argument("--quiet", type=float, default=30.0,
                   help="seconds consolidation must stay done to count as done")
    w.add_argument("--timeout", type=float, default=900.0, help="deadline of each phase, seconds")
    w.add_argument("--scheduler-scoring", choices=("LeastAllocated", "MostAllocated"), default="LeastAllocated",
                   help="kube-scheduler's NodeResourcesFit scoring (MostAllocated: the bin-packing profile)")
    for each in (d, st, c, a, sr, lat, w):
        each.add_argument("--seed", type=int, default=7)
        each.add_argument("--json", type=pathlib.Path)
    for each in (lat, w):
        each.add_argument("--hook-env", action="append", metavar="NODEWARDEN_NAME=VALUE",
                          help="a setting for the hook server, over BENCH_HOOK_ENV's")
    args = parser.parse_args(argv)
    if args.mode in ("decision", "storm", "consolidation", "arrivals", "stream"):
        import logging
        logging.disable(logging.WARNING)
        results = {"decision": decision, "storm": storm, "consolidation": consolidation_bench,
                   "arrivals": arrivals, "stream": stream}[args.mode](args)
    else:
        from devcluster.cluster import configure_logging
        configure_logging()
        workdirs = ROOT / ".local" / "bench"
        try:
            results = {"latency": latency, "workload": workload}[args.mode](args)
        finally:
            for stale in workdirs.glob(f"provisioning-*-{os.getpid()}"):
                shutil.rmtree(stale, ignore_errors=True)
    print(json.dumps(results, indent=2))
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
