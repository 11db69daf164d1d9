#!/usr/bin/env python3
"""AWS calls at scale: nodewarden's steady-state call rate against each of AWS's request buckets.

    .venv/bin/python bench/aws_rates.py steady [--machines 5000] [--pools 10] [--minutes 2] [--processes 4]
        [--view-seconds 10] [--queues 1] [--target-groups 20] [--classic-elbs 1] [--json out.json]

A steady cluster: --machines Machines in --pools NodePools, each Machine
Launched, Registered and Initialized, its instance running in moto with
nodewarden's tags and its Node in the Kubernetes API (worlds/fake_kube.FakeKube),
--queues InterruptionQueues (each with its SQS queue, status checks on,
the spec's defaults), and --target-groups target groups and --classic-elbs
classic ELBs tagged for the cluster, each holding one pool's instances. moto runs in server mode in this process
(ThreadedMotoServer, its routing remembered and its EC2 tags looked up by
resource id: devcluster/moto_server.py).

The real hooks answer every call, through ``hooks.dispatch.serve`` as the
HTTP server calls them, at Metacontroller's cadence on a simulated clock:
each controller's objects are synced once per its resyncPeriodSeconds
(metacontroller/*.yaml), spread evenly over the period, and again after the
``resyncAfterSeconds`` an answer asks for; the ``node`` DecoratorController
has no resyncPeriodSeconds, so each Node is synced when its last answer asked
(at most NODEWARDEN_NODE_RESYNC_SECONDS later), its first syncs spread over
that time. An InterruptionQueue's long poll takes its waitSeconds of the
clock (and of real time: moto holds it as long). Each answer is applied as
Metacontroller applies it. Each process also rebuilds node-detacher's
discovery index as its background thread does (hooks/aws/lb_discovery.py:
one pass at once, then every ``refresh_interval``, paced by the deployment's
share, ``NODEWARDEN_AWS_RATE_SHARE`` over the processes). Both of the hooks' clocks follow the simulated
time: ``ctx.clock`` and the instance view's, so NODEWARDEN_INSTANCE_VIEW_SECONDS
means what it means in a cluster.

--processes hook processes (the deployment's 2 replicas × 2 workers), each
with a Context of its own (its own instance view and limiter), take the syncs
in turn, as the Service spreads Metacontroller's calls. Every limiter takes
no token (the hooks' whole demand is sent) and counts each HTTP attempt per
bucket key with ``hooks.aws_rate_buckets.request_draws``, the table the
limiter itself uses, and per controller and operation. The clients wait for
moto as long as it takes (PatientClients), so no attempt times out and is
sent again.

Before the run, the first Machine of each pool goes through the machine hook
until it is Initialized and its status stops changing; the pool's other
Machines and Nodes are made in its image, each with its own instance, Node
name and uid; then every NodePool and InterruptionQueue is synced once. None
of that is counted. The run counts the answers that changed an object
(status, labels, annotations) and the writes the hooks made: in a steady
cluster, only the NodePools' lastLeakCheck and the queues' lastPoll and
lastStatusCheck change.

Prints, per bucket key: calls per second, the bucket's refill per second and
the share of it (goal: at most 25 % at 5,000 Machines and 5,000 Nodes); per
controller and operation: calls per sync, per minute, per Machine and per
Node per minute. A run at fewer Machines gives the per-Machine rates; the
instance view reads the cluster in pages of PAGE_SIZE instances, so a read
costs one call per started thousand.
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import datetime
import heapq
import json
import logging
import os
import pathlib
import sys
import time
from collections import Counter
from typing import Callable

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import boto3  # noqa: E402

from measure import write_json  # noqa: E402

from devcluster import kubelet  # noqa: E402
from hooks import aws_rate_buckets, conditions, machine_names, timefmt  # noqa: E402
from hooks.aws import instances, lb_discovery, rate_limits  # noqa: E402
from hooks.aws.clients import AwsClients, limiter_of  # noqa: E402
from hooks.aws.instance_view import PAGE_SIZE, ClusterInstances  # noqa: E402
from hooks.config import load_settings  # noqa: E402
from hooks.dispatch import serve  # noqa: E402
from hooks.interruption import queue  # noqa: E402
from hooks.machines import spec, userdata  # noqa: E402
from hooks.runtime import Context  # noqa: E402
from worlds.machines import IMAGE, REGION, fmt, machine_object, machine_spec  # noqa: E402
from worlds.envelope import apply_decorator_response, controller_object, hook_request  # noqa: E402
from worlds.fake_kube import FakeKube  # noqa: E402

CLUSTER = "bench"
NAMESPACE = "nodewarden-system"
GOAL_SHARE = 0.25
LAUNCH_BATCH = 250
MOTO_READ_TIMEOUT = 600.0
# moto stamps LaunchTime with the real clock, and a Machine's registrationTTL counts from it: each Machine is
# made just before its instance, its Node registers BOOT after, and the simulated clock starts once the last
# Node has registered and the cluster has settled (SteadyCluster.settle), well within the TTL.
BOOT = datetime.timedelta(seconds=60)
# A delayed resync this close to the object's periodic one is the same sync: the queue holds a key once.
SAME_SYNC_SECONDS = 1.0
# The controllers, by their names in metacontroller/*.yaml.
MACHINE, NODE, NODEPOOL, INTERRUPTION = "machine", "node", "nodepool", "interruption"
# Not a controller: each hook process's own rebuild of node-detacher's discovery index.
DISCOVERY = "node-detacher discovery"
WRITE_VERBS = ("json_patch", "merge_patch", "create", "delete", "delete_with_options")


# --------------------------------------------------------------------------- the clock and the count


class SimClock:
    """Simulated time: ``at`` seconds after ``start``, as a datetime (ctx.clock) and as monotonic seconds."""

    def __init__(self, start: datetime.datetime):
        self.start = start
        self.at = 0.0

    def now(self) -> datetime.datetime:
        return self.start + datetime.timedelta(seconds=self.at)

    def monotonic(self) -> float:
        return 1_000_000.0 + self.at


class Tally:
    """Every HTTP attempt, per bucket key and per (controller, operation); ``controller`` is the one syncing."""

    def __init__(self):
        self.controller = ""
        self.reads: Counter = Counter()  # (controller, what DescribeInstances asks for) -> attempts
        self.by_key: Counter = Counter()  # (bucket name, key) -> tokens
        self.calls_by_key: Counter = Counter()  # (bucket name, key) -> attempts
        self.by_operation: Counter = Counter()  # (controller, operation) -> attempts

    def add(self, operation: str, draws: tuple[aws_rate_buckets.Draw, ...]) -> None:
        self.by_operation[(self.controller, operation)] += 1
        for draw in draws:
            self.by_key[(draw.bucket.name, draw.key)] += draw.tokens
            self.calls_by_key[(draw.bucket.name, draw.key)] += 1

    def read_kinds(self, session: boto3.session.Session) -> None:
        """Count each DescribeInstances of ``session``'s clients by what it asks for (a filter, ids, a page)."""
        session.events.register("before-send.ec2.DescribeInstances", self._read)

    def _read(self, request=None, **_):
        form = rate_limits.wire_form(getattr(request, "body", None))
        what = "by " + form.get("Filter.1.Name", "instance id" if "InstanceId.1" in form else "nothing")
        if "NextToken" in form:
            what += ", a later page"
        self.reads[(self.controller, what)] += 1

    def clear(self) -> None:
        for counted in (self.by_key, self.calls_by_key, self.by_operation, self.reads):
            counted.clear()


