"""Machines: launches that never leak or duplicate an instance, and what a lifetime costs.

    .venv/bin/python bench/machines.py [--launches 100] [--seed 7] [--latency 0.0] [--json out.json]

moto runs in server mode as its own process. Each Machine goes through its
whole life through the real hooks (``serve``), with Metacontroller and the
kubelet played by worlds/machines.py: launch, the Node registers (at
once: the boot is not timed), Initialized, deleted, drained, terminated,
finalized. The Kubernetes API is worlds/fake_kube.FakeKube.

1. Crash safety: ``--launches`` Machines, each with the hook process killed
   right after one AWS call chosen at random over its whole life (the
   response is lost, nothing of that call recorded; then Metacontroller calls
   again). Counted afterwards in moto: instances duplicated (more than one
   ever launched for a Machine) and leaked (still running after the Machine
   was finalized). Goal: 0 and 0.
2. AWS calls per Machine lifetime, by operation, with no crash.
3. Hook-side time from Machine creation to Initialized: the time spent inside
   the hook calls (not the boot, not Metacontroller's queue), and the number
   of calls.

Prints a Markdown table for docs/performance.md.
"""
from __future__ import annotations

import argparse
import collections
import datetime as dt
import pathlib
import random
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import boto3  # noqa: E402

from worlds import machines as mw  # noqa: E402
from cluster_gc import Latency, start_moto  # noqa: E402
from hooks import runtime  # noqa: E402
from hooks.aws import instances  # noqa: E402
from hooks.config import load_settings  # noqa: E402
from hooks.machines import names  # noqa: E402
from worlds.cluster_gc import Calls  # noqa: E402
from measure import percentile, write_json  # noqa: E402


def make_ctx_factory(endpoint: str):
    env = {"AWS_ENDPOINT_URL": endpoint, "AWS_REGION": mw.REGION, "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "NODEWARDEN_CLUSTER_NAME": "bench",
           "NODEWARDEN_UNSCHEDULABLE_TAINT_WAIT_SECONDS": "0"}

    def build(extra: dict | None = None, now=None, kube=None) -> runtime.Context:
        import os

        os.environ.update({k: v for k, v in env.items() if k.startswith("AWS_")})
        ctx = runtime.Context(load_settings({**env, **(extra or {})}), events_inline=True)
        if kube is not None:
            ctx._kube = kube
        return ctx

    return build


def aws_factory(endpoint: str):
    clients = {}

    def client(service: str, region: str = mw.REGION):
        if (service, region) not in clients:
            clients[(service, region)] = boto3.client(service, region_name=region, endpoint_url=endpoint,
                                                      aws_access_key_id="testing", aws_secret_access_key="testing")
        return clients[(service, region)]

    return client


class Timed:
    """Wraps a world's calls: time inside the hook, and how many calls."""

    def __init__(self, world: mw.MachineWorld):
        self.world, self.seconds, self.calls = world, 0.0, 0

    def call(self, after: float = 1.0):
        started = time.perf_counter()
        response = self.world.call(after=after)
        self.seconds += time.perf_counter() - started
        self.calls += 1
        return response


def lifetime(world: mw.MachineWorld, *, timed: Timed | None = None, max_calls: int = 200) -> dict:
    """Drive one Machine from creation to finalized; returns what was measured."""
    call = timed.call if timed else (lambda after=1.0: world.call(after=after))
    booted, initialized_after = False, None
    response: dict | None = None
    for _ in range(max_calls):
        if world.gone:
            break
        if world.machine["metadata"].get("deletionTimestamp"):
            # Nothing else changes while it goes: Metacontroller calls again when the hook asked it to.
            response = call(after=max(1.0, float((response or {}).get("resyncAfterSeconds") or 1.0)))
            continue
        call(after=0.5)
        status = world.status
        if status.get("instanceID") and not booted:
            mw.boot(world.ec2, status["instanceID"], world.kube, node_name=f"node-{world.name}")
            booted = True
        if world.condition(names.REGISTERED) == "True":
            node = world.kube.nodes.get(f"node-{world.name}")
            if node:  # the startup taint's owner (an agent) is ready: it removes its taint
                node["spec"]["taints"] = [t for t in node["spec"]["taints"] if t["key"] != "example.com/agent-not-ready"]
        if world.condition(names.INITIALIZED) == "True":
            if initialized_after is None and timed is not None:
                initialized_after = (timed.seconds, timed.calls)
            world.delete()
    else:
        raise RuntimeError(f"{world.name} did not finish in {max_calls} calls: {world.status}")
    return {"initialized": initialized_after}


