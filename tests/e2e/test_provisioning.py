"""Provisioning NodePools on the local stack: pending pods become Machines, Machines become Nodes, pods run.

Everything here is the real control plane: kube-scheduler marks the pods
Unschedulable, the nodepool controller (through Metacontroller) launches
Machines in moto, the kubelet stand-in registers their Nodes, kwok runs the
pods. Each test has a pool of its own, and its pods select it by the pool's
label (``e2e-pool: <name>``), so no other test's Nodes or pods count.

How many Machines a workload needs is computed here, independently of the
scheduler under test: one instance type per pool, its allocatable from
hooks.machines.capacity.resources (Karpenter's formula), less what the
DaemonSets that run on the pool's Nodes request.
"""
from __future__ import annotations

import contextlib
import importlib.util
import math
from collections import Counter
from decimal import Decimal

import pytest
from lightkube.utils.quantity import parse_quantity

from devcluster import workloads
from devcluster.api import wait_for
from devcluster.pools import (POOLS, condition_status, initialized_machines, live_machines, pool_instance_tags,
                              pool_machines, pool_manifest, pool_subnet, provisioning_pool_manifest)
from hooks import events, machine_names, provisioning_names
from hooks.aws.instances import type_facts
from hooks.machines import capacity
from tests.e2e.conftest import unique
from tests.e2e.test_disruption import _metric

pytestmark = pytest.mark.e2e

# The tests that need provisioning pools run once hooks/provisioning exists, and fail if it misbehaves.
PROVISIONING = importlib.util.find_spec("hooks.provisioning") is not None
needs_provisioning = pytest.mark.xfail(not PROVISIONING, run=False, strict=True,
                                       reason="provisioning NodePools are not on this branch (no hooks/provisioning)")

INSTANCE_TYPE = "c5.2xlarge"  # 8 vCPUs: 7900m allocatable, 16 GiB
STATIC_TYPE = "m5.xlarge"
TYPE_KEY = provisioning_names.INSTANCE_TYPE_LABEL
ZONE_KEY = provisioning_names.ZONE_LABEL
ZONES = ("us-east-1a", "us-east-1b")
POD = {"cpu": "1", "memory": "256Mi"}
WELL_KNOWN_OF_TYPE = (provisioning_names.CAPACITY_TYPE_LABEL, provisioning_names.INSTANCE_FAMILY_LABEL,
                      provisioning_names.INSTANCE_SIZE_LABEL, provisioning_names.INSTANCE_CPU_LABEL,
                      provisioning_names.INSTANCE_MEMORY_LABEL)
# Deadlines, not measurements: a Machine's life on two shared cores takes seconds to tens of seconds.
SETTLE = 300
EVENTS = "/api/v1/namespaces/{}/events"


# -- the stage ---------------------------------------------------------------------------

class Stage:
    """One test's pools and workloads; its teardown deletes the workloads first, so no pool
    provisions for them again, then the pools, and waits until their Machines are gone."""

    def __init__(self, api, cloud, namespace: str):
        self.api, self.cloud, self.namespace = api, cloud, namespace
        self.pools: list[str] = []

    def pool(self, prefix: str, *, zones=ZONES[:1], requirements=(), **spec) -> str:
        name = unique(prefix)
        subnets = [pool_subnet(self.cloud, zone) for zone in zones]
        required = [{"key": TYPE_KEY, "operator": "In", "values": [INSTANCE_TYPE]}, *requirements]
        self.api.create(POOLS, provisioning_pool_manifest(name, subnets, requirements=required, **spec))
        self.pools.append(name)
        return name

    def static_pool(self, prefix: str, replicas: int, instance_type: str) -> str:
        name = unique(prefix)
        self.api.create(POOLS, pool_manifest(name, pool_subnet(self.cloud), replicas,
                                             template_spec={"instanceTypes": [instance_type]}))
        self.pools.append(name)
        return name

    def deployment(self, pool: str, replicas: int, prefix: str = "app", **manifest) -> str:
        name = unique(prefix)
        workloads.create_deployment(self.api, self.namespace, name, replicas=replicas,
                                    requests=manifest.pop("requests", POD),
                                    node_selector={"e2e-pool": pool, **manifest.pop("node_selector", {})}, **manifest)
        return name

    def teardown(self) -> None:
        for listed in self.api.get(workloads.deployments(self.namespace))["items"]:
            self.api.delete(f"{workloads.deployments(self.namespace)}/{listed['metadata']['name']}")
        self.api.delete(f"/api/v1/namespaces/{self.namespace}/pods")  # the bare ones
        wait_for(lambda: not self.api.get(f"/api/v1/namespaces/{self.namespace}/pods")["items"],
                 f"the pods of {self.namespace} gone", timeout=120, interval=0.5)
        for name in self.pools:
            self.api.delete(f"{POOLS}/{name}")
        for name in self.pools:
            wait_for(lambda n=name: self.api.get_or_none(f"{POOLS}/{n}") is None, f"NodePool {name} gone",
                     timeout=240, interval=0.5)