class CountingLimiter(rate_limits.Limiter):
    """A process's limiter that holds nothing back (share 0) and tallies what each attempt would draw."""

    def __init__(self, tally: Tally):
        super().__init__(0.0)
        self._tally = tally

    def acquire(self, region: str, operation: str, draws: tuple[aws_rate_buckets.Draw, ...]) -> float:
        self._tally.add(operation, draws)
        return super().acquire(region, operation, draws)


class PatientClients(AwsClients):
    """The hooks' clients, waiting as long as moto takes: a page of 1,000 instances takes moto several seconds
    on a busy 2-core machine, past the hooks' 5 s read timeout (AWS answers it well within). A timed-out
    attempt would be retried and counted again, and moto would go on serializing the abandoned one."""

    def client(self, service: str, region: str | None = None, read_timeout: float | None = None):
        return super().client(service, region, read_timeout or MOTO_READ_TIMEOUT)


def resync_periods() -> dict[str, float | None]:
    """resyncPeriodSeconds of each controller as metacontroller/*.yaml sets it (None: it sets none)."""
    return {name: controller_object(name)["spec"].get("resyncPeriodSeconds")
            for name in (MACHINE, NODE, NODEPOOL, INTERRUPTION)}


def contexts(count: int, kube: FakeKube, clock: SimClock, tally: Tally, view_seconds: float) -> list[Context]:
    """``count`` hook processes' Contexts: each its own clients, limiter and view of the instances, on ``clock``."""
    made = []
    for _ in range(count):
        env = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
        env.update({"NODEWARDEN_CLUSTER_NAME": CLUSTER, "NODEWARDEN_NAMESPACE": NAMESPACE,
                    "NODEWARDEN_INSTANCE_VIEW_SECONDS": str(view_seconds)})
        ctx = Context(load_settings(env), clock=clock.now, events_inline=True, _kube=kube)
        session = boto3.session.Session()
        tally.read_kinds(session)
        ctx._aws = PatientClients(ctx.settings, session=session, limiter=CountingLimiter(tally))
        ctx._instances = ClusterInstances(_ec2_of(ctx), CLUSTER, ctx.settings.instance_view_seconds,
                                          ctx.settings.instance_read_window_seconds, clock=clock.monotonic)
        made.append(ctx)
    return made


