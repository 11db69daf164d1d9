"""End-to-end fixtures: one real local control plane for the whole session.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler, Metacontroller,
kwok, moto and the hook server start once (devcluster.Cluster) and every e2e
test shares them; each test makes its own Nodes (which kwok keeps Ready),
instances and target group.

The binaries come from `make controlplane-bins`. Without them the e2e tests
skip, unless NODEWARDEN_E2E=required (CI), where a missing binary fails.
"""
from __future__ import annotations

import os
import shutil
import threading
import uuid
from dataclasses import dataclass, field

import pytest

from devcluster import Cluster, Layout
from devcluster import fleet
from devcluster.api import AdminApi, wait_for
from devcluster.cluster import CLUSTER_NAME
from devcluster.layout import REPO

CLASSIC_ELB = "e2e-classic"
ATTACHMENTS = "/apis/nodewarden.io/v1alpha1/namespaces/nodewarden-system/attachments"
# moto meters calls with AWS's token buckets and the hooks keep to their share of them, as against AWS,
# unless NODEWARDEN_E2E_AWS_THROTTLING=off. Each test's target groups go with it (_target_groups_go): the
# hooks read every target group of the cluster on each detach, uncached here (below).
AWS_THROTTLING = os.environ.get("NODEWARDEN_E2E_AWS_THROTTLING", "on") != "off"

# The hook server's settings for the tests: each test's new target group must
# be seen at once (a detach looks its node's load balancers up as it begins),
# and pod shutdown groups follow each other quickly.
HOOK_ENV = {
    "NODEWARDEN_DISCOVERY_CACHE_SECONDS": "0",
    **({} if AWS_THROTTLING else {"NODEWARDEN_AWS_RATE_SHARE": "0"}),
    "NODEWARDEN_DRAIN_POLL_SECONDS": "0.5",
    # Machines: quick polls, and waits bounded in seconds rather than minutes.
    "NODEWARDEN_MACHINE_POLL_SECONDS": "0.5",
    "NODEWARDEN_MACHINE_DETACH_WAIT_SECONDS": "30",
    "NODEWARDEN_MACHINE_LAUNCH_VISIBILITY_SECONDS": "2",
    "NODEWARDEN_MACHINE_VOLUME_DETACH_TIMEOUT_SECONDS": "30",
    "NODEWARDEN_LEAKED_INSTANCE_CHECK_SECONDS": "5",
}


def _workdir() -> Layout:
    """A directory of this test process's own: engineers and CI may run
    several sessions (and pytest-xdist workers) in one checkout at once."""
    root = REPO / ".local" / "e2e"
    root.mkdir(parents=True, exist_ok=True)
    for old in root.iterdir():  # stacks of finished sessions; their logs were for them
        if old.name.isdigit() and not _alive(int(old.name)):
            shutil.rmtree(old, ignore_errors=True)
    return Layout(workdir=root / str(os.getpid()))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


@pytest.fixture(scope="session")
def cluster():
    layout = _workdir()
    missing = layout.missing_binaries()
    if missing:
        message = (f"control-plane binaries missing in {layout.bin_dir} "
                   f"({', '.join(missing)}); run `make controlplane-bins`")
        if os.environ.get("NODEWARDEN_E2E") == "required":
            pytest.fail(message)
        pytest.skip(message)
    with Cluster(layout, port_mode="dynamic", hook_env=HOOK_ENV, aws_throttling=AWS_THROTTLING) as running:
        fleet.create_classic_elb(fleet.Aws(running.aws_env()), CLASSIC_ELB, CLUSTER_NAME)
        yield running


@pytest.fixture(autouse=True)
def _components_alive(request):
    """Fail a test at once, with the log, if a component died before it."""
    if "cluster" in request.fixturenames:
        request.getfixturevalue("cluster").check_running()


@pytest.fixture(autouse=True)
def _target_groups_go(request):
    """Delete the target groups a test made once it is over, so the next test's detaches read no more of them
    than a cluster of its size has."""
    if "cluster" not in request.fixturenames:
        yield
        return
    aws = request.getfixturevalue("cloud")
    before = set(fleet.target_group_arns(aws))
    yield
    for arn in set(fleet.target_group_arns(aws)) - before:
        fleet.delete_target_group(aws, arn)