@pytest.fixture
def stage(api, cloud, namespace):
    made = Stage(api, cloud, namespace)
    yield made
    made.teardown()


@contextlib.contextmanager
def kubelets_held(cluster):
    """Instances launched meanwhile do not register their Nodes (a slow boot): their Machines stay in flight."""
    standin = cluster.kubelet_standin
    before = standin.boot_delay
    standin.boot_delay = 3600.0
    try:
        yield
    finally:
        standin.boot_delay = before


# -- what the workload needs, computed here --------------------------------------------------

def _quantities(mapping) -> dict[str, Decimal]:
    return {key: parse_quantity(str(value)) for key, value in (mapping or {}).items()}


def allocatable(cloud, instance_type: str) -> dict[str, Decimal]:
    """The type's allocatable as hooks.machines.capacity.resources computes it from DescribeInstanceTypes."""
    described = cloud.ec2.describe_instance_types(InstanceTypes=[instance_type])["InstanceTypes"][0]
    return _quantities(capacity.resources(type_facts(described))[1])


def daemonset_overhead(api, labels: dict[str, str]) -> dict[str, Decimal]:
    """What the DaemonSets whose nodeSelector a Node with ``labels`` matches request on it, one pod each."""
    total: dict[str, Decimal] = {"pods": Decimal(0)}
    for ds in api.get("/apis/apps/v1/daemonsets")["items"]:
        spec = ds["spec"]["template"]["spec"]
        if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
            continue
        total["pods"] += 1
        for key, value in workloads.pod_requests(ds["spec"]["template"]).items():
            total[key] = total.get(key, Decimal(0)) + Decimal(str(value))
    return total


