#!/usr/bin/env python3
"""Cordon → deregistration latency of node-detacher on the real local stack.

Starts its own devcluster (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, Metacontroller, moto, the hook server), creates N Nodes whose
moto instances sit in a target group and a classic ELB, and for each trial:
cordons one Node through the API server and times until moto's
DescribeTargetHealth no longer lists its instance (and, separately, until the
classic ELB no longer holds it). Then it uncordons the Node and times until
the instance is back in both, so every trial starts from the same state.

    .venv/bin/python bench/cordon_to_deregister.py [--trials 20] [--json out.json]

Needs the binaries from `make controlplane-bins`.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from devcluster import Cluster, Layout, fleet  # noqa: E402
from devcluster.api import AdminApi, wait_for  # noqa: E402
from measure import percentile, write_json  # noqa: E402
from devcluster.cluster import CLUSTER_NAME, configure_logging  # noqa: E402

CLASSIC_ELB = "bench-classic"
POLL_SECONDS = 0.005
DISCOVERY_CACHE_SECONDS = 30  # the hook server's default
# node-detacher's record of what it deregistered; uncordoning before it lands
# on the Node is a different scenario (see tests/e2e), not this measurement.
DEREGISTERED = "nodewarden.io/deregistered"


def time_until(condition, timeout: float = 30.0) -> float:
    """Seconds (monotonic) at which ``condition`` first held, polling as fast as moto answers."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return time.monotonic()
        time.sleep(POLL_SECONDS)
    raise TimeoutError("condition not met")


def run(trials: int) -> dict:
    # Its own directory: another stack may run from this checkout at the same time.
    layout = Layout(workdir=REPO / ".local" / "bench" / str(os.getpid()))
    with Cluster(layout, port_mode="dynamic") as cluster:
        api = AdminApi(cluster.kubeconfig)
        aws = fleet.Aws(cluster.aws_env())
        fleet.create_classic_elb(aws, CLASSIC_ELB, CLUSTER_NAME)
        group = fleet.create_fleet(aws, count=trials, target_group="bench", classic_elb=CLASSIC_ELB,
                                   cluster_name=CLUSTER_NAME)
        nodes = {f"bench-{i:02d}": iid for i, iid in enumerate(group.instance_ids)}
        for name, instance_id in nodes.items():
            api.create("/api/v1/nodes", fleet.node_manifest(name, instance_id))
        for name in nodes:  # synced once by the Node decorator, as a serving node is before its cordon
            wait_for(lambda n=name: fleet.node_seen(api.get(f"/api/v1/nodes/{n}")), f"{name} synced", timeout=60)
        # A detach reads its node's load balancers from the hook worker's discovery index, rebuilt in the
        # background within NODEWARDEN_DISCOVERY_CACHE_SECONDS; the ones built before the fleet existed
        # know none of it. A serving node has been in its load balancers longer than that.
        time.sleep(DISCOVERY_CACHE_SECONDS)

        def in_group(instance_id: str) -> bool:
            return any(i == instance_id for i, _ in fleet.targets(aws, group.target_group_arn))

        def in_elb(instance_id: str) -> bool:
            return instance_id in fleet.elb_instances(aws, CLASSIC_ELB)

        to_target_group, to_classic_elb, back = [], [], []
        for trial, (name, instance_id) in enumerate(nodes.items(), 1):
            time.sleep(0.5)  # let the previous trial's syncs settle
            start = time.monotonic()
            api.patch(f"/api/v1/nodes/{name}", {"spec": {"unschedulable": True}})
            left_group = time_until(lambda: not in_group(instance_id))
            left_elb = time_until(lambda: not in_elb(instance_id))
            to_target_group.append(left_group - start)
            to_classic_elb.append(left_elb - start)
            print(f"trial {trial:2d} {name}: target group {to_target_group[-1] * 1000:6.0f} ms, "
                  f"classic ELB {to_classic_elb[-1] * 1000:6.0f} ms", flush=True)
            wait_for(lambda: DEREGISTERED in api.get(f"/api/v1/nodes/{name}")["metadata"].get("annotations", {}),
                     f"{name}'s detach recorded", timeout=30)
            start = time.monotonic()
            api.patch(f"/api/v1/nodes/{name}", {"spec": {"unschedulable": False}})
            back.append(time_until(lambda: in_group(instance_id) and in_elb(instance_id)) - start)

        def summary(values: list[float]) -> dict:
            return {"p50_ms": round(percentile(values, 50) * 1000),
                    "p99_ms": round(percentile(values, 99) * 1000),
                    "mean_ms": round(statistics.mean(values) * 1000),
                    "max_ms": round(max(values) * 1000),
                    "samples_ms": [round(v * 1000) for v in values]}

        version = api.get("/version")["gitVersion"]
        return {
            "trials": trials,
            "kubernetes": version,
            "metacontroller": _metacontroller_version(layout),
            "target_group": summary(to_target_group),
            "classic_elb": summary(to_classic_elb),
            "uncordon_to_both": summary(back),
        }


def _metacontroller_version(layout: Layout) -> str:
    log = (layout.logs / "metacontroller.log").read_text(errors="replace")
    marker = 'version="'
    return log.split(marker, 1)[1].split('"', 1)[0] if marker in log else "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    configure_logging()
    try:
        results = run(args.trials)
    finally:
        shutil.rmtree(REPO / ".local" / "bench" / str(os.getpid()), ignore_errors=True)
    tg, clb, back = results["target_group"], results["classic_elb"], results["uncordon_to_both"]
    print(f"\ncordon -> instance out of the target group, {results['trials']} trials: "
          f"p50 {tg['p50_ms']} ms, p99 {tg['p99_ms']} ms (classic ELB: p50 {clb['p50_ms']} ms, "
          f"p99 {clb['p99_ms']} ms); uncordon -> back in both: p50 {back['p50_ms']} ms, p99 {back['p99_ms']} ms; "
          f"Kubernetes {results['kubernetes']}, Metacontroller {results['metacontroller']}")
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
