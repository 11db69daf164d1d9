#!/usr/bin/env python3
"""Node failure → StatefulSet replacement bound elsewhere, with and without nodewarden.

Starts its own devcluster (etcd, kube-apiserver, kube-controller-manager with
node lifecycle, taint eviction, pod GC and attach/detach, kube-scheduler,
Metacontroller, kwok, moto, the hook server) and three healthy Nodes that kwok
keeps Ready. Each trial (devcluster/failover.py) puts a StatefulSet pod with
a ReadWriteOnce volume (CSI PV, attached VolumeAttachment) and a Deployment
pod on a fresh Node backed by a moto instance, then takes the Node out of
kwok's selector: its Lease stops, and the node lifecycle controller turns its
Ready condition Unknown after its grace period. The time is taken from that
transition to the StatefulSet's replacement pod being bound to another Node by
the scheduler.

- fenced trials (a NodeFencingPolicy with a 30 s duration selects the Node)
  run one after another, each failed after a random 0–20 s pause so that
  pod GC's 20 s loop is met at a random phase;
- baseline trials (no policy: Kubernetes alone) all fail at the start and are
  watched for --baseline-seconds (default 600) while the fenced trials run.

    .venv/bin/python bench/fencing_failover.py [--trials 5] [--baseline-trials 5]
                                               [--baseline-seconds 600] [--json out.json]
                                               [--crowd 5000]

With --crowd N, N more Nodes shaped like real ones (bench/scale.py's 13 KB
Node), kept Ready by kwok and tainted NoSchedule so no trial's pod lands on
them, share each fenced trial's policy with its node: one node dies among N,
and its policy counts all of them. Those runs beat at a real kubelet's pace
(a 40 s Lease, a 50 s grace period), or with a longer Lease where two cores
could not keep up with that many renewals (kwok.heartbeat_for); the time is
taken from Ready turning Unknown, so the grace period is not in it.

Needs the binaries from `make controlplane-bins`.
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from devcluster import Cluster, Layout, failover, fleet, kwok  # noqa: E402
from devcluster.api import AdminApi, wait_for  # noqa: E402
from measure import percentile, write_json  # noqa: E402
from devcluster.cluster import configure_logging  # noqa: E402

HEALTHY = 3
MOVED = "statefulset_bound_elsewhere"
CROWD_LABEL = "bench.nodewarden.io/crowd"
CROWD_TAINT = {"key": CROWD_LABEL, "value": "true", "effect": "NoSchedule"}


def _crowd(api: AdminApi, count: int) -> None:
    """``count`` realistic Nodes for kwok to keep Ready, no pod scheduled on them; returns once all are Ready."""
    import scale  # the same Nodes as the scale runs

    def one(name: str) -> None:
        body = scale.node_body(name)
        body["metadata"]["labels"][CROWD_LABEL] = "true"
        body["spec"]["taints"] = [*body["spec"].get("taints", []), CROWD_TAINT]
        api.create(scale.NODES, body)
    scale.each(one, [f"crowd-{i:05d}" for i in range(count)])
    wait_for(lambda: scale.not_ready_nodes(api) == 0, f"{count} crowd Nodes Ready", timeout=max(300, count / 5),
             interval=5)


def _namespace(api: AdminApi) -> str:
    name = f"bench-{uuid.uuid4().hex[:6]}"
    api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    wait_for(lambda: api.get_or_none(f"/api/v1/namespaces/{name}/serviceaccounts/default"),
             f"default ServiceAccount in {name}", timeout=60)
    return name


class BaselineWatch(threading.Thread):
    """Watches the baseline trials in the background until each moved or the window closed."""

    def __init__(self, trials: list[failover.Trial], seconds: float):
        super().__init__(name="baseline-watch", daemon=True)
        self.trials, self.seconds = trials, seconds

    def run(self) -> None:
        deadline = max(t.failed_at for t in self.trials) + self.seconds
        while time.time() < deadline and not all(MOVED in t.timings for t in self.trials):
            for trial in self.trials:
                if MOVED not in trial.timings:
                    try:
                        trial.observe()
                    except Exception as exc:  # noqa: BLE001 - a failed look is retried
                        print(f"baseline look failed: {exc}", flush=True)
            time.sleep(1.0)


def run(trials: int, baseline_trials: int, baseline_seconds: float, duration: str, jitter: float,
        crowd: int = 0) -> dict:
    layout = Layout(workdir=REPO / ".local" / "bench" / f"fencing-{os.getpid()}")
    heartbeat = kwok.heartbeat_for(crowd) if crowd else kwok.FAST
    with Cluster(layout, port_mode="dynamic", heartbeat=heartbeat) as cluster:
        api = AdminApi(cluster.kubeconfig)
        aws = fleet.Aws(cluster.aws_env())
        healthy = []
        for instance_id in fleet.launch_instances(aws, HEALTHY):
            name = f"healthy-{instance_id[-6:]}"
            failover.create_node(api, name, instance_id)
            healthy.append(name)
        namespace = _namespace(api)
        if crowd:
            _crowd(api, crowd)
            print(f"{crowd} crowd Nodes Ready", flush=True)

        baseline = [failover.Trial(api, aws, namespace, healthy, fenced=False, zone=f"bench-zone-{i}")
                    for i in range(baseline_trials)]
        watch = None
        if baseline:
            # Failed together; watched for the whole window in the background.
            failover.run_trials(api, healthy, baseline, timeout=0, heartbeat=heartbeat)
            watch = BaselineWatch(baseline, baseline_seconds)
            watch.start()
            print(f"baseline: {len(baseline)} nodes failed; watching for {baseline_seconds:.0f}s", flush=True)

        fenced = []
        for number in range(1, trials + 1):
            trial = failover.Trial(api, aws, namespace, healthy, fenced=True, duration=duration,
                                   shared_labels={CROWD_LABEL: "true"} if crowd else None)
            # Uniform over pod GC's 20 s period, so its phase is sampled, not fixed.
            failover.run_trials(api, healthy, [trial], timeout=180, delay=random.uniform(0, jitter),
                                heartbeat=heartbeat)
            fenced.append(trial)
            print(f"fenced trial {number}: " + ", ".join(f"{k} {v:.1f}s" for k, v in sorted(
                trial.timings.items(), key=lambda kv: kv[1])), flush=True)
            trial.cleanup()
            time.sleep(2)

        if watch:
            watch.join()
        for trial in baseline:
            print(f"baseline {trial.node}: {trial.timings or 'nothing moved'}", flush=True)
        results = {
            "kubernetes": api.get("/version")["gitVersion"],
            "policy_duration": duration,
            "crowd_nodes": crowd,
            "fenced": _summary([t.timings for t in fenced], ["instance_stopped", "out_of_service_taint",
                                                             "deployment_bound_elsewhere", "volume_attachment_gone",
                                                             "statefulset_pod_gone", MOVED]),
            "baseline": {
                "trials": len(baseline),
                "window_seconds": baseline_seconds,
                "moved": sum(1 for t in baseline if MOVED in t.timings),
                "samples": [t.timings for t in baseline],
            },
        }
        for trial in baseline:
            trial.cleanup()
        return results


def _summary(samples: list[dict], keys: list[str]) -> dict:
    out = {"trials": len(samples), "samples": samples}
    for key in keys:
        values = [s[key] for s in samples if key in s]
        if values:
            out[key] = {"p50": percentile(values, 50), "p90": percentile(values, 90), "p99": percentile(values, 99),
                        "min": min(values),
                        "max": max(values), "mean": round(statistics.mean(values), 2), "n": len(values)}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--baseline-trials", type=int, default=5)
    parser.add_argument("--baseline-seconds", type=float, default=600)
    parser.add_argument("--duration", default="30s", help="the NodeFencingPolicy's unhealthy duration")
    parser.add_argument("--jitter", type=float, default=20.0,
                        help="random delay (0..JITTER s) before each fenced failure")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--crowd", type=int, default=0, help="more Ready Nodes each fenced trial's policy selects")
    args = parser.parse_args()
    configure_logging()
    try:
        results = run(args.trials, args.baseline_trials, args.baseline_seconds, args.duration, args.jitter,
                      args.crowd)
    finally:
        shutil.rmtree(REPO / ".local" / "bench" / f"fencing-{os.getpid()}", ignore_errors=True)
    moved = results["fenced"].get(MOVED)
    base = results["baseline"]
    if moved:
        print(f"\nReady→Unknown to the StatefulSet's replacement bound elsewhere, {moved['n']} trials with "
              f"nodewarden (policy duration {results['policy_duration']}): p50 {moved['p50']:.1f}s, "
              f"p90 {moved['p90']:.1f}s, p99 {moved['p99']:.1f}s, max {moved['max']:.1f}s"
              + (f"; one node of {results['crowd_nodes'] + 1:,}" if results["crowd_nodes"] else ""))
    print(f"baseline without nodewarden: {base['moved']} of {base['trials']} StatefulSet pods moved within "
          f"{base['window_seconds']:.0f}s; Kubernetes {results['kubernetes']}")
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
