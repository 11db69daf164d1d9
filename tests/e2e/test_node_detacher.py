"""node-detacher through the real Metacontroller, API server and (moto) AWS."""
from __future__ import annotations

import time

import pytest

from devcluster import fleet, kwok
from devcluster.api import wait_for


pytestmark = pytest.mark.e2e

EXCLUDE_LABEL = "node.kubernetes.io/exclude-from-external-load-balancers"
DETACHING = "node-detacher.variant.run/detaching"
PRIORITY = "node-detacher.variant.run/deletion-priority"
CONDITION = "NodeBeingDetached"
REJOIN = ("nodewarden.io/rejoin", "nodewarden.io/rejoin-at")


def _condition(node: dict, kind: str) -> dict | None:
    return next((c for c in node.get("status", {}).get("conditions") or [] if c["type"] == kind), None)


def _detached(world, name: str) -> bool:
    node = world.node(name)
    condition = _condition(node, CONDITION) or {}
    return (
        node["metadata"].get("labels", {}).get(EXCLUDE_LABEL) is not None
        and node["metadata"].get("annotations", {}).get(DETACHING) == "true"
        and condition.get("status") == "True"
    )


def test_cordon_detaches_the_node_and_uncordon_brings_it_back(make_world):
    world = make_world(count=2)
    leaving, staying = sorted(world.nodes)
    before = {name: world.node(name)["metadata"] for name in world.nodes}
    assert world.in_target_group(leaving) and world.in_classic_elb(leaving)

    world.cordon(leaving)
    wait_for(lambda: not world.in_target_group(leaving), "instance out of the target group", timeout=20)
    wait_for(lambda: not world.in_classic_elb(leaving), "instance out of the classic ELB", timeout=20)
    wait_for(lambda: _detached(world, leaving), "exclude label, detaching annotation and condition", timeout=20)
    assert world.attachment(leaving) is not None
    # Only the cordoned node left.
    assert world.in_target_group(staying) and world.in_classic_elb(staying)
    assert EXCLUDE_LABEL not in world.node(staying)["metadata"].get("labels", {})

    world.cordon(leaving, unschedulable=False)
    wait_for(lambda: world.in_target_group(leaving), "instance back in the target group", timeout=20)
    wait_for(lambda: world.in_classic_elb(leaving), "instance back in the classic ELB", timeout=20)

    def as_before(*kept) -> bool:
        meta = world.node(leaving)["metadata"]
        condition = _condition(world.node(leaving), CONDITION)
        annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in kept}
        return (meta.get("labels") == before[leaving].get("labels")
                and annotations == (before[leaving].get("annotations") or {})
                and (condition is None or condition["status"] != "True"))

    wait_for(lambda: as_before(*REJOIN), "labels, annotations and condition as before the cordon, but the rejoin's",
             timeout=20)
    port = {p for i, p in fleet.targets(world.aws, world.target_group_arn) if i == world.nodes[leaving]}
    assert port == {30080}, "re-registered on the port it was registered with"
    # A serving node keeps no Attachment: the one of its detach goes once it is back.
    wait_for(lambda: world.attachment(leaving) is None, "the Attachment of the detach gone", timeout=20)
    # Registered once more when no deregistration sent before the re-attach can still land (45 s on), and
    # rejoin-at kept until those registrations have landed too (45 s more).
    wait_for(as_before, "the rejoin done and its annotations gone", timeout=120, interval=0.5)
    assert world.in_target_group(leaving) and world.in_classic_elb(leaving)


def test_uncordon_right_after_the_deregistration_brings_the_node_back(make_world):
    """An uncordon may reach the API server before node-detacher's record of
    the deregistration lands on the Node (Metacontroller's update then fails
    on the changed resourceVersion); the instance must come back all the same."""
    world = make_world(count=1)
    (node,) = world.nodes
    world.cordon(node)
    wait_for(lambda: not world.in_target_group(node), "instance out of the target group",
             timeout=20, interval=0.005)
    world.cordon(node, unschedulable=False)
    wait_for(lambda: world.in_target_group(node) and world.in_classic_elb(node),
             "instance back in the target group and the classic ELB", timeout=10)


def _pod(name: str, node: str, priority: int | None) -> dict:
    annotations = {PRIORITY: str(priority)} if priority is not None else {}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"nodeName": node,
                 "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]},
    }


def test_priority_pods_are_evicted_highest_priority_first(make_world, api, namespace, evictions):
    """kwok runs the pods (Running, Ready) and deletes each one as soon as it is evicted."""
    world = make_world(count=1)
    (node,) = world.nodes
    pods = {"fluentd": 1, "istio-a": 10, "istio-b": 10, "app": 5, "no-priority": None}
    for name, priority in pods.items():
        api.create(f"/api/v1/namespaces/{namespace}/pods", _pod(name, node, priority))
    path = f"/api/v1/namespaces/{namespace}/pods"
    wait_for(lambda: all(p["status"].get("phase") == "Running" for p in api.get(path)["items"]) and
             len(api.get(path)["items"]) == len(pods), "kwok runs the pods", timeout=30)
    marks = evictions(node)

    world.cordon(node)
    prioritized = {f"{namespace}/{n}" for n, p in pods.items() if p is not None}
    wait_for(lambda: prioritized <= set(marks.marked), "every prioritized pod evicted", timeout=60)

    order = [marks.marked.index(f"{namespace}/{n}") for n in ("istio-a", "istio-b", "app", "fluentd")]
    assert max(order[:2]) < order[2] < order[3], f"eviction order was {marks.marked}"
    wait_for(lambda: all(api.get_or_none(f"{path}/{n}") is None for n, p in pods.items() if p is not None),
             "kwok deleted the evicted pods", timeout=30)
    # A pod without a priority is left to whatever drains the node.
    assert f"{namespace}/no-priority" not in marks.marked
    assert api.get_or_none(f"{path}/no-priority") is not None