def _ec2_of(ctx: Context) -> Callable[[str], object]:
    return lambda region: ctx.aws.client("ec2", region or None)


# --------------------------------------------------------------------------- the cluster


@dataclasses.dataclass
class Member:
    """One Machine of the cluster: its instance (as RunInstances answered it) and its Node's name."""

    machine: str
    uid: str
    pool: str
    instance: dict
    node: str


def _json_copy(value):
    """A deep copy of plain JSON, as the API server hands out (cheaper than copy.deepcopy)."""
    return json.loads(json.dumps(value))


class SteadyCluster:
    """The NodePools, Machines, Nodes and InterruptionQueues of a steady cluster, in moto and a FakeKube."""

    def __init__(self, ec2, sqs, machines: int, pools: int, queues: int, elbv2=None, elb=None,
                 target_groups: int = 0, classic_elbs: int = 0):
        self.ec2 = ec2
        self.made = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
        self.kube = FakeKube()
        self.members: dict[str, Member] = {}
        self.pools: list[str] = []
        self.queues: list[str] = []
        self.node_of: dict[str, str] = {}  # Machine name -> its Node's name
        subnets = sorted(ec2.describe_subnets(Filters=[{"Name": "default-for-az", "Values": ["true"]}])["Subnets"],
                         key=lambda s: s["AvailabilityZone"])
        sizes = [machines // pools + (1 if p < machines % pools else 0) for p in range(pools)]
        for p, size in enumerate(sizes):
            self._pool(f"pool-{p:02d}", subnets[p % len(subnets)]["SubnetId"], size)
        for q in range(queues):
            name = f"interruptions-{q}"
            url = sqs.create_queue(QueueName=name)["QueueUrl"]
            self.kube.add_object({"apiVersion": machine_names.API_VERSION, "kind": "InterruptionQueue",
                                  "metadata": {"name": name, "uid": f"uid-{name}", "generation": 1,
                                               "creationTimestamp": fmt(self.made - datetime.timedelta(days=1))},
                                  "spec": {"queueURL": url}})
            self.queues.append(name)
        if target_groups or classic_elbs:
            self._load_balancers(elbv2, elb, subnets, target_groups, classic_elbs)

    def _load_balancers(self, elbv2, elb, subnets: list[dict], target_groups: int, classic_elbs: int) -> None:
        """Target groups and classic ELBs tagged by the cloud controller, each holding one pool's instances."""
        owned = [{"Key": f"kubernetes.io/cluster/{CLUSTER}", "Value": "owned"}]
        by_pool = {pool: [m.instance["InstanceId"] for m in self.members.values() if m.pool == pool]
                   for pool in self.pools}
        for t in range(target_groups):
            arn = elbv2.create_target_group(Name=f"k8s-bench-{t:03d}", Protocol="TCP", Port=80,
                                            VpcId=subnets[0]["VpcId"], TargetType="instance",
                                            Tags=owned)["TargetGroups"][0]["TargetGroupArn"]
            members = by_pool[self.pools[t % len(self.pools)]]
            for start in range(0, len(members), LAUNCH_BATCH):
                elbv2.register_targets(TargetGroupArn=arn, Targets=[{"Id": i, "Port": 30000 + t}
                                                                    for i in members[start:start + LAUNCH_BATCH]])
        for e in range(classic_elbs):
            name = f"bench-classic-{e}"
            elb.create_load_balancer(LoadBalancerName=name, AvailabilityZones=[subnets[0]["AvailabilityZone"]],
                                     Listeners=[{"Protocol": "TCP", "LoadBalancerPort": 80, "InstancePort": 30080}],
                                     Tags=owned)
            members = by_pool[self.pools[e % len(self.pools)]]
            elb.register_instances_with_load_balancer(LoadBalancerName=name,
                                                      Instances=[{"InstanceId": i} for i in members])

    def _pool(self, name: str, subnet: str, size: int) -> None:
        template = machine_spec(subnet, instanceTypes=["m5.large"], startupTaints=[])
        pool = {"apiVersion": machine_names.API_VERSION, "kind": machine_names.NODEPOOL_KIND,
                "metadata": {"name": name, "uid": f"uid-{name}", "generation": 1,
                             "creationTimestamp": fmt(self.made - datetime.timedelta(days=1))},
                "spec": {"replicas": size, "template": {"spec": template}}}
        self.kube.add_object(pool)
        self.pools.append(name)
        template_hash = spec.pool(pool).template_hash
        launched: list[dict] = []
        while len(launched) < size:
            count = min(LAUNCH_BATCH, size - len(launched))
            launched += self.ec2.run_instances(ImageId=IMAGE, MinCount=count, MaxCount=count,
                                               InstanceType="m5.large", SubnetId=subnet)["Instances"]
        for slot, instance in enumerate(launched):
            machine, uid = f"{name}-{slot:05d}", f"uid-{name}-{slot:05d}"
            self.ec2.create_tags(Resources=[instance["InstanceId"]],
                                 Tags=machine_names.instance_tags(CLUSTER, name, machine, uid))
            created = instance["LaunchTime"].replace(microsecond=0) - datetime.timedelta(seconds=5)
            obj = machine_object(machine, uid, template, pool=name, created=created)
            obj["metadata"]["annotations"][machine_names.TEMPLATE_HASH] = template_hash
            obj["metadata"]["ownerReferences"] = [{"apiVersion": machine_names.API_VERSION,
                                                   "kind": machine_names.NODEPOOL_KIND, "name": name,
                                                   "uid": f"uid-{name}", "controller": True}]
            obj["status"] = {}
            self.kube.add_object(obj)
            node = kubelet.node_name(instance)
            self.members[machine] = Member(machine, uid, name, instance, node)
            self.node_of[machine] = node

    # -- the API server's objects -----------------------------------------------------------------
    def machine(self, name: str) -> dict:
        return self.kube.objects[(machine_names.MACHINE_KIND, "", name)]

    def pool(self, name: str) -> dict:
        return self.kube.objects[(machine_names.NODEPOOL_KIND, "", name)]

    def queue(self, name: str) -> dict:
        return self.kube.objects[("InterruptionQueue", "", name)]

    def pool_machines(self, pool: str) -> list[str]:
        return [m.machine for m in self.members.values() if m.pool == pool]

    def booted_node(self, member: Member, facts: dict) -> dict:
        """The Node the kubelet on the member's instance registers, Ready (devcluster's kubelet stand-in)."""
        flags = kubelet.parse_user_data(userdata.values(CLUSTER, member.machine, member.pool)["kubelet_args"])
        node = kubelet.node_manifest(member.instance, flags, facts, REGION)
        node["metadata"]["uid"] = f"uid-{member.node}"
        node["status"].pop("nodeInfo")  # lightkube wants a whole one; no hook reads it
        registered = fmt(member.instance["LaunchTime"] + BOOT)
        node["metadata"]["creationTimestamp"] = registered
        node["status"]["conditions"] = [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                         "lastTransitionTime": registered}]
        return node

    # -- steady before the run --------------------------------------------------------------------
    SETTLE_SYNCS = 10  # a pool's first Machine is Initialized in 3

    def settle_seconds(self, settings) -> float:
        """Simulated seconds before the run for ``settle`` (a second a sync) and a leaked-instance check's
        interval: each pool's first sync in the run checks, as every sync of a steady pool does."""
        syncs = self.SETTLE_SYNCS * len(self.pools) + len(self.pools) + len(self.queues)
        return float(syncs + settings.leaked_instance_check_seconds)

    def settle(self, ctx: Context, clock: SimClock) -> None:
        """Every pool's first Machine through the machine hook until Initialized and unchanged; the pool's
        other Machines and Nodes made in its image; then every NodePool and InterruptionQueue synced once."""
        facts = instances.TYPES.get(self.ec2, ["m5.large"])["m5.large"]
        for pool in self.pools:
            names = self.pool_machines(pool)
            first = self.members[names[0]]
            self.kube.add_node(self.booted_node(first, facts))
            self.machine(first.machine)["status"] = {"instanceID": first.instance["InstanceId"]}
            for _ in range(self.SETTLE_SYNCS):
                clock.at += 1
                before = self.machine(first.machine)["status"]
                sync_machine(self, first.machine, ctx)
                after = self.machine(first.machine)["status"]
                if after == before and conditions.is_true(after, machine_names.INITIALIZED):
                    break
            else:
                raise RuntimeError(f"{first.machine} did not settle: {self.machine(first.machine)['status']}")
            template_node = self.kube.nodes[first.node]
            for name in names[1:]:
                member = self.members[name]
                self.kube.add_node(_in_image_of(template_node, self.booted_node(member, facts)))
                self.machine(name)["status"] = _status_in_image_of(self.machine(first.machine)["status"],
                                                                   first, member)
        for pool in self.pools:
            clock.at += 1
            sync_pool(self, pool, ctx)
        for name in self.queues:
            clock.at += 1
            sync_queue(self, name, ctx)


