#!/usr/bin/env python3
"""Disruption: how many Machines go at once under a budget in a storm, and how long a replacement takes.

``storm`` (nothing but the venv): the nodepool hook, called through the
dispatcher as Metacontroller calls it, against worlds/fake_kube.FakeKube as
the API server, on a simulated clock. A pool of --machines Initialized
Machines; at tick 1 a storm: --drifted of them drift, --fenced are fenced by
our FencingRequests (recovered --recover-ticks later), --spot get a spot
interruption warning and delete themselves. Each tick the pool is synced
once, its answer applied as Metacontroller would (children created, the ones
left out deleted), new Machines initialize after --init-ticks and deleted ones
are gone after --drain-ticks. Every tick counts the Machines the pool is
disrupting of its own choice (deleting, or recorded and waiting for their
replacement) against the budget, and the run ends when every storm Machine is
replaced. The budget must never be exceeded: the result says by how much it
was at worst (0), and how many ticks the storm took.

``signal`` (the local stack, `make controlplane-bins`): a NodePool of
--machines Machines on the real control plane. Repair trials: a NodeFencingPolicy
(--duration) selects the pool's Nodes, one Node dies (out of kwok's
selector), and the times from its Ready turning Unknown to the power-off
confirmed (FencingSucceeded) and to the replacement Machine Initialized are
taken. Spot trials: a spot pool and an InterruptionQueue in moto; a spot
interruption warning is put on EventBridge, and the times to the Node
cordoned, the replacement Initialized and the instance terminated are taken.

``faults`` (the local stack): every AWS call refused for --fault-seconds in
the middle of a scale-out and a fencing storm. A NodePool of --machines
Initialized Machines under a NodeFencingPolicy; --fenced of its Nodes die;
once their Ready is Unknown the pool is raised by --scale-out and, a moment
later, every call to every AWS service is throttled (--kind throttle), fails
with a 500 (error) or answers only after --delay seconds, past the hooks'
read timeout, having been done all the same (slow). Once the faults are lifted
the run waits, with a deadline, for the pool to be whole again. It then
checks what a fault must never cause: an instance stopped or terminated that
was neither fenced nor its Machine's to end, a Machine with no instance or
two, an instance of the pool no Machine owns, a FencingRequest for a healthy
Node or two for one, a hook answered with a 5xx or after Metacontroller's
10 s timeout.

    .venv/bin/python bench/disruption.py storm [--machines 100] [--budget 10%] [--json out.json]
    .venv/bin/python bench/disruption.py signal [--repair-trials 3] [--spot-trials 3] [--json out.json]
    .venv/bin/python bench/disruption.py faults [--kind throttle|error|slow] [--fault-seconds 60] [--json out.json]
"""
from __future__ import annotations

import argparse
from collections import Counter
import copy
import datetime as dt
import json
import os
import pathlib
import shutil
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from measure import HookMetrics, percentile, write_json  # noqa: E402

T0 = dt.datetime(2026, 11, 23, 12, 0, tzinfo=dt.timezone.utc)
NS = "nodewarden-system"


# --------------------------------------------------------------------------- storm (in process)


