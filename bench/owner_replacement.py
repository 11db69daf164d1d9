#!/usr/bin/env python3
"""Node Ready → Unknown to its replacement requested from its owner, per owner kind.

Starts its own devcluster (docs/local-stack.md) and installs Karpenter's and
Cluster API's CRDs (devcluster/owners.py). Each round makes one Node per kind,
each selected by a NodeFencingPolicy of its own (duration --duration, action
Off, recovery OutOfServiceTaint, replacement by the owner), then kills them
together (out of kwok's selector). Each Node's clock starts when the node
lifecycle controller turned its Ready Unknown (the condition's
lastTransitionTime, which the policy's duration runs from too) and marks
when each step is first seen, looking every --poll seconds:

- fencing_request: the FencingRequest exists;
- instance_stopped: moto says the instance is stopped;
- recovered: the FencingRequest's Recovered condition is True;
- replacement: the owner's API records the request: the NodeClaim deleted
  (Karpenter's termination finalizer holds it: no Karpenter runs here), the
  instance's HealthStatus Unhealthy in its Auto Scaling group, the Cluster
  API Machine's OwnerRemediated condition False; for an unattributed node,
  the FencingRequest's OwnerReplacement condition False (Unattributed).

Goal: replacement within the policy's duration + 2 s.

    .venv/bin/python bench/owner_replacement.py [--rounds 5] [--duration 2s] [--kinds nodeclaim asg ...]
                                                [--json out.json]

Needs the binaries from `make controlplane-bins`.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from devcluster import Cluster, Layout, failover, fleet, kwok, owners  # noqa: E402
from devcluster.api import AdminApi, wait_for  # noqa: E402
from devcluster.cluster import configure_logging  # noqa: E402
from hooks import durations  # noqa: E402
from measure import percentile, write_json  # noqa: E402

KINDS = ("nodeclaim", "asg", "capi", "unattributed")
MARKS = ("fencing_request", "instance_stopped", "recovered", "replacement")
# The goal: the policy's duration plus this.
GOAL_SLACK_SECONDS = 2.0


@dataclass
class Trial:
    """One Node of one kind, failed in a round."""

    kind: str
    owned: owners.OwnedNode
    policy: str
    failed_at: float = 0.0  # epoch seconds when Ready turned Unknown
    seen: dict = field(default_factory=dict)  # step -> epoch seconds it was first seen
    marks: dict = field(default_factory=dict)  # step -> seconds after failed_at


def _make(kind: str, api: AdminApi, aws: fleet.Aws, namespace: str, name: str, labels: dict) -> owners.OwnedNode:
    if kind == "nodeclaim":
        return owners.nodeclaim_node(api, aws, name, f"{name}-pool", labels)
    if kind == "asg":
        (owned,) = owners.asg_nodes(api, aws, name, 1, labels)
        return owned
    if kind == "capi":
        return owners.capi_machine_node(api, aws, namespace, name, labels)
    return owners.unattributed_node(api, aws, name, labels)


def _requested(api: AdminApi, aws: fleet.Aws, trial: Trial, request: dict | None) -> bool:
    owned = trial.owned
    if trial.kind == "nodeclaim":
        claim = owners.nodeclaim(api, owned.owner)
        return claim is None or bool(claim["metadata"].get("deletionTimestamp"))
    if trial.kind == "asg":
        return owners.group_health(aws, owned.owner).get(owned.instance_id) == "Unhealthy"
    if trial.kind == "capi":
        machine = owners.capi_machine(api, owned.namespace, owned.owner)
        return owners.condition(machine, "OwnerRemediated").get("status") == "False"
    replacement = owners.condition(request, "OwnerReplacement")
    return replacement.get("status") == "False" and replacement.get("reason") == "Unattributed"


def _observe(api: AdminApi, aws: fleet.Aws, trial: Trial) -> None:
    """Note when each step is first seen (epoch seconds; the Node's failure time may not be known yet)."""
    def seen(name: str, now_seen: bool) -> None:
        if name not in trial.seen and now_seen:
            trial.seen[name] = time.time()

    request = api.get_or_none(f"{failover.REQUESTS}/fence-{trial.owned.node}")
    seen("fencing_request", request is not None)
    if "instance_stopped" not in trial.seen:
        seen("instance_stopped", owners.instance_state(aws, trial.owned.instance_id) in ("stopped", "terminated"))
    seen("recovered", owners.condition(request, "Recovered").get("status") == "True")
    if "replacement" not in trial.seen:
        seen("replacement", _requested(api, aws, trial, request))


def _round(api: AdminApi, aws: fleet.Aws, namespace: str, kinds: list[str], duration: str, timeout: float,
           poll: float) -> list[Trial]:
    suffix = uuid.uuid4().hex[:6]
    trials = []
    try:
        for kind in kinds:
            name = f"bench-{kind[:4]}-{suffix}"
            owned = _make(kind, api, aws, namespace, name, {failover.SCENARIO_LABEL: name})
            trials.append(Trial(kind, owned, name))
        owners.wait_ready(api, [t.owned for t in trials])
        # Each policy once its Node is Ready (as failover.Trial does): a Node slow to come up would sit Unknown.
        for trial in trials:
            api.create(failover.POLICIES, owners.policy(trial.policy, trial.policy, duration=duration,
                                                        replacement={"mode": "Owner"}))
        # The Nodes die together; each turns Unknown on its own, and is watched from the start.
        failed: dict[str, float] = {}
        killer = threading.Thread(target=lambda: failed.update(failover.kill(api, [t.owned.node for t in trials])),
                                  name="kill", daemon=True)
        killer.start()
        deadline = time.time() + kwok.FAST.grace_seconds + kwok.FAST.monitor_period_seconds + 60 + timeout
        while time.time() < deadline and not (failed and all("replacement" in t.seen for t in trials)):
            for trial in trials:
                if "replacement" not in trial.seen:
                    _observe(api, aws, trial)
            time.sleep(poll)
        killer.join(timeout=max(0.0, deadline - time.time()))
        for trial in trials:
            trial.failed_at = failed.get(trial.owned.node, 0.0)
            if trial.failed_at:
                trial.marks = {k: round(at - trial.failed_at, 2) for k, at in trial.seen.items()}
        return trials
    finally:
        for trial in trials:
            api.delete(f"{failover.POLICIES}/{trial.policy}")
            owners.delete(api, aws, trial.owned)


def _summary(values: list[float]) -> dict:
    return {"p50": percentile(values, 50), "p90": percentile(values, 90), "p99": percentile(values, 99),
            "min": min(values), "max": max(values), "mean": round(statistics.mean(values), 2), "n": len(values)}


def run(rounds: int, duration: str, kinds: list[str], timeout: float, poll: float) -> dict:
    layout = Layout(workdir=REPO / ".local" / "bench" / f"owners-{os.getpid()}")
    with Cluster(layout, port_mode="dynamic") as cluster:
        api = AdminApi(cluster.kubeconfig)
        aws = fleet.Aws(cluster.aws_env())
        owners.install_crds(cluster)
        namespace = f"bench-owners-{uuid.uuid4().hex[:6]}"
        api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        wait_for(lambda: api.get_or_none(f"/api/v1/namespaces/{namespace}"), f"namespace {namespace}")
        samples: dict[str, list[dict]] = {kind: [] for kind in kinds}
        for number in range(1, rounds + 1):
            for trial in _round(api, aws, namespace, kinds, duration, timeout, poll):
                samples[trial.kind].append(trial.marks)
                print(f"round {number} {trial.kind}: " + ", ".join(
                    f"{k} {v:.1f}s" for k, v in sorted(trial.marks.items(), key=lambda kv: kv[1])), flush=True)
        owners.remove_crds(cluster)
        return {
            "kubernetes": api.get("/version")["gitVersion"],
            "policy_duration": duration,
            "goal_seconds": durations.parse(duration) + GOAL_SLACK_SECONDS,
            "kinds": {kind: {"samples": marks, **{key: _summary([m[key] for m in marks if key in m])
                                                   for key in MARKS if any(key in m for m in marks)}}
                      for kind, marks in samples.items()},
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5, help="Nodes failed per kind (one per round)")
    parser.add_argument("--duration", default="2s", help="the NodeFencingPolicy's unhealthy duration")
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds a round waits, beyond the Nodes' turning Unknown, before it gives up")
    parser.add_argument("--poll", type=float, default=0.2, help="seconds between looks")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    configure_logging()
    try:
        results = run(args.rounds, args.duration, args.kinds, args.timeout, args.poll)
    finally:
        shutil.rmtree(REPO / ".local" / "bench" / f"owners-{os.getpid()}", ignore_errors=True)
    goal = results["goal_seconds"]
    print(f"\nReady→Unknown to the replacement requested from the owner (policy duration "
          f"{results['policy_duration']}, goal {goal:.1f}s; Kubernetes {results['kubernetes']}):")
    met = True
    for kind, result in results["kinds"].items():
        done = result.get("replacement")
        missing = len(result["samples"]) - (done["n"] if done else 0)
        if not done:
            print(f"  {kind}: never in {len(result['samples'])} trials")
            met = False
            continue
        print(f"  {kind}: p50 {done['p50']:.1f}s, p90 {done['p90']:.1f}s, max {done['max']:.1f}s, "
              f"{done['n']} trials" + (f", {missing} never" if missing else ""))
        met = met and not missing and done["max"] <= goal
    print(f"goal (every trial within {goal:.1f}s): {'met' if met else 'not met'}")
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