def _in_image_of(template: dict, booted: dict) -> dict:
    """``booted`` with what joining mirrored onto ``template`` (labels, annotations, taints); its own
    kubelet labels, providerID and status kept."""
    node = copy.deepcopy(booted)
    node["metadata"]["labels"] = {**template["metadata"]["labels"], **booted["metadata"]["labels"]}
    node["metadata"]["annotations"] = {**template["metadata"].get("annotations", {}),
                                       **booted["metadata"]["annotations"]}
    node["spec"]["taints"] = copy.deepcopy(template["spec"].get("taints") or [])
    return node


def _status_in_image_of(status: dict, template: Member, member: Member) -> dict:
    """The template Machine's status with the member's instance, Node and launch time in it."""
    text = json.dumps(status)
    for old, new in ((template.instance["InstanceId"], member.instance["InstanceId"]), (template.node, member.node)):
        text = text.replace(old, new)
    made = json.loads(text)
    made["launchedAt"] = timefmt.fmt(member.instance["LaunchTime"])
    return made


# --------------------------------------------------------------------------- one sync of each controller


@dataclasses.dataclass
class Answer:
    resync_after: float | None  # what Metacontroller is asked: sync again this many seconds after this one
    changed: list[str]  # what of the object the answer changed (a write Metacontroller makes): none if steady
    error: str = ""  # the lastError it answered