def _fmt(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class StormWorld:
    """The pool, its Machines and FencingRequests as the API server has them; Metacontroller's part played."""

    def __init__(self, machines: int, budget: str, init_ticks: int, drain_ticks: int, recover_ticks: int,
                 tick_seconds: float):
        from worlds.fake_kube import FakeKube
        from hooks import runtime
        from hooks.config import load_settings
        from hooks import machine_names

        self.names = names
        self.tick_seconds, self.init_ticks, self.drain_ticks = tick_seconds, init_ticks, drain_ticks
        self.recover_ticks = recover_ticks
        self.tick = 0
        self.pool = {"apiVersion": machine_names.API_VERSION, "kind": machine_names.NODEPOOL_KIND,
                     "metadata": {"name": "storm", "uid": "uid-pool", "generation": 1, "creationTimestamp": _fmt(T0)},
                     "spec": {"replicas": machines, "disruption": {"budgets": [{"nodes": budget}]},
                              "template": {"spec": {"instanceTypes": ["m5.large"], "subnets": ["subnet-1"],
                                                    "imageId": "ami-1"}}}}
        from hooks.machines import spec
        self.template_hash = spec.pool(self.pool).template_hash
        self.kube = FakeKube([self.pool])
        self.born: dict[str, int] = {}
        self.deleted: dict[str, int] = {}
        self.fenced_at: dict[str, int] = {}
        self.serial = 0
        for _ in range(machines):
            self._create(f"storm-{self.serial:04d}", initialized=True)
        self.ctx = runtime.Context(load_settings({"NODEWARDEN_CLUSTER_NAME": ""}), events_inline=True)
        self.ctx._kube = self.kube
        self.ctx.clock = self.now

    def now(self) -> dt.datetime:
        return T0 + dt.timedelta(seconds=self.tick * self.tick_seconds)

    def machines(self) -> list[dict]:
        return [o for (kind, _, _), o in self.kube.objects.items() if kind == self.names.MACHINE_KIND]

    def _create(self, name: str, initialized: bool = False, annotations: dict | None = None) -> None:
        self.serial += 1
        obj = {"apiVersion": self.names.API_VERSION, "kind": self.names.MACHINE_KIND,
               "metadata": {"name": name, "uid": f"uid-{name}", "creationTimestamp": _fmt(self.now()),
                            "labels": {self.names.POOL_LABEL: "storm"},
                            "annotations": {self.names.TEMPLATE_HASH: self.template_hash, **(annotations or {})},
                            "ownerReferences": [{"apiVersion": self.names.API_VERSION, "kind": "NodePool",
                                                 "name": "storm", "uid": "uid-pool", "controller": True}]},
               "spec": copy.deepcopy(self.pool["spec"]["template"]["spec"]), "status": {"conditions": []}}
        self.kube.add_object(obj)
        self.born[name] = self.tick - (self.init_ticks if initialized else 0)
        self._settle(obj)

    def _settle(self, obj: dict) -> None:
        """A Machine initializes once its launch and registration took init_ticks."""
        name = obj["metadata"]["name"]
        if self.tick - self.born[name] >= self.init_ticks and not obj["status"].get("nodeName"):
            obj["status"].update(nodeName=f"node-{name}", nodeUID=f"nuid-{name}", instanceID=f"i-{name}")
            obj["status"]["conditions"].append({"type": self.names.INITIALIZED, "status": "True",
                                                "lastTransitionTime": _fmt(self.now())})

    def storm(self, drifted: int, fenced: int, spot: int) -> set[str]:
        from hooks.machines import signals

        live = sorted(self.machines(), key=lambda m: m["metadata"]["name"])
        hit = set()
        for m in live[:drifted]:
            m["metadata"]["annotations"][self.names.TEMPLATE_HASH] = "an-older-template"
            m["status"]["conditions"].append({"type": self.names.DRIFTED, "status": "True",
                                              "lastTransitionTime": _fmt(self.now())})
            hit.add(m["metadata"]["name"])
        for m in live[drifted:drifted + fenced]:
            name = m["metadata"]["name"]
            self.kube.add_object({
                "apiVersion": self.names.API_VERSION, "kind": "FencingRequest",
                "metadata": {"name": f"fr-{name}", "namespace": NS, "uid": f"fr-{name}"},
                "spec": {"nodeRef": {"name": f"node-{name}"}, "action": "Off"},
                "status": {"phase": "Recovering", "providerStatus": {"instanceID": f"i-{name}", "nodeUID": f"nuid-{name}"},
                           "conditions": [{"type": "FencingSucceeded", "status": "True",
                                           "lastTransitionTime": _fmt(self.now())}]}})
            self.fenced_at[name] = self.tick
            hit.add(name)
        for m in live[drifted + fenced:drifted + fenced + spot]:
            notice = signals.Signal(signals.SPOT_INTERRUPTION, self.now(), self.now() + dt.timedelta(minutes=2))
            m["metadata"]["annotations"][signals.INTERRUPTION_ANNOTATION] = notice.encode()
            m["metadata"]["deletionTimestamp"] = _fmt(self.now())  # the Machine deletes itself
            self.deleted[m["metadata"]["name"]] = self.tick
            hit.add(m["metadata"]["name"])
        return hit

    def step(self) -> dict:
        """One tick: the world moves on, then one nodepool sync, applied as Metacontroller applies it."""
        from hooks.dispatch import serve
        from worlds.envelope import hook_request

        self.tick += 1
        for name, at in list(self.deleted.items()):
            if self.tick - at >= self.drain_ticks:
                self.kube.objects.pop((self.names.MACHINE_KIND, "", name), None)
                del self.deleted[name]
        for m in self.machines():
            self._settle(m)
        for fr in self.kube.fencing_requests:
            name = fr["metadata"]["name"][len("fr-"):]
            done = any(c["type"] == "Recovered" for c in fr["status"]["conditions"])
            if not done and self.tick - self.fenced_at[name] >= self.recover_ticks:
                fr["status"]["conditions"].append({"type": "Recovered", "status": "True"})
        children = copy.deepcopy(self.machines())
        response = serve("nodepool", "sync", hook_request("nodepool", copy.deepcopy(self.pool), children=children),
                         self.ctx)
        self.pool["status"] = response["status"]
        self.kube.add_object(self.pool)
        wanted = {c["metadata"]["name"] for c in response["children"]}
        for m in self.machines():
            name = m["metadata"]["name"]
            if name not in wanted and not m["metadata"].get("deletionTimestamp"):
                m["metadata"]["deletionTimestamp"] = _fmt(self.now())
                self.deleted[name] = self.tick
        for child in response["children"]:
            if (self.names.MACHINE_KIND, "", child["metadata"]["name"]) not in self.kube.objects:
                self._create(child["metadata"]["name"], annotations=child["metadata"].get("annotations"))
        return response["status"]


def storm(args) -> dict:
    from hooks.machines import budgets, signals

    world = StormWorld(args.machines, args.budget, args.init_ticks, args.drain_ticks, args.recover_ticks,
                       args.tick_seconds)
    world.step()
    hit = world.storm(args.drifted, args.fenced, args.spot)
    rules = budgets.parse(world.pool)
    worst_over, most, ticks = 0, 0, 0
    started = time.perf_counter()
    while ticks < args.max_ticks:
        status = world.step()
        ticks += 1
        machines = world.machines()
        forced = sum(1 for m in machines if m["metadata"].get("deletionTimestamp")
                     and (signals.of(m, signals.INTERRUPTION_ANNOTATION) or signals.Signal("x", T0)).forceful)
        chosen = status["disruption"]["disrupting"] - forced
        # The yardstick is the pool's size as asked for, whatever the hook counts.
        limit = budgets.allowed(rules, signals.DRIFTED, args.machines, world.now())
        most = max(most, chosen)
        worst_over = max(worst_over, chosen - (limit if limit is not None else chosen))
        left = hit & {m["metadata"]["name"] for m in machines}
        ready = sum(1 for m in machines if not m["metadata"].get("deletionTimestamp")
                    and any(c["type"] == "Initialized" and c["status"] == "True" for c in m["status"]["conditions"]))
        if not left and ready == args.machines and not status.get("disruptions"):
            break
    return {"machines": args.machines, "budget": args.budget, "drifted": args.drifted, "fenced": args.fenced,
            "spot": args.spot, "init_ticks": args.init_ticks, "drain_ticks": args.drain_ticks,
            "most_disrupting_by_choice": most, "budget_limit_at_full_size": rules[0].limit(args.machines),
            "worst_over_budget": worst_over, "ticks_to_replace_all": ticks,
            "simulated_minutes": round(ticks * args.tick_seconds / 60, 1),
            "hook_seconds_per_sync": round((time.perf_counter() - started) / max(1, ticks), 4)}


# --------------------------------------------------------------------------- signal (the local stack)


def signal(args) -> dict:
    from devcluster import Cluster, Layout, failover, fleet, interruptions
    from devcluster.api import AdminApi, wait_for
    from hooks import fencing_names
    from hooks import machine_names
    from devcluster.pools import (POOLS, condition_status, initialized_machines, live_machines, pool_instances,
                                  pool_machines, pool_manifest, pool_subnet)
    from worlds import ec2_events as ev

    layout = Layout(workdir=ROOT / ".local" / "bench" / f"disruption-{os.getpid()}")
    repair, spot = [], []
    with Cluster(layout, port_mode="dynamic") as cluster:
        api = AdminApi(cluster.kubeconfig)
        cloud = fleet.Aws(cluster.aws_env())
        subnet = pool_subnet(cloud)

        def watch(pool: str, originals: set, until: float, marks: dict, extra=None) -> None:
            while time.time() < until and "replacement_initialized" not in marks:
                new = [m for m in live_machines(pool_machines(api, pool)) if m["metadata"]["name"] not in originals]
                if new and any(condition_status(m, machine_names.INITIALIZED) == "True" for m in new):
                    marks["replacement_initialized"] = time.time()
                if extra:
                    extra(marks)
                time.sleep(0.1)

        for number in range(args.repair_trials):
            pool = f"bench-repair-{number}"
            api.create(POOLS, pool_manifest(pool, subnet, args.machines))
            machines = initialized_machines(api, pool, args.machines)
            policy = f"bench-repair-{number}"
            api.create(failover.POLICIES, failover.policy_manifest(policy, "", duration=args.duration, max_unhealthy=1,
                                                                   selector={"e2e-pool": pool}))
            node = machines[0]["status"]["nodeName"]
            unknown = failover.kill(api, [node])[node]
            marks: dict = {}

            def fenced(marks, node=node):
                if "fenced" in marks:
                    return
                for fr in api.get(f"/apis/nodewarden.io/v1alpha1/namespaces/{NS}/fencingrequests")["items"]:
                    if fr["spec"]["nodeRef"]["name"] == node and condition_status(fr, fencing_names.FENCING_SUCCEEDED) == "True":
                        marks["fenced"] = time.time()
            watch(pool, {m["metadata"]["name"] for m in machines}, time.time() + 180, marks, fenced)
            sample = {k: round(v - unknown, 2) for k, v in marks.items()}
            repair.append(sample)
            print(f"repair trial {number + 1}: Unknown → {sample}", flush=True)
            api.delete(f"{failover.POLICIES}/{policy}")
            api.delete(f"{POOLS}/{pool}")

        if args.spot_trials:
            queue = "bench-spot"
            url = interruptions.create_queue(cloud.sqs, cloud.events, queue)
            api.create("/apis/nodewarden.io/v1alpha1/interruptionqueues", {
                "apiVersion": machine_names.API_VERSION, "kind": "InterruptionQueue", "metadata": {"name": queue},
                "spec": {"queueURL": url}})
        for number in range(args.spot_trials):
            pool = f"bench-spot-{number}"
            api.create(POOLS, pool_manifest(pool, subnet, args.machines, template_spec={"capacityType": "spot"}))
            machines = initialized_machines(api, pool, args.machines)
            victim = machines[0]
            node, instance = victim["status"]["nodeName"], victim["status"]["instanceID"]
            sent = time.time()
            interruptions.put(cloud.events, ev.spot_warning(instance, dt.datetime.now(dt.timezone.utc).strftime(
                "%Y-%m-%dT%H:%M:%SZ")))
            marks = {}

            def cordoned(marks, node=node, instance=instance, pool=pool):
                if "cordoned" not in marks:
                    got = api.get_or_none(f"/api/v1/nodes/{node}")
                    if got is None or got["spec"].get("unschedulable"):
                        marks["cordoned"] = time.time()
                if "terminated" not in marks and pool_instances(cloud, pool).get(instance) == "terminated":
                    marks["terminated"] = time.time()
            watch(pool, {m["metadata"]["name"] for m in machines}, time.time() + 180, marks, cordoned)
            wait_for(lambda: pool_instances(cloud, pool).get(instance) == "terminated" or None, "terminated",
                     timeout=180)
            marks.setdefault("terminated", time.time())
            sample = {k: round(v - sent, 2) for k, v in marks.items()}
            spot.append(sample)
            print(f"spot trial {number + 1}: warning sent → {sample}", flush=True)
            api.delete(f"{POOLS}/{pool}")
    return {"machines_per_pool": args.machines, "policy_duration": args.duration,
            "repair": _summary(repair), "spot": _summary(spot)}


# --------------------------------------------------------------------------- faults (the local stack)


def _hook_calls_gone_wrong(metrics: HookMetrics) -> tuple[Counter, Counter]:
    """Per controller and hook, from the hook server's /metrics (every worker added up): the calls answered
    with a 5xx, and those that took longer than Metacontroller's 10 s hook timeout (answered too late)."""
    errors, every, in_time = Counter(), Counter(), Counter()
    for sample in metrics.samples():
        hook = f"{sample.labels.get('controller')}/{sample.labels.get('hook')}"
        if sample.name == "nodewarden_hook_duration_seconds_count":
            every[hook] += sample.value
            if sample.labels.get("code", "").startswith("5"):
                errors[hook] += sample.value
        elif sample.name == "nodewarden_hook_duration_seconds_bucket" and float(sample.labels["le"]) == 10.0:
            in_time[hook] += sample.value
    return errors, every - in_time


def _fault(kind: str, seconds: float, delay: float) -> dict:
    fault = {"service": "*", "kind": kind, "seconds": seconds}
    if kind == "slow":
        fault["delay"] = delay
    return fault


class FencingWatch:
    """Every FencingRequest seen while the run lasts, read every half second on a thread of its own: a request
    ends with its Node, so looking at the end would miss it. Node -> the uids of its requests, and the nodes
    whose power-off was seen confirmed (FencingSucceeded)."""

    def __init__(self, api):
        import threading

        self._api = api
        self.requests: dict[str, set[str]] = {}
        self.succeeded: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="fencing-watch", daemon=True)

    def _loop(self) -> None:
        from devcluster import failover
        from devcluster.pools import condition_status
        from hooks import fencing_names

        while not self._stop.wait(0.5):
            try:
                found = self._api.get(failover.REQUESTS)["items"]
            except Exception:  # the API server busy for a moment: the next read sees it
                continue
            for request in found:
                node = request["spec"]["nodeRef"]["name"]
                self.requests.setdefault(node, set()).add(request["metadata"]["uid"])
                if condition_status(request, fencing_names.FENCING_SUCCEEDED) == "True":
                    self.succeeded.add(node)

    def __enter__(self) -> "FencingWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def _describe_machines(machines: list[dict]) -> None:
    for m in machines:
        status = m.get("status") or {}
        print("  Machine", m["metadata"]["name"], status.get("nodeName"), m["metadata"].get("deletionTimestamp"),
              [(c["type"], c["status"], c.get("reason")) for c in status.get("conditions", [])], flush=True)


