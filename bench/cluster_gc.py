"""cluster-gc: AWS calls and wall time to collect a cluster's leftovers.

    .venv/bin/python bench/cluster_gc.py [--load-balancers 50] [--target-groups 50] [--security-groups 50]

moto runs in server mode as its own process (as in the local stack). The
cluster leaves N network load balancers, N target groups (each behind a
listener of one of them) and N security groups; a second cluster's
resources sit beside them (10% as many) and must survive. The finalize hook
is called the way Metacontroller calls it: again at once when the response
changed the object's annotations, else after ``resyncAfterSeconds``. AWS
calls are counted per operation with a botocore ``after-call`` hook.

Scenarios: the default (tagging API, 1 s and 50 deletes per call), the
tagging API refused (listing and tags in chunks of 20; the refusal is
injected, as AWS does it and moto does not), an unbounded budget (one call
does everything) for comparison, and the default with a delay added to every
AWS call (``--latency``, 50 ms), closer to real AWS than moto on loopback. Prints a Markdown table for
docs/performance.md.
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import pathlib
import socket
import subprocess
import sys
import time

import boto3

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from devcluster import components  # noqa: E402
from devcluster.waits import free_port  # noqa: E402
from hooks import runtime  # noqa: E402
from hooks.config import load_settings  # noqa: E402
from worlds import cluster_gc as w  # noqa: E402


def start_moto() -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(components.moto_argv(port),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("moto did not start")


class Latency:
    """Adds a fixed delay to every AWS call: real AWS answers in tens of milliseconds, moto in a few."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def attach(self, aws):
        for service in ("resourcegroupstaggingapi", "elbv2", "elb", "ec2"):
            aws.client(service, w.REGION).meta.events.register("before-send", self._delay)
        return self

    def _delay(self, **_):
        time.sleep(self.seconds)


def scenario(endpoint: str, counts: dict, env: dict, faults: w.Faults | None = None,
             latency: float = 0.0) -> dict:
    import requests

    requests.post(f"{endpoint}/moto-api/reset", timeout=10)

    def client(service: str):
        return boto3.client(service, region_name=w.REGION, endpoint_url=endpoint)

    net = w.network(client("ec2"))
    made = w.build_cluster(client, net, "a", w.cluster_tags("alpha"), **counts)
    others = {k: max(1, v // 10) for k, v in counts.items()}
    kept = w.build_cluster(client, net, "b", w.cluster_tags("beta"), **others)

    ctx = runtime.Context(load_settings({**{k: v for k, v in os.environ.items() if k.startswith("AWS_")}, **env}))
    ctx._kube = w.FakeKube()
    calls = w.Calls().attach(ctx.aws)
    if faults:
        faults.attach(ctx.aws)
    # Warm up clients and moto's backends on another cluster's (empty) collection.
    w.finalize_once(ctx, w.aws_cluster(cluster="warm-up"))
    if latency:
        Latency(latency).attach(ctx.aws)
    calls.by_operation.clear()

    parent = w.aws_cluster()
    hook_seconds, waits, responses = [], 0.0, []
    for _ in range(500):
        started = time.perf_counter()
        response = w.finalize_once(ctx, parent)
        hook_seconds.append(time.perf_counter() - started)
        responses.append(response)
        changed = w.apply_decorator_response(parent, response)["metadata"] != parent["metadata"]
        parent = w.apply_decorator_response(parent, response)
        if response.get("finalized"):
            break
        # Metacontroller: an update of the object queues it at once; else the resync.
        waits += 0 if changed else response.get("resyncAfterSeconds", 0)
    assert responses[-1].get("finalized"), f"not finalized: {responses[-3:]}"
    assert w.existing(client, made).count() == 0, "leftovers"
    assert w.existing(client, kept) == kept, "a bystander was deleted"
    return {
        "calls": len(hook_seconds),
        "aws": calls.total,
        "by_operation": dict(sorted(calls.by_operation.items())),
        "hook_total": sum(hook_seconds),
        "hook_max": max(hook_seconds),
        "wall": sum(hook_seconds) + waits,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--load-balancers", type=int, default=50)
    parser.add_argument("--target-groups", type=int, default=50)
    parser.add_argument("--security-groups", type=int, default=50)
    parser.add_argument("--latency", type=float, default=0.05, help="seconds added to each AWS call (last scenario)")
    args = parser.parse_args()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    os.environ["AWS_REGION"] = w.REGION
    counts = {"load_balancers": args.load_balancers, "target_groups": args.target_groups,
              "security_groups": args.security_groups}
    proc, endpoint = start_moto()
    os.environ["AWS_ENDPOINT_URL"] = endpoint  # boto3 reads it from the environment
    try:
        rows = [
            ("tagging API, default budget (1 s, 50 deletes per call)", scenario(endpoint, counts, {})),
            ("tagging API refused: listing + tags in chunks of 20",
             scenario(endpoint, counts, {}, w.Faults().add("GetResources", "AccessDeniedException", float("inf")))),
            ("tagging API, unbounded budget (one call)",
             scenario(endpoint, counts, {"NODEWARDEN_GC_CALL_BUDGET_SECONDS": "60",
                                         "NODEWARDEN_GC_MAX_DELETES_PER_CALL": "10000"})),
            (f"tagging API, default budget, {args.latency * 1000:.0f} ms added to every AWS call",
             scenario(endpoint, counts, {}, latency=args.latency)),
        ]
    finally:
        proc.terminate()
        proc.wait(10)
    total = sum(counts.values())
    print(f"Collecting {args.load_balancers} load balancers, {args.target_groups} target groups and "
          f"{args.security_groups} security groups ({total} resources; moto {_moto_version()}, "
          f"{dt.date.today().isoformat()}):\n")
    print("| scenario | hook calls | AWS calls | slowest call | hook time | wall time (Metacontroller resyncs) |")
    print("|---|---|---|---|---|---|")
    for name, r in rows:
        print(f"| {name} | {r['calls']} | {r['aws']} | {r['hook_max']:.2f} s | {r['hook_total']:.2f} s | "
              f"{r['wall']:.2f} s |")
    print("\nAWS calls per operation:\n")
    operations = sorted({op for _, r in rows for op in r["by_operation"]})
    print("| operation | " + " | ".join(f"scenario {i + 1}" for i in range(len(rows))) + " |")
    print("|---|" + "---|" * len(rows))
    for op in operations:
        print(f"| {op} | " + " | ".join(str(r["by_operation"].get(op, 0)) for _, r in rows) + " |")
    return 0


def _moto_version() -> str:
    from importlib.metadata import version

    return version("moto")


if __name__ == "__main__":
    sys.exit(main())