def _resync(response: dict) -> float | None:
    value = response.get("resyncAfterSeconds")
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def _changed(before: dict | None, after: dict | None) -> list[str]:
    before, after = before or {}, after or {}
    return sorted(key for key in set(before) | set(after) if before.get(key) != after.get(key))


def sync_machine(cluster: SteadyCluster, name: str, ctx: Context) -> Answer:
    machine = cluster.machine(name)
    node = cluster.kube.nodes.get(cluster.node_of[name])
    related = [node] if node is not None else []
    pool = cluster.pool(machine["metadata"]["labels"][machine_names.POOL_LABEL])
    body = hook_request(MACHINE, _json_copy(machine), related=_json_copy([*related, pool]))
    response = serve(MACHINE, "sync", body, ctx)
    changed = _changed(machine.get("status"), response["status"])
    machine["status"] = response["status"]
    return Answer(_resync(response), changed, response["status"].get("lastError") or "")


def sync_node(cluster: SteadyCluster, name: str, ctx: Context) -> Answer:
    node = cluster.kube.nodes[name]
    response = serve(NODE, "sync", hook_request(NODE, _json_copy(node)), ctx)
    updated = apply_decorator_response(node, response)
    changed = [f"metadata.{key}" for key in _changed(node["metadata"], updated["metadata"])] + \
        [f"status.{key}" for key in _changed(node.get("status"), updated.get("status"))]
    if changed:
        cluster.kube.nodes[name] = updated
    return Answer(_resync(response), changed)


def sync_pool(cluster: SteadyCluster, name: str, ctx: Context) -> Answer:
    pool = cluster.pool(name)
    children = [cluster.machine(m) for m in cluster.pool_machines(name)]
    response = serve(NODEPOOL, "sync", hook_request(NODEPOOL, _json_copy(pool), children=_json_copy(children)), ctx)
    kept = sorted(c["metadata"]["name"] for c in response.get("children") or [])
    changed = _changed(pool.get("status"), response["status"])
    if kept != sorted(cluster.pool_machines(name)):
        changed.append("children")  # not applied: the model's pools keep their Machines
    pool["status"] = response["status"]
    return Answer(_resync(response), changed, response["status"].get("lastError") or "")


def sync_queue(cluster: SteadyCluster, name: str, ctx: Context) -> Answer:
    parent = cluster.queue(name)
    response = serve(INTERRUPTION, "sync", hook_request(INTERRUPTION, _json_copy(parent)), ctx)
    changed = _changed(parent.get("status"), response["status"])
    parent["status"] = response["status"]
    resync = _resync(response)
    # The long poll holds the call (moto holds it as long, in real time): the next one is asked for after it.
    waited = queue.parse(parent).wait_seconds
    return Answer(resync + waited if resync is not None else None, changed, response["status"].get("lastError") or "")


SYNCS: dict[str, Callable[[SteadyCluster, str, Context], Answer]] = {
    MACHINE: sync_machine, NODE: sync_node, NODEPOOL: sync_pool, INTERRUPTION: sync_queue}


# --------------------------------------------------------------------------- Metacontroller's cadence


@dataclasses.dataclass
class Cadence:
    controller: str
    names: list[str]
    period: float | None  # resyncPeriodSeconds; None: only what the answers ask for
    spread: float  # the first syncs spread over this many seconds


@dataclasses.dataclass
class Counts:
    syncs: Counter = dataclasses.field(default_factory=Counter)
    changed: Counter = dataclasses.field(default_factory=Counter)
    writes: Counter = dataclasses.field(default_factory=Counter)  # (controller, verb kind) -> the hooks' own writes
    resyncs_asked: dict = dataclasses.field(default_factory=dict)  # controller -> Counter of resyncAfterSeconds
    unsteady: dict = dataclasses.field(default_factory=dict)  # controller -> the first few answers that changed