def test_a_deleted_node_leaves_its_load_balancers_and_no_attachment_behind(make_world, api):
    world = make_world(count=1)
    (node,) = world.nodes
    assert world.attachment(node) is None, "a serving node has none"

    api.delete(f"/api/v1/nodes/{node}")
    wait_for(lambda: api.get_or_none(f"/api/v1/nodes/{node}") is None, "Node gone", timeout=30)
    wait_for(lambda: world.attachment(node) is None, "Attachment gone", timeout=30)
    # The node left its load balancers on the way out.
    assert not world.in_target_group(node)


def _daemonset_pod(name: str, node: str, ds: dict, finalizers=()) -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "finalizers": list(finalizers),
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": ds["metadata"]["name"],
                                          "uid": ds["metadata"]["uid"], "controller": True}]},
        "spec": {"nodeName": node, "containers": [{"name": "envoy", "image": "registry.k8s.io/pause:3.10"}]},
    }


def test_terminating_ingress_daemonset_pod_detaches_its_node_until_the_replacement_is_ready(make_world, api, namespace):
    """The node-detacher-pods decorator: a managed DaemonSet's pod starts terminating,
    its node leaves the load balancers; the replacement turns Ready, the node is back.
    No daemonset controller runs here, so the test plays it; kwok plays the kubelet,
    and is kept off the node while the replacement must stay not Ready."""
    world = make_world(count=1)
    (node,) = world.nodes
    ds = api.create(f"/apis/apps/v1/namespaces/{namespace}/daemonsets", {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "contour", "annotations": {"node-detacher.variant.run/managed-by": "node-detacher"}},
        "spec": {"selector": {"matchLabels": {"app": "contour"}},
                 "template": {"metadata": {"labels": {"app": "contour"}},
                              "spec": {"containers": [{"name": "envoy", "image": "registry.k8s.io/pause:3.10"}]}}},
    })
    hold = "e2e.nodewarden.io/hold"  # keeps the old pod terminating: kwok's delete cannot finish it
    pods = f"/api/v1/namespaces/{namespace}/pods"
    api.create(pods, _daemonset_pod("contour-old", node, ds, finalizers=[hold]))
    try:
        api.delete(f"{pods}/contour-old")
        wait_for(lambda: not world.in_target_group(node), "node out of the target group", timeout=30)
        wait_for(lambda: not world.in_classic_elb(node), "node out of the classic ELB", timeout=20)
        assert world.node(node)["metadata"]["annotations"].get("nodewarden.io/detach-for-pod", "").startswith(
            f"{namespace}/contour/")

        # kwok would make the replacement Ready at once: out of its hands, it stays Pending.
        kwok.release(api, node)
        kwok.wait_released(api, node)  # else kwok may still play the replacement it sees first
        api.create(pods, _daemonset_pod("contour-new", node, ds))
        time.sleep(1.0)  # give the hooks time to (wrongly) re-attach on a pod that is not Ready
        assert not world.in_target_group(node), (
            f"re-attached before the replacement was Ready: {api.get(f'{pods}/contour-new').get('status')}")
        assert api.get(f"{pods}/contour-new")["status"].get("phase") == "Pending"
        kwok.manage(api, node)  # and kwok runs it: Running, Ready
        wait_for(lambda: world.in_target_group(node) and world.in_classic_elb(node),
                 "node back in its load balancers", timeout=30)
        wait_for(lambda: "nodewarden.io/detach-for-pod" not in (world.node(node)["metadata"].get("annotations") or {}),
                 "the pod's detach request withdrawn", timeout=10)
    finally:
        api.patch(f"{pods}/contour-old", {"metadata": {"finalizers": []}})


def test_a_node_in_several_target_groups_on_one_port_leaves_every_one(make_world):
    """Metacontroller merges a child's list of objects by a ``port`` field; targets on one port must survive it."""
    from devcluster.cluster import CLUSTER_NAME

    world = make_world(count=1)
    (name,) = world.nodes
    instance = world.nodes[name]
    extra = [fleet.create_target_group(world.aws, f"{name}-x{i}", CLUSTER_NAME) for i in range(2)]
    for arn in extra:
        world.aws.elbv2.register_targets(TargetGroupArn=arn, Targets=[{"Id": instance, "Port": fleet.NODE_PORT}])
    groups = [world.target_group_arn, *extra]

    world.cordon(name)
    for arn in groups:
        wait_for(lambda a=arn: instance not in {i for i, _ in fleet.targets(world.aws, a)},
                 f"instance out of {arn.rsplit('/', 2)[-2]}", timeout=30)