def pods_per_node(cloud, api, pool: str, instance_type: str = INSTANCE_TYPE, pod=POD, *, overhead=True) -> int:
    """How many pods requesting ``pod`` fit on one new Node of the pool (beside its DaemonSets' pods)."""
    free = allocatable(cloud, instance_type)
    if overhead:
        for key, value in daemonset_overhead(api, {"e2e-pool": pool}).items():
            free[key] = free.get(key, Decimal(0)) - value
    wanted = {**_quantities(pod), "pods": Decimal(1)}
    return min(int(free.get(key, Decimal(0)) // value) for key, value in wanted.items() if value)


def machines_for(pods: int, per_node: int) -> int:
    return math.ceil(pods / per_node)


# -- what the pool did -------------------------------------------------------------------

def assert_one_instance_each(cloud, pool: str, machines: list[dict]) -> None:
    """The pool launched exactly one instance per Machine, and nothing else."""
    instances = pool_instance_tags(cloud, pool)
    assert sorted(m["status"]["instanceID"] for m in machines) == sorted(instances), instances
    by_uid = Counter(tags[machine_names.TAG_MACHINE_UID] for tags in instances.values())
    assert by_uid == Counter(m["metadata"]["uid"] for m in machines), by_uid


def pod_events(api, namespace: str, reason: str) -> list[dict]:
    return api.get(EVENTS.format(namespace), params={"fieldSelector": f"reason={reason}"})["items"]


def provisioning_status(api, pool: str) -> dict:
    return ((api.get(f"{POOLS}/{pool}").get("status") or {}).get("provisioning")) or {}


def explain(api, pool: str) -> str:
    """The pool's Machines, what each was made for, and the pool's Events: a failed count's evidence."""
    lines = []
    for machine in sorted(pool_machines(api, pool), key=lambda m: m["metadata"]["creationTimestamp"]):
        meta = machine["metadata"]
        made_for = (meta.get("annotations") or {}).get(provisioning_names.PROVISIONED_FOR)
        lines.append(f"Machine {meta['name']} created {meta['creationTimestamp']}"
                     f"{' deleting' if meta.get('deletionTimestamp') else ''}: provisioned-for {made_for}")
    listed = api.get("/api/v1/events", params={"fieldSelector": f"involvedObject.name={pool}"})["items"]
    for event in sorted(listed, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or ""):
        lines.append(f"Event {event.get('lastTimestamp') or event.get('eventTime')} {event['reason']} "
                     f"x{event.get('count', 1)}: {event['message']}")
    lines.append(f"status.provisioning: {provisioning_status(api, pool)}")
    return "\n".join(lines)


def _node_of(api, pod: dict) -> dict:
    return api.get(f"/api/v1/nodes/{pod['spec']['nodeName']}")


# -- the stack as provisioning needs it (no provisioning yet) -----------------------------------

def test_pods_run_on_a_static_pools_nodes_and_the_rest_wait_unschedulable(api, cloud, stage):
    """kube-scheduler places pods on the stand-in's Nodes within their allocatable, kwok runs them, and
    the pod that does not fit is marked PodScheduled=False, Unschedulable: what a provisioning round reads."""
    pool = stage.static_pool("static", 2, STATIC_TYPE)
    machines = initialized_machines(api, pool, 2)
    expected = allocatable(cloud, STATIC_TYPE)
    nodes = [api.get(f"/api/v1/nodes/{m['status']['nodeName']}") for m in machines]
    for node in nodes:  # the figures the hooks plan a Machine with, so pods planned onto it fit its Node
        assert _quantities(node["status"]["allocatable"]) == expected, (node["status"]["allocatable"], expected)
    per_node = pods_per_node(cloud, api, pool, STATIC_TYPE, overhead=False)
    assert per_node >= 1

    app = stage.deployment(pool, 2 * per_node + 1)

    def placed():
        pods = workloads.deployment_pods(api, stage.namespace, app)
        waiting = [p for p in pods if not p["spec"].get("nodeName")]
        return len(workloads.running(pods)) == 2 * per_node and len(waiting) == 1 and waiting[0]
    left = wait_for(placed, f"{2 * per_node} pods Running and one left over", timeout=120, interval=0.5)
    scheduled = next(c for c in left["status"]["conditions"] if c["type"] == "PodScheduled")
    assert (scheduled["status"], scheduled["reason"]) == ("False", "Unschedulable"), scheduled
    assert left["status"]["phase"] == "Pending"
    usage = workloads.pool_utilization(api, pool)
    assert usage.nodes == 2 and usage.pods == 2 * per_node
    assert usage.requested["cpu"] == 2 * per_node * float(parse_quantity(POD["cpu"]))


# -- provisioning ----------------------------------------------------------------------------

@needs_provisioning
def test_forty_pods_get_just_enough_machines_and_all_run(api, cloud, stage):
    pool = stage.pool("fit", disruption={"consolidateAfter": "Never"})
    # A DaemonSet on the pool's Nodes: its pod is reserved on every new Machine (kube-controller-manager
    # runs no DaemonSet controller here, so its pods never appear; the reservation is the provisioner's).
    api.create(f"/apis/apps/v1/namespaces/{stage.namespace}/daemonsets",
               workloads.daemonset_manifest(unique("daemon"), requests={"cpu": "1", "memory": "512Mi"},
                                            node_selector={"e2e-pool": pool}))
    per_node = pods_per_node(cloud, api, pool)
    expected = machines_for(40, per_node)
    alone = pods_per_node(cloud, api, pool, overhead=False)
    assert expected != machines_for(40, alone), "the DaemonSet must change the count"

    app = stage.deployment(pool, 40)
    pods = workloads.wait_running(api, stage.namespace, app, 40, timeout=SETTLE)
    machines = live_machines(pool_machines(api, pool))
    assert len(machines) == expected, explain(api, pool)
    # A pod may run on its Node before the Machine's next sync records Initialized: wait for that sync.
    def all_initialized():
        found = live_machines(pool_machines(api, pool))
        return found if all(condition_status(m, machine_names.INITIALIZED) == "True" for m in found) else None
    machines = wait_for(all_initialized, "every Machine Initialized", timeout=60, interval=0.5)
    assert len(machines) == expected, explain(api, pool)
    assert {m["status"]["instanceType"] for m in machines} == {INSTANCE_TYPE}
    assert_one_instance_each(cloud, pool, machines)
    nodes = {m["status"]["nodeName"] for m in machines}
    assert {p["spec"]["nodeName"] for p in pods} <= nodes
    for name in nodes:
        labels = api.get(f"/api/v1/nodes/{name}")["metadata"]["labels"]
        assert labels[TYPE_KEY] == INSTANCE_TYPE and labels[ZONE_KEY] == ZONES[0]
        described = {key: labels.get(key) for key in WELL_KNOWN_OF_TYPE}
        assert described == {provisioning_names.CAPACITY_TYPE_LABEL: "on-demand",
                             provisioning_names.INSTANCE_FAMILY_LABEL: "c5",
                             provisioning_names.INSTANCE_SIZE_LABEL: "2xlarge",
                             provisioning_names.INSTANCE_CPU_LABEL: "8",
                             provisioning_names.INSTANCE_MEMORY_LABEL: "16384"}, labels
        assert labels[machine_names.POOL_LABEL] == pool
    wait_for(lambda: (provisioning_status(api, pool).get("resources") or {}).get("machines") == expected,
             f"the pool's status counting {expected} Machines", timeout=60, interval=0.5)


@needs_provisioning
def test_a_second_deployment_uses_the_room_left_on_machines_in_flight(api, cloud, cluster, stage):
    pool = stage.pool("inflight")
    per_node = pods_per_node(cloud, api, pool)
    first, second = per_node + 3, per_node + 1
    expected = machines_for(first + second, per_node)
    assert expected < machines_for(first, per_node) + machines_for(second, per_node), "room must be left"

    with kubelets_held(cluster):
        one = stage.deployment(pool, first, "first")
        wait_for(lambda: len(live_machines(pool_machines(api, pool))) == machines_for(first, per_node),
                 "Machines for the first Deployment", timeout=120, interval=0.5)
        two = stage.deployment(pool, second, "second")

        def nominated():
            named = {e["involvedObject"]["name"] for e in pod_events(api, stage.namespace, events.NOMINATED)}
            pods = [p for app in (one, two) for p in workloads.deployment_pods(api, stage.namespace, app)]
            return len(pods) == first + second and all(p["metadata"]["name"] in named for p in pods)
        wait_for(nominated, "every pod Nominated to a Machine", timeout=120, interval=0.5)
        machines = live_machines(pool_machines(api, pool))
        assert len(machines) == expected, explain(api, pool)
        assert not any(condition_status(m, machine_names.REGISTERED) == "True" for m in machines), \
            "every Machine was in flight"

    workloads.wait_running(api, stage.namespace, one, first, timeout=SETTLE)
    workloads.wait_running(api, stage.namespace, two, second, timeout=SETTLE)
    machines = live_machines(pool_machines(api, pool))
    assert len(machines) == expected, explain(api, pool)
    assert_one_instance_each(cloud, pool, machines)


@needs_provisioning
def test_a_pod_no_pool_can_run_gets_an_event_and_no_machine(api, cloud, stage):
    pool = stage.pool("never")
    pod = unique("impossible")
    api.create(f"/api/v1/namespaces/{stage.namespace}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod},
        "spec": {"nodeSelector": {"e2e-pool": pool, TYPE_KEY: "m5.large"}, "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "app", "image": workloads.IMAGE,
                                 "resources": {"requests": POD, "limits": POD}}]}})
    failed = wait_for(lambda: [e for e in pod_events(api, stage.namespace, events.FAILED_PROVISIONING)
                               if e["involvedObject"]["name"] == pod],
                      "a FailedProvisioning Event on the pod", timeout=120, interval=0.5)
    assert pool in failed[0]["message"], failed[0]["message"]
    # A later round than the one that gave up on the pod has passed, and made nothing either.
    seen = provisioning_status(api, pool).get("lastRound")
    wait_for(lambda: provisioning_status(api, pool).get("lastRound") not in (None, seen),
             "another provisioning round", timeout=120, interval=0.5)
    assert not pool_machines(api, pool)
    assert not pool_instance_tags(cloud, pool)
    assert api.get(f"/api/v1/namespaces/{stage.namespace}/pods/{pod}")["status"]["phase"] == "Pending"