def discovery_pass(ctx: Context, pacing: rate_limits.Limiter) -> float:
    """One rebuild of the process's discovery index, as keep_fresh makes it; seconds until the next."""
    with rate_limits.counting_draws() as drawn:
        lb_discovery.build_index(ctx.aws, REGION, ctx.settings)
    return lb_discovery.refresh_interval(ctx.settings, pacing, drawn.of())


def run(cluster: SteadyCluster, cadences: list[Cadence], processes: list[Context], clock: SimClock,
        tally: Tally, seconds: float, pacing: rate_limits.Limiter | None = None) -> Counts:
    """Every sync due before ``seconds``, in time order, each by the next process in turn; with ``pacing``
    (the limiter a process of the deployment has), each process's discovery passes too, the first ones
    spread over the cache period."""
    counts = Counts()
    due: list[tuple[float, int, str, str, bool]] = []  # (at, order, controller, name, periodic)
    by_name = {c.controller: c for c in cadences}
    phase: dict[tuple[str, str], float] = {}
    delayed: dict[tuple[str, str], float] = {}  # the one delayed resync each object waits for
    order = 0
    for cadence in cadences:
        for i, name in enumerate(cadence.names):
            at = cadence.spread * i / max(1, len(cadence.names))
            phase[(cadence.controller, name)] = at
            if cadence.period is None:
                delayed[(cadence.controller, name)] = at
            due.append((at, order, cadence.controller, name, cadence.period is not None))
            order += 1
    if pacing is not None:
        period = processes[0].settings.discovery_cache_seconds * lb_discovery._REFRESH_AT
        for p in range(len(processes)):
            order += 1
            due.append((period * p / len(processes), order, DISCOVERY, str(p), False))
    heapq.heapify(due)
    turn = 0
    while due:
        at, _, controller, name, periodic = heapq.heappop(due)
        if at >= seconds:
            break
        if controller == DISCOVERY:
            clock.at = at
            tally.controller = controller
            counts.syncs[controller] += 1
            order += 1
            heapq.heappush(due, (at + discovery_pass(processes[int(name)], pacing), order, controller, name, False))
            continue
        key, cadence = (controller, name), by_name[controller]
        if periodic:
            order += 1
            heapq.heappush(due, (at + cadence.period, order, controller, name, True))
        elif delayed.get(key) != at:
            continue  # taken by an earlier sync, or superseded by a sooner one
        elif cadence.period is not None and \
                cadence.period - (at - phase[key]) % cadence.period < SAME_SYNC_SECONDS:
            del delayed[key]
            continue  # the periodic sync about to come is this one
        if key in delayed and delayed[key] <= at + SAME_SYNC_SECONDS:
            del delayed[key]  # this sync is the one it waited for
        clock.at = at
        ctx = processes[turn % len(processes)]
        turn += 1
        tally.controller = controller
        written = len(cluster.kube.calls)
        answer = SYNCS[controller](cluster, name, ctx)
        for call in cluster.kube.calls[written:]:
            if call[0] in WRITE_VERBS and call[1] != "Event":
                counts.writes[(controller, f"{call[0]} {call[1]}")] += 1
            elif call[0] == "create" and call[1] == "Event":
                counts.writes[(controller, "Event")] += 1
        del cluster.kube.calls[:]
        counts.syncs[controller] += 1
        if answer.changed:
            counts.changed[controller] += 1
            sample = counts.unsteady.setdefault(controller, [])
            if len(sample) < 5:
                sample.append({"name": name, "at": at, "changed": answer.changed, "lastError": answer.error})
        counts.resyncs_asked.setdefault(controller, Counter())[answer.resync_after] += 1
        if answer.resync_after is not None:
            again = at + answer.resync_after
            if key not in delayed or again < delayed[key]:
                delayed[key] = again
                order += 1
                heapq.heappush(due, (again, order, controller, name, False))
    return counts


# --------------------------------------------------------------------------- the model


