"""Consolidation's decision at scale: CPU time of hooks.provisioning.consolidation.decide for one pool.

    .venv/bin/python bench/consolidation_decision.py [--machines 100] [--pods 20] [--layout random]
        [--repeat 5]

The world: --machines Initialized Machines of one pool, each with a Ready
Node of 8 cpu and 32 GiB in one of three zones, a DaemonSet pod, and pods
of a few Deployments (some spread over zones, some with a node selector,
some with a volume claim). --layout says how many and how large:

- random: up to --pods pods of 100m to 1 cpu, as many as fit;
- even: exactly --pods pods, of sizes that fit (``--machines 200 --pods 20
  --layout even``: a large pool, 4,000 pods besides the DaemonSets);
- full: exactly --pods pods that fill each Node's cpu, so no Machine's pods
  fit elsewhere and every Underutilized check fails (the search's worst case).

Every Machine has been a candidate for an hour, so each is judged Empty or
Underutilized on every call. Times are the CPU time (time.process_time) of
decide(), median and worst of --repeat runs.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import pathlib
import random
import statistics
import sys
import time
from typing import Iterator

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hooks import machine_names, provisioning_names, timefmt  # noqa: E402
from hooks.machines.budgets import Budget  # noqa: E402
from hooks.machines.signals import CONSOLIDATION  # noqa: E402
from hooks.machines.spec import ProvisioningSpec  # noqa: E402
from hooks.machines.pool import machines_of  # noqa: E402
from hooks.provisioning import consolidation  # noqa: E402

NOW = dt.datetime(2026, 11, 27, 13, 0, tzinfo=dt.timezone.utc)
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
HOUR_AGO = timefmt.fmt(NOW - dt.timedelta(hours=1))


def _pod(name: str, node: str, cpu: int, memory: int, spec: dict, owner: str = "ReplicaSet") -> dict:
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "labels": {"app": name[:6]},
                         "ownerReferences": [{"kind": owner, "name": "x", "uid": "x", "controller": True}],
                         "creationTimestamp": HOUR_AGO},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {
                "cpu": f"{cpu}m", "memory": f"{memory}Mi"}}}], **spec},
            "status": {"phase": "Running", "startTime": HOUR_AGO}}


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


def world(machines: int, per_node: int, rng: random.Random, layout: str = "random") -> tuple[list, list, dict]:
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
        bound = [_pod(f"ds-{i}", node, 100, 128, {}, owner="DaemonSet")]
        for j, cpu in enumerate(_sizes(layout, per_node, rng)):
            kind = rng.randrange(8)
            spec: dict = {}
            if kind == 0:
                spec["topologySpreadConstraints"] = [{"maxSkew": 1, "topologyKey": provisioning_names.ZONE_LABEL,
                                                      "whenUnsatisfiable": "DoNotSchedule",
                                                      "labelSelector": {"matchLabels": {"app": "spread"}}}]
            elif kind == 1 and i % 4 == 0:
                spec["nodeSelector"] = {"disk": "ssd"}
            elif kind == 2:
                spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": f"d-{i}-{j}"}}]
            prefix = "spread" if kind == 0 else f"app{kind}"
            bound.append(_pod(f"{prefix}-{i}-{j}", node, cpu, cpu * 2, spec))
        by_node[node] = bound
    return machines_of(found), nodes, by_node


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machines", type=int, default=100)
    parser.add_argument("--pods", type=int, default=20)
    parser.add_argument("--layout", choices=LAYOUTS, default="random")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", type=pathlib.Path)
    args = parser.parse_args(argv)
    machines, nodes, by_node = world(args.machines, args.pods, random.Random(args.seed), args.layout)
    previous = [{"machine": m["metadata"]["name"], "uid": m["metadata"]["uid"], "reason": reason, "since": HOUR_AGO}
                for m in machines for reason in CONSOLIDATION]
    budget = consolidation.BudgetState((Budget("10%"),), len(machines), 0, frozenset())

    def run() -> consolidation.Consolidation:
        return consolidation.decide(machines, nodes, by_node, set(), 0, ProvisioningSpec(), previous, budget,
                                    NOW)

    out, runs = run(), []
    for _ in range(args.repeat):
        start = time.process_time()
        run()
        runs.append(time.process_time() - start)
    results = {"machines": args.machines, "layout": args.layout, "pods": sum(len(p) for p in by_node.values()),
               "candidates": {reason: sum(1 for r in out.candidates if r["reason"] == reason)
                              for reason in CONSOLIDATION},
               "removals": [(r.machine, r.reason) for r in out.remove],
               "cpu_time": {"median_ms": round(statistics.median(runs) * 1000, 1),
                            "max_ms": round(max(runs) * 1000, 1)}}
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