@pytest.fixture(scope="session")
def door(cluster):
    """A hook server that takes only authenticated HTTPS, as the stack runs its own on Metacontroller
    v4.16+: that one where the stack authenticates, a second one beside it where it cannot."""
    return cluster.authenticated_hook_server()


@pytest.fixture(scope="session")
def api(cluster) -> AdminApi:
    return AdminApi(cluster.kubeconfig)


@pytest.fixture(scope="session")
def cloud(cluster) -> fleet.Aws:
    return fleet.Aws(cluster.aws_env())


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


@dataclass
class World:
    """Nodes of one test, their instances, and the load balancers holding them."""

    api: AdminApi
    aws: fleet.Aws
    nodes: dict[str, str]  # node name -> instance id
    target_group_arn: str
    classic_elb: str = CLASSIC_ELB

    def node(self, name: str) -> dict:
        return self.api.get(f"/api/v1/nodes/{name}")

    def attachment(self, name: str) -> dict | None:
        return self.api.get_or_none(f"{ATTACHMENTS}/{name}")

    def in_target_group(self, name: str) -> bool:
        return any(i == self.nodes[name] for i, _ in fleet.targets(self.aws, self.target_group_arn))

    def in_classic_elb(self, name: str) -> bool:
        return self.nodes[name] in fleet.elb_instances(self.aws, self.classic_elb)

    def cordon(self, name: str, unschedulable: bool = True) -> None:
        self.api.patch(f"/api/v1/nodes/{name}", {"spec": {"unschedulable": unschedulable}})


@pytest.fixture
def make_world(api, cloud):
    """Create Nodes (kwok's) backed by fresh moto instances in a new target group and the classic ELB."""
    created: list[str] = []

    def build(count: int = 1) -> World:
        prefix = unique("e2e")
        group = fleet.create_fleet(cloud, count=count, target_group=prefix,
                                   classic_elb=CLASSIC_ELB, cluster_name=CLUSTER_NAME)
        nodes = {}
        for index, instance_id in enumerate(group.instance_ids):
            name = f"{prefix}-{index}"
            api.create("/api/v1/nodes", fleet.node_manifest(name, instance_id))
            created.append(name)
            nodes[name] = instance_id
        world = World(api, cloud, nodes, group.target_group_arn)
        for name in nodes:  # the Node decorator has seen each Node (its finalizer)
            wait_for(lambda n=name: fleet.node_seen(world.node(n)), f"the node decorator's finalizer on {name}",
                     timeout=30)
        return world

    yield build
    for name in created:
        api.delete(f"/api/v1/nodes/{name}")


@dataclass
class Evictions:
    """The order in which one node's pods were marked for deletion (the eviction order).

    kwok plays the node's kubelet and deletes a marked pod at once, so the marks
    are read from a watch, which sees every change in order, not from polls.
    """

    api: AdminApi
    node: str
    marked: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> "Evictions":
        pods = self.api.get("/api/v1/pods", params={"fieldSelector": f"spec.nodeName={self.node}"})
        self._version = pods["metadata"]["resourceVersion"]
        self._thread = threading.Thread(target=self._run, name=f"evictions-{self.node}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            params = {"fieldSelector": f"spec.nodeName={self.node}", "resourceVersion": self._version}
            for event in self.api.watch("/api/v1/pods", params=params, seconds=2):
                pod = event["object"]
                meta = pod["metadata"]
                self._version = meta.get("resourceVersion", self._version)
                key = f"{meta.get('namespace')}/{meta.get('name')}"
                marked = event["type"] == "DELETED" or meta.get("deletionTimestamp")
                if event["type"] in ("MODIFIED", "DELETED") and marked and key not in self.marked:
                    self.marked.append(key)


@pytest.fixture
def evictions(api):
    started: list[Evictions] = []

    def start(node: str) -> Evictions:
        recorder = Evictions(api, node).start()
        started.append(recorder)
        return recorder

    yield start
    for recorder in started:
        recorder.stop()


@pytest.fixture
def namespace(api):
    name = unique("e2e")
    api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    # Pods need the namespace's default ServiceAccount, which a controller makes.
    wait_for(lambda: api.get_or_none(f"/api/v1/namespaces/{name}/serviceaccounts/default"),
             f"default ServiceAccount in {name}", timeout=30)
    yield name
    api.delete(f"/api/v1/namespaces/{name}")