def steady(endpoint: str, *, machines: int = 5000, pools: int = 10, minutes: float = 2.0, processes: int = 4,
           view_seconds: float = 10.0, queues: int = 1, target_groups: int = 20, classic_elbs: int = 1,
           progress: Callable[[str], None] = lambda _: None) -> dict:
    """The steady cluster in moto at ``endpoint`` (boto3's AWS_* environment pointing there), its syncs for
    ``minutes`` simulated minutes, and what they cost in AWS calls."""
    started = time.monotonic()
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=endpoint)
    sqs = boto3.client("sqs", region_name=REGION, endpoint_url=endpoint)
    cluster = SteadyCluster(ec2, sqs, machines, pools, queues,
                            boto3.client("elbv2", region_name=REGION, endpoint_url=endpoint),
                            boto3.client("elb", region_name=REGION, endpoint_url=endpoint), target_groups, classic_elbs)
    settling = cluster.settle_seconds(load_settings({}))
    clock = SimClock(datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0) + BOOT +
                     datetime.timedelta(seconds=settling))
    progress(f"{machines} instances in moto, {len(cluster.pools)} pools: {time.monotonic() - started:.0f} s")
    tally = Tally()
    clock.at = -settling
    # Every instance is in moto before the first sync: one read of them serves the whole settling.
    cluster.settle(contexts(1, cluster.kube, clock, tally, view_seconds=3600)[0], clock)
    cluster.kube.calls.clear()
    tally.clear()
    settled = time.monotonic()
    progress(f"settled: {settled - started:.0f} s")

    node_resync = load_settings({}).node_resync_seconds
    periods = resync_periods()
    cadences = [
        Cadence(MACHINE, sorted(cluster.members), periods[MACHINE], periods[MACHINE] or node_resync),
        Cadence(NODE, sorted(cluster.node_of.values()), periods[NODE], periods[NODE] or node_resync),
        Cadence(NODEPOOL, list(cluster.pools), periods[NODEPOOL], periods[NODEPOOL] or node_resync),
        Cadence(INTERRUPTION, list(cluster.queues), periods[INTERRUPTION], periods[INTERRUPTION] or node_resync),
    ]
    seconds = minutes * 60.0
    # The share each process of the deployment has: what paces its discovery passes.
    pacing = limiter_of(load_settings({"NODEWARDEN_AWS_RATE_PROCESSES": str(processes)}))
    counts = run(cluster, cadences, contexts(processes, cluster.kube, clock, tally, view_seconds), clock, tally,
                 seconds, pacing if target_groups or classic_elbs else None)
    finished = time.monotonic()
    progress(f"{sum(counts.syncs.values())} syncs over {minutes:g} simulated minutes: {finished - settled:.0f} s")
    return figures(tally, counts, machines=machines, nodes=len(cluster.node_of), pools=len(cluster.pools),
                   queues=queues, target_groups=target_groups, classic_elbs=classic_elbs, minutes=minutes, processes=processes, view_seconds=view_seconds,
                   periods={c.controller: c.period for c in cadences}, node_resync=node_resync,
                   wall={"setup": round(settled - started, 1), "run": round(finished - settled, 1)})


def figures(tally: Tally, counts: Counts, *, machines: int, nodes: int, pools: int, queues: int,
            target_groups: int, classic_elbs: int, minutes: float,
            processes: int, view_seconds: float, periods: dict, node_resync: float, wall: dict) -> dict:
    seconds = minutes * 60.0
    buckets = {b.name: b for b in aws_rate_buckets.BUCKETS}
    by_key = []
    for (name, key), tokens in sorted(tally.by_key.items()):
        bucket = buckets[name]
        per_second = tokens / seconds
        share = per_second / bucket.refill_per_second
        by_key.append({"bucket": name, "key": key, "calls": tally.calls_by_key[(name, key)], "tokens": tokens,
                       "perSecond": per_second, "refillPerSecond": bucket.refill_per_second,
                       "shareOfRefill": share, "documented": bucket.documented,
                       "goal": "PASS" if share <= GOAL_SHARE else "over"})
    by_operation = []
    for (controller, operation), calls in sorted(tally.by_operation.items()):
        per_minute = calls / minutes
        by_operation.append({"controller": controller, "operation": operation, "calls": calls,
                             "perMinute": per_minute, "perMachinePerMinute": per_minute / max(1, machines),
                             "perNodePerMinute": per_minute / max(1, nodes),
                             "perSync": calls / max(1, counts.syncs[controller])})
    return {
        "date": datetime.date.today().isoformat(),
        "machines": machines, "nodes": nodes, "pools": pools, "queues": queues, "targetGroups": target_groups,
        "classicELBs": classic_elbs, "minutes": minutes,
        "processes": processes, "viewSeconds": view_seconds, "pageSize": PAGE_SIZE,
        "resyncPeriodSeconds": periods, "nodeResyncSeconds": node_resync,
        "syncs": dict(counts.syncs), "answersThatChanged": {c: counts.changed[c] for c in counts.syncs},
        "answersThatChangedSample": counts.unsteady,
        "describeInstancesBy": {f"{c}: {what}": n for (c, what), n in sorted(tally.reads.items())},
        "hookWrites": {f"{c}: {what}": n for (c, what), n in sorted(counts.writes.items())},
        "resyncAfterAsked": {c: {str(k): n for k, n in asked.items()} for c, asked in counts.resyncs_asked.items()},
        "buckets": by_key,
        "unusedBuckets": sorted(set(buckets) - {row["bucket"] for row in by_key}),
        "operations": by_operation,
        "wallSeconds": wall,
    }