def faults(args) -> dict:
    from devcluster import Cluster, Layout, failover, fleet
    from devcluster.api import AdminApi, wait_for
    from hooks import machine_names
    from devcluster.pools import (POOLS, condition_status, initialized_machines, live_machines, pool_instance_tags,
                                  pool_machines, pool_manifest, pool_subnet)

    layout = Layout(workdir=ROOT / ".local" / "bench" / f"disruption-{os.getpid()}")
    pool, size = "bench-faults", args.machines + args.scale_out
    with Cluster(layout, port_mode="dynamic") as cluster:
        api = AdminApi(cluster.kubeconfig)
        cloud = fleet.Aws(cluster.aws_env())
        control = cluster.throttling_control
        api.create(POOLS, pool_manifest(pool, pool_subnet(cloud), args.machines))
        originals = initialized_machines(api, pool, args.machines)
        api.create(failover.POLICIES, failover.policy_manifest(pool, "", duration=args.duration,
                                                               max_unhealthy=args.fenced, selector={"e2e-pool": pool}))
        dying = {m["status"]["nodeName"]: m["status"]["instanceID"] for m in originals[:args.fenced]}
        healthy = {m["status"]["nodeName"]: m["status"]["instanceID"] for m in originals[args.fenced:]}
        metrics = HookMetrics(cluster)
        errors_before, late_before = _hook_calls_gone_wrong(metrics)

        def whole():
            machines = pool_machines(api, pool)
            live = live_machines(machines)
            ready = [m for m in live if condition_status(m, machine_names.INITIALIZED) == "True"]
            left = [m for m in machines if (m.get("status") or {}).get("nodeName") in dying]
            return (len(ready) == len(live) == size and not left) or None

        with FencingWatch(api) as fencing:
            started = time.time()
            failover.kill(api, list(dying))
            api.patch(f"{POOLS}/{pool}", {"spec": {"replicas": size}})
            time.sleep(args.fault_after)
            control.add_fault(**_fault(args.kind, args.fault_seconds, args.delay))
            fault_began = time.time()
            print(f"faults ({args.kind}) on every AWS call for {args.fault_seconds} s, "
                  f"{fault_began - started:.1f} s into the storm", flush=True)
            # A spent fault leaves the control API's report, so its count is read a moment before it ends.
            time.sleep(max(0.0, args.fault_seconds - 1))
            refused = sum(fault["matched"] for fault in control.state()["faults"])
            time.sleep(max(0.0, fault_began + args.fault_seconds - time.time()))
            fault_ended = time.time()
            converged = True
            try:
                wait_for(whole, "the pool whole again", timeout=args.deadline)
            except AssertionError as error:  # wait_for's timeout; the findings below say what is missing
                print(f"not converged: {error}", flush=True)
                _describe_machines(pool_machines(api, pool))
                converged = False
            whole_at = time.time()

        live = live_machines(pool_machines(api, pool))
        instances = pool_instance_tags(cloud, pool)
        unended = {i: tags for i, tags in instances.items() if tags["state"] not in ("shutting-down", "terminated")}
        findings = []
        for node, instance in healthy.items():
            state = instances.get(instance, {}).get("state")
            if state != "running":
                findings.append(f"healthy node {node}'s instance {instance} is {state}")
        for machine in live:
            own = [i for i, tags in unended.items()
                   if tags.get(machine_names.TAG_MACHINE_UID) == machine["metadata"]["uid"]]
            if len(own) != 1:
                findings.append(f"Machine {machine['metadata']['name']} has {len(own)} instances: {own}")
        owned = {m["metadata"]["uid"] for m in live}
        for instance, tags in unended.items():
            if tags.get(machine_names.TAG_MACHINE_UID) not in owned:
                findings.append(f"instance {instance} ({tags['state']}) belongs to no Machine")
        for node, uids in fencing.requests.items():
            if node not in dying:
                findings.append(f"healthy node {node} was fenced")
            elif len(uids) > 1:
                findings.append(f"node {node} had {len(uids)} FencingRequests")
        for node in set(dying) - fencing.succeeded:
            findings.append(f"dead node {node}'s power-off was never confirmed")
        errors, late = _hook_calls_gone_wrong(metrics)
        if errors - errors_before:
            findings.append(f"hook calls answered with a 5xx: {dict(errors - errors_before)}")
        if late - late_before:
            findings.append(f"hook calls longer than Metacontroller's 10 s timeout: {dict(late - late_before)}")
        api.delete(f"{failover.POLICIES}/{pool}")
        api.delete(f"{POOLS}/{pool}")
    return {"kind": args.kind, "fault_seconds": args.fault_seconds, "delay": args.delay if args.kind == "slow" else None,
            "machines": args.machines, "scale_out": args.scale_out, "fenced": args.fenced,
            "faults_began_after_storm_seconds": round(fault_began - started, 1), "calls_refused": refused,
            "converged": converged, "whole_after_faults_seconds": round(whole_at - fault_ended, 1),
            "instances_launched": len(instances) - args.machines, "findings": findings}