@needs_provisioning
def test_scaled_to_zero_the_empty_machines_go_one_at_a_time(api, cloud, cluster, stage):
    pool = stage.pool("empty", disruption={"consolidationPolicy": "WhenEmpty", "consolidateAfter": "5s",
                                           "budgets": [{"nodes": "1"}]})
    per_node = pods_per_node(cloud, api, pool)
    count = 2 * per_node + 1
    expected = machines_for(count, per_node)
    app = stage.deployment(pool, count)
    workloads.wait_running(api, stage.namespace, app, count, timeout=SETTLE)
    machines = initialized_machines(api, pool, expected)
    consolidated = _metric(cluster, "nodewarden_consolidations_total", nodepool=pool, reason="Empty")

    workloads.scale(api, stage.namespace, app, 0)
    most = [0]

    def gone():
        listed = pool_machines(api, pool)
        most[0] = max(most[0], sum(1 for m in listed if m["metadata"].get("deletionTimestamp")))
        return not listed
    wait_for(gone, "every empty Machine deleted", timeout=SETTLE, interval=0.2)
    assert most[0] <= 1, f"{most[0]} Machines were being deleted at once; the budget allows 1"
    states = {tags["state"] for tags in pool_instance_tags(cloud, pool).values()}
    assert states == {"terminated"}, states
    after = _metric(cluster, "nodewarden_consolidations_total", nodepool=pool, reason="Empty")
    assert after - consolidated == len(machines)