# --------------------------------------------------------------------------- report


def report(results: dict) -> str:
    n = results["machines"]
    lines = [f"{n} Machines and {results['nodes']} Nodes in {results['pools']} NodePools, {results['queues']} "
             f"InterruptionQueue(s), {results['targetGroups']} target groups and {results['classicELBs']} classic "
             f"ELB(s); {results['processes']} hook processes; instance view "
             f"{results['viewSeconds']:g} s; {results['minutes']:g} simulated minutes "
             f"({results['date']}; setup {results['wallSeconds']['setup']:.0f} s, run "
             f"{results['wallSeconds']['run']:.0f} s)", ""]
    lines += [f"| bucket | key | calls/s at {n} Machines | refill/s | % of refill | goal ≤ 25 % |",
              "|---|---|---|---|---|---|"]
    for row in results["buckets"]:
        lines.append(f"| {row['bucket']}{'' if row['documented'] else ' (assumed)'} | `{row['key']}` | "
                     f"{row['perSecond']:.3f} | {row['refillPerSecond']:g} | {100 * row['shareOfRefill']:.1f} % | "
                     f"{row['goal']} |")
    lines += ["", f"No call drew from: {', '.join(results['unusedBuckets']) or 'none'}.", "",
              "| controller | operation | calls | per sync | per minute | per Machine per minute | "
              "per Node per minute |", "|---|---|---|---|---|---|---|"]
    for row in results["operations"]:
        lines.append(f"| {row['controller']} | {row['operation']} | {row['calls']} | {row['perSync']:.3f} | "
                     f"{row['perMinute']:.2f} | {row['perMachinePerMinute']:.4f} | {row['perNodePerMinute']:.4f} |")
    lines += ["", f"syncs: {results['syncs']}; answers that changed an object: {results['answersThatChanged']}; "
                  f"the hooks' own writes: {results['hookWrites'] or 'none'}",
              f"DescribeInstances by what it asks for: {results['describeInstancesBy']}",
              f"resyncPeriodSeconds: {results['resyncPeriodSeconds']} (node: each answer's resyncAfterSeconds, at "
              f"most {results['nodeResyncSeconds']:g} s); resyncAfterSeconds asked: {results['resyncAfterAsked']}"]
    for controller, sample in results["answersThatChangedSample"].items():
        lines.append(f"{controller}: answers that changed, the first {len(sample)}: {sample}")
    return "\n".join(lines)


def moto_in_process() -> tuple[object, str]:
    """moto in server mode in this process, as tests/conftest.py starts it."""
    from moto.server import ThreadedMotoServer

    from devcluster.moto_server import file_classic_elbs_as_aws_does, look_up_tags_by_resource, remember_routing
    from devcluster.waits import free_port

    remember_routing()
    look_up_tags_by_resource()
    file_classic_elbs_as_aws_does()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request otherwise
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    return server, f"http://127.0.0.1:{port}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("steady", help="a steady cluster's AWS calls per bucket (the venv, moto in process)")
    s.add_argument("--machines", type=int, default=5000)
    s.add_argument("--pools", type=int, default=10)
    s.add_argument("--minutes", type=float, default=2.0, help="simulated minutes")
    s.add_argument("--processes", type=int, default=4, help="hook processes (replicas × workers)")
    s.add_argument("--view-seconds", type=float, default=10.0,
                   help="NODEWARDEN_INSTANCE_VIEW_SECONDS (0: every sync reads the instances again)")
    s.add_argument("--queues", type=int, default=1, help="InterruptionQueues")
    s.add_argument("--target-groups", type=int, default=20, help="target groups tagged for the cluster")
    s.add_argument("--classic-elbs", type=int, default=1, help="classic ELBs tagged for the cluster")
    s.add_argument("--json", type=pathlib.Path)
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)
    for name, value in (("AWS_ACCESS_KEY_ID", "bench"), ("AWS_SECRET_ACCESS_KEY", "bench")):
        os.environ.setdefault(name, value)
    os.environ["AWS_REGION"] = os.environ["AWS_DEFAULT_REGION"] = REGION
    server, endpoint = moto_in_process()
    os.environ["AWS_ENDPOINT_URL"] = endpoint  # boto3 reads it from the environment
    try:
        results = steady(endpoint, machines=args.machines, pools=args.pools, minutes=args.minutes,
                         processes=args.processes, view_seconds=args.view_seconds, queues=args.queues,
                         target_groups=args.target_groups, classic_elbs=args.classic_elbs,
                         progress=lambda line: print(line, file=sys.stderr, flush=True))
    finally:
        server.stop()
    print(report(results))
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