def crash_safety(endpoint: str, launches: int, seed: int, latency: float) -> dict:
    rng = random.Random(seed)
    aws = aws_factory(endpoint)
    make_ctx = make_ctx_factory(endpoint)
    # How many AWS calls a whole life makes: the range the crash is drawn from.
    instances.TYPES.clear()
    probe = mw.MachineWorld(make_ctx, aws, name="probe", uid="uid-probe")
    counting = mw.CrashAfter(0).attach(probe.ctx.aws)
    lifetime(probe)
    counting.detach(probe.ctx.aws)
    span = counting.seen
    duplicated = leaked = 0
    crashed_in = collections.Counter()
    for n in range(launches):
        instances.TYPES.clear()
        world = mw.MachineWorld(make_ctx, aws, name=f"m-{n}", uid=f"uid-m-{n}", kube=probe.kube)
        if latency:
            Latency(latency).attach(world.ctx.aws)
        crash = mw.CrashAfter(rng.randint(1, span)).attach(world.ctx.aws)
        lifetime(world)
        crash.detach(world.ctx.aws)
        if crash.seen >= crash.n:
            crashed_in[crash.operations[crash.n - 1]] += 1
        ever = mw.machine_instances(world.ec2, world.uid, live_only=False)
        duplicated += max(0, len(ever) - 1)
        leaked += len(mw.machine_instances(world.ec2, world.uid))
    return {"launches": launches, "awsCallsPerLife": span, "duplicated": duplicated, "leaked": leaked,
            "crashedAfter": dict(crashed_in)}


def costs(endpoint: str, samples: int, latency: float) -> dict:
    aws = aws_factory(endpoint)
    make_ctx = make_ctx_factory(endpoint)
    per_life: list[collections.Counter] = []
    hook_seconds, hook_calls = [], []
    for n in range(samples):
        instances.TYPES.clear()
        world = mw.MachineWorld(make_ctx, aws, name=f"c-{n}", uid=f"uid-c-{n}")
        if latency:
            Latency(latency).attach(world.ctx.aws)
        calls = Calls().attach(world.ctx.aws, services=("ec2",))
        timed = Timed(world)
        measured = lifetime(world, timed=timed)
        per_life.append(calls.by_operation)
        seconds, count = measured["initialized"]
        hook_seconds.append(seconds)
        hook_calls.append(count)
    operations = sorted({op for c in per_life for op in c})
    return {
        "samples": samples,
        "awsCallsPerLifetime": {op: sum(c[op] for c in per_life) / samples for op in operations},
        "awsCallsTotal": sum(sum(c.values()) for c in per_life) / samples,
        "hookSecondsToInitialized": {"p50": percentile(hook_seconds, 50), "p99": percentile(hook_seconds, 99)},
        "hookCallsToInitialized": {"p50": percentile(hook_calls, 50), "max": max(hook_calls)},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=100)
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added to every AWS call")
    parser.add_argument("--json", type=pathlib.Path)
    args = parser.parse_args()
    proc, endpoint = start_moto()
    try:
        safety = crash_safety(endpoint, args.launches, args.seed, args.latency)
        cost = costs(endpoint, args.samples, args.latency)
    finally:
        proc.kill()
    results = {"date": dt.date.today().isoformat(), "latency": args.latency, "crashSafety": safety, "costs": cost}
    write_json(args.json, results)
    print(f"| launches with a crash after a random AWS call | {safety['launches']} "
          f"(over the {safety['awsCallsPerLife']} AWS calls of a life) |")
    print(f"| instances duplicated / leaked | {safety['duplicated']} / {safety['leaked']} |")
    ops = ", ".join(f"{op} {n:g}" for op, n in cost["awsCallsPerLifetime"].items())
    print(f"| AWS calls per Machine lifetime | {cost['awsCallsTotal']:g} ({ops}) |")
    print(f"| hook time, creation to Initialized (boot excluded) | p50 {cost['hookSecondsToInitialized']['p50'] * 1000:.0f} ms, "
          f"p99 {cost['hookSecondsToInitialized']['p99'] * 1000:.0f} ms over "
          f"{cost['hookCallsToInitialized']['p50']} hook calls |")
    print(f"crashes by the AWS call they followed: {safety['crashedAfter']}")
    return 0 if safety["duplicated"] == 0 and safety["leaked"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