@needs_provisioning
def test_a_zone_spread_gets_machines_in_both_zones(api, cloud, stage):
    pool = stage.pool("spread", zones=ZONES, requirements=[{"key": ZONE_KEY, "operator": "In", "values": list(ZONES)}])
    per_node = pods_per_node(cloud, api, pool)
    count = per_node + 1  # one Node would hold all but one
    app = stage.deployment(pool, count, zone_spread=True, min_domains=len(ZONES))
    pods = workloads.wait_running(api, stage.namespace, app, count, timeout=SETTLE)
    machines = live_machines(pool_machines(api, pool))
    assert {m["status"]["zone"] for m in machines} == set(ZONES), explain(api, pool)
    assert_one_instance_each(cloud, pool, machines)
    per_zone = Counter(_node_of(api, p)["metadata"]["labels"][ZONE_KEY] for p in pods)
    assert set(per_zone) == set(ZONES) and max(per_zone.values()) - min(per_zone.values()) <= 1, per_zone


@needs_provisioning
def test_pods_selecting_well_known_labels_run_on_the_machine_made_for_them(api, cloud, stage):
    """The Node of a provisioned Machine carries the labels the pool planned with, so the pods it was made
    for can land (the limit stops a pool whose Nodes lacked them from launching without end)."""
    pool = stage.pool("labels", limits={"machines": 2})
    selector = {provisioning_names.CAPACITY_TYPE_LABEL: "on-demand", provisioning_names.INSTANCE_FAMILY_LABEL: "c5",
                provisioning_names.INSTANCE_CPU_LABEL: "8"}
    app = stage.deployment(pool, 2, node_selector=selector)
    workloads.wait_running(api, stage.namespace, app, 2, timeout=120)
    assert len(live_machines(pool_machines(api, pool))) == 1, explain(api, pool)