def _summary(samples: list[dict]) -> dict:
    out: dict = {"trials": len(samples), "samples": samples}
    for key in sorted({k for s in samples for k in s}):
        values = [s[key] for s in samples if key in s]
        out[key] = {"p50": percentile(values, 50), "max": max(values), "n": len(values)}
    if samples and all("fenced" in s and "replacement_initialized" in s for s in samples):
        gaps = [s["replacement_initialized"] - s["fenced"] for s in samples]
        out["initialized_after_fenced"] = {"p50": round(percentile(gaps, 50), 2), "max": round(max(gaps), 2),
                                           "n": len(gaps)}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("storm")
    s.add_argument("--machines", type=int, default=100)
    s.add_argument("--budget", default="10%")
    s.add_argument("--drifted", type=int, default=40)
    s.add_argument("--fenced", type=int, default=10)
    s.add_argument("--spot", type=int, default=10)
    s.add_argument("--init-ticks", type=int, default=3)
    s.add_argument("--drain-ticks", type=int, default=4)
    s.add_argument("--recover-ticks", type=int, default=6)
    s.add_argument("--tick-seconds", type=float, default=10.0)
    s.add_argument("--max-ticks", type=int, default=2000)
    s.add_argument("--json", type=pathlib.Path)
    g = sub.add_parser("signal")
    g.add_argument("--machines", type=int, default=2)
    g.add_argument("--repair-trials", type=int, default=3)
    g.add_argument("--spot-trials", type=int, default=3)
    g.add_argument("--duration", default="10s", help="the NodeFencingPolicy's unhealthy duration")
    g.add_argument("--json", type=pathlib.Path)
    f = sub.add_parser("faults")
    f.add_argument("--machines", type=int, default=6)
    f.add_argument("--fenced", type=int, default=2, help="Nodes of the pool that die")
    f.add_argument("--scale-out", type=int, default=4, help="Machines the pool is raised by")
    f.add_argument("--kind", choices=("throttle", "error", "slow"), default="throttle")
    f.add_argument("--delay", type=float, default=8.0, help="seconds a slow call takes (the hooks wait 5)")
    f.add_argument("--fault-seconds", type=float, default=60.0)
    f.add_argument("--fault-after", type=float, default=3.0,
                   help="seconds from the pool's raise and the Nodes' Ready Unknown to the faults")
    f.add_argument("--duration", default="10s", help="the NodeFencingPolicy's unhealthy duration")
    f.add_argument("--deadline", type=float, default=300.0, help="seconds after the faults for the pool to be whole")
    f.add_argument("--json", type=pathlib.Path)
    args = parser.parse_args()
    if args.mode == "storm":
        import logging
        logging.disable(logging.WARNING)
        results = storm(args)
    else:
        from devcluster.cluster import configure_logging
        configure_logging()
        try:
            results = signal(args) if args.mode == "signal" else faults(args)
        finally:
            shutil.rmtree(ROOT / ".local" / "bench" / f"disruption-{os.getpid()}", ignore_errors=True)
    print(json.dumps(results, indent=2))
    write_json(args.json, results)
    if args.mode == "faults":
        return 0 if results["converged"] and not results["findings"] else 1
    return 0 if args.mode != "storm" or results["worst_over_budget"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