@needs_provisioning
def test_a_pool_never_goes_past_its_limits(api, cloud, stage):
    pool = stage.pool("limits", limits={"machines": 2, "cpu": "100"})
    per_node = pods_per_node(cloud, api, pool)
    app = stage.deployment(pool, 3 * per_node)

    def filled():
        pods = workloads.deployment_pods(api, stage.namespace, app)
        return len(workloads.running(pods)) == 2 * per_node and len(pods) == 3 * per_node
    wait_for(filled, f"{2 * per_node} pods Running on the two Machines the limit allows", timeout=SETTLE, interval=0.5)
    # Rounds after the pool reached its limit, with pods still pending, made no Machine.
    seen = provisioning_status(api, pool).get("lastRound")
    wait_for(lambda: provisioning_status(api, pool).get("lastRound") not in (None, seen),
             "another provisioning round", timeout=150, interval=0.5)
    machines = live_machines(pool_machines(api, pool))
    assert len(machines) == 2, explain(api, pool)
    assert_one_instance_each(cloud, pool, machines)
    shown = provisioning_status(api, pool)
    assert (shown["limits"]["machines"], shown["resources"]["machines"]) == (2, 2), shown


@needs_provisioning
def test_zone_pinned_pods_get_one_machine_each_while_their_machines_launch(api, cloud, cluster, stage):
    """Two bare pods, each with a nodeSelector for one zone, in a pool of two zones that allows types of
    both architectures: one Machine each, however many rounds run while those Machines launch and boot
    (kubelets held), and never a second instance for either pod."""
    name = unique("pinned")
    subnets = [pool_subnet(cloud, zone) for zone in ZONES]
    both = [{"key": TYPE_KEY, "operator": "In", "values": [INSTANCE_TYPE, "c6g.2xlarge"]},
            {"key": provisioning_names.ARCH_LABEL, "operator": "In", "values": ["amd64", "arm64"]}]
    api.create(POOLS, provisioning_pool_manifest(name, subnets, requirements=both,
                                                 disruption={"consolidateAfter": "Never"}))
    stage.pools.append(name)
    pods = []
    with kubelets_held(cluster):
        for zone in ZONES:
            pod = unique("pinned")
            api.create(f"/api/v1/namespaces/{stage.namespace}/pods", {
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod, "labels": {"app": pod}},
                "spec": {"nodeSelector": {"e2e-pool": name, ZONE_KEY: zone}, "terminationGracePeriodSeconds": 0,
                         "containers": [{"name": "app", "image": workloads.IMAGE,
                                         "resources": {"requests": POD, "limits": POD}}]}})
            pods.append(pod)
        wait_for(lambda: len(pool_machines(api, name)) == 2, "a Machine for each pod", timeout=120, interval=0.5)
        # Rounds run every half second while the Machines launch and their Nodes are held back.
        for _ in range(2):
            seen = provisioning_status(api, name).get("lastRound")
            wait_for(lambda s=seen: provisioning_status(api, name).get("lastRound") not in (None, s),
                     "another provisioning round", timeout=120, interval=0.5)
        assert len(pool_machines(api, name)) == 2, explain(api, name)
    for pod in pods:
        wait_for(lambda p=pod: (api.get(f"/api/v1/namespaces/{stage.namespace}/pods/{p}").get("status") or {})
                 .get("phase") == "Running", f"pod {pod} Running", timeout=SETTLE, interval=0.5)
    machines = pool_machines(api, name)
    assert len(machines) == 2, explain(api, name)
    assert {m["status"]["zone"] for m in machines} == set(ZONES)
    assert_one_instance_each(cloud, name, machines)
    assert len(pool_instance_tags(cloud, name)) == 2
