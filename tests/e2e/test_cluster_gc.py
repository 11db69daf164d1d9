"""cluster-gc end to end: CAPA's CRDs, Metacontroller's finalizer, moto's resources.

CAPA's CRDs for AWSCluster and AWSManagedControlPlane come from CAPA's Go
module in the module cache (hack/crds/module-dir.sh, release pinned in
hack/crds/go.mod), never a copy. A deleted AWSCluster stays, held by
Metacontroller's finalizer, until moto shows its load balancers, target
groups and security groups gone; then it is gone. No CAPA controller runs:
only Metacontroller's finalizer holds the objects.

The zero-orphan proof: one resource of each kind a cluster's controllers
make, ``nodewarden gc plan`` first (order and reasons), the AWSCluster
deleted and finalized, then ``nodewarden gc audit`` finds nothing tagged for
the cluster but what the plan kept.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from devcluster.api import ApiError, wait_for
from devcluster.layout import REPO
from devcluster.manifests import CAPA_CRD_FILES
from hooks.teardown_names import KEEP_CAPA, KEEP_NOT_OWNED
from worlds import cluster_gc as w

pytestmark = pytest.mark.e2e

FINALIZER = "metacontroller.io/decoratorcontroller-cluster-gc"
LAST_ERROR = "cluster-gc.nodewarden.io/last-error"
GC = "aws.cluster.x-k8s.io/external-resource-gc"
TASKS = "aws.cluster.x-k8s.io/external-resource-tasks-gc"


def aws_clusters(namespace: str) -> str:
    return f"/apis/infrastructure.cluster.x-k8s.io/v1beta2/namespaces/{namespace}/awsclusters"


def control_planes(namespace: str) -> str:
    return f"/apis/controlplane.cluster.x-k8s.io/v1beta2/namespaces/{namespace}/awsmanagedcontrolplanes"


def aws_cluster_manifest(name: str, cluster_name: str, annotations: dict | None = None) -> dict:
    return {
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
        "kind": "AWSCluster",
        "metadata": {"name": name, "labels": {"cluster.x-k8s.io/cluster-name": cluster_name},
                     "annotations": dict(annotations or {})},
        "spec": {"region": w.REGION},
    }


@pytest.fixture(scope="module")
def capa(cluster, api):
    """CAPA's CRDs (the launcher installs them before Metacontroller starts) and cluster-gc running on them."""
    for name in CAPA_CRD_FILES:
        assert api.get_or_none(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"), name
    # A probe object shows when cluster-gc's finalizer is added.
    probe_ns = "default"
    probe = aws_cluster_manifest(f"gc-probe-{int(time.time())}", "gc-probe", {GC: "false"})
    api.create(aws_clusters(probe_ns), probe)
    path = f"{aws_clusters(probe_ns)}/{probe['metadata']['name']}"
    wait_for(lambda: FINALIZER in (api.get(path)["metadata"].get("finalizers") or []),
             "Metacontroller to start cluster-gc on AWSCluster", timeout=60)
    api.delete(path)
    wait_for(lambda: api.get_or_none(path) is None, "the opted-out probe to go", timeout=30)
    yield


@pytest.fixture
def cloud_client(cloud):
    return lambda service: getattr(cloud, service)


def _annotations(api, path: str) -> dict:
    obj = api.get_or_none(path)
    return (obj or {}).get("metadata", {}).get("annotations") or {}


def _events(api, namespace: str, name: str) -> list[dict]:
    items = api.get(f"/api/v1/namespaces/{namespace}/events",
                    params={"fieldSelector": f"involvedObject.name={name}"})["items"]
    return [e for e in items if e.get("source", {}).get("component") == "cluster-gc"]  # the controller sends them


def _prefix(namespace: str, letter: str) -> str:
    """Resource names unique in the session's moto (load balancer names are per region)."""
    return f"{namespace.rsplit('-', 1)[-1]}{letter}"


def test_a_deleted_aws_cluster_is_held_until_its_resources_are_gone(capa, api, cloud, cloud_client, namespace):
    cluster_name = f"{namespace}-wl"
    net = w.network(cloud.ec2)
    made = w.build_cluster(cloud_client, net, _prefix(namespace, "g"), w.cluster_tags(cluster_name), load_balancers=2, classic_elbs=1,
                           target_groups=2, security_groups=2)
    # A target group of the cluster still used by a listener of a load balancer
    # nobody collects: AWS (and moto) refuse to delete it while that lasts.
    blocked = w.build_cluster(cloud_client, net, _prefix(namespace, "h"), w.cluster_tags(cluster_name), target_groups=1)
    foreign = cloud.elbv2.create_load_balancer(Name=f"{namespace}-foreign"[:32], Subnets=net.subnets,
                                               Type="network")["LoadBalancers"][0]
    listener = cloud.elbv2.create_listener(
        LoadBalancerArn=foreign["LoadBalancerArn"], Protocol="TCP", Port=80,
        DefaultActions=[{"Type": "forward", "TargetGroupArn": blocked.target_groups[0]}],
    )["Listeners"][0]["ListenerArn"]
    kept = w.build_cluster(cloud_client, net, _prefix(namespace, "k"), w.cluster_tags(f"{cluster_name}-other"), load_balancers=1,
                           security_groups=1)

    api.create(aws_clusters(namespace), aws_cluster_manifest("infra", cluster_name))
    path = f"{aws_clusters(namespace)}/infra"
    wait_for(lambda: FINALIZER in (api.get(path)["metadata"].get("finalizers") or []), "the finalizer", timeout=30)
    before = api.get(path)
    assert "status" not in before or before["status"] == {}  # sync never writes CAPA's status

    api.delete(path)
    # Held: the object stays while the blocked target group cannot go.
    held = wait_for(lambda: "ResourceInUse" in _annotations(api, path).get(LAST_ERROR, ""),
                    "cluster-gc to report the target group in use", timeout=60)
    obj = api.get(path)
    assert obj["metadata"].get("deletionTimestamp") and FINALIZER in obj["metadata"]["finalizers"]
    assert held
    now = w.existing(cloud_client, made)
    assert not now.load_balancers and not now.classic_elbs and not now.target_groups
    # Security groups wait for every target group (task order).
    assert now.security_groups == made.security_groups
    assert w.existing(cloud_client, blocked) == blocked
    # Events are sent after the hook answers, off its request path: they may trail the annotation.
    wait_for(lambda: {"ExternalResourcesDeleted", "ExternalResourceGCRetrying"} <=
             {e["reason"] for e in _events(api, namespace, "infra")}, "cluster-gc's Events", timeout=30)

    cloud.elbv2.delete_listener(ListenerArn=listener)  # whatever held it lets go
    wait_for(lambda: api.get_or_none(path) is None, "the AWSCluster to be gone", timeout=120, interval=0.5)
    assert w.existing(cloud_client, made).count() == 0
    assert w.existing(cloud_client, blocked).count() == 0
    assert w.existing(cloud_client, kept) == kept


def test_managed_control_plane_collects_its_eks_cluster(capa, api, cloud, cloud_client, namespace):
    eks_name = f"{namespace}_eks"
    net = w.network(cloud.ec2)
    made = w.build_cluster(cloud_client, net, _prefix(namespace, "e"), w.cluster_tags(eks_name), load_balancers=1, target_groups=1,
                           security_groups=1)
    manifest = {
        "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2",
        "kind": "AWSManagedControlPlane",
        "metadata": {"name": "cp", "labels": {"cluster.x-k8s.io/cluster-name": "capi-name"}},
        "spec": {"region": w.REGION, "eksClusterName": eks_name},
    }
    api.create(control_planes(namespace), manifest)
    path = f"{control_planes(namespace)}/cp"
    wait_for(lambda: FINALIZER in (api.get(path)["metadata"].get("finalizers") or []), "the finalizer", timeout=30)
    api.delete(path)
    wait_for(lambda: api.get_or_none(path) is None, "the AWSManagedControlPlane to be gone", timeout=60,
             interval=0.5)
    assert w.existing(cloud_client, made).count() == 0


def _cli(cluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hooks.cli", "gc", *args, "--kubeconfig", str(cluster.kubeconfig)],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )


def test_cli_opt_out_and_task_selection_through_the_api(capa, api, cluster, cloud, cloud_client, namespace):
    cluster_name = f"{namespace}-cli"
    net = w.network(cloud.ec2)
    made = w.build_cluster(cloud_client, net, _prefix(namespace, "c"), w.cluster_tags(cluster_name), load_balancers=1,
                           security_groups=1)
    api.create(aws_clusters(namespace), aws_cluster_manifest("infra-cli", cluster_name))
    path = f"{aws_clusters(namespace)}/infra-cli"

    # No Cluster API Cluster here: the CLI finds the AWSCluster by its cluster-name label.
    result = _cli(cluster, "disable", "--cluster-name", cluster_name, "--namespace", namespace)
    assert result.returncode == 0, result.stderr
    assert _annotations(api, path)[GC] == "false"
    result = _cli(cluster, "enable", "--cluster-name", cluster_name, "--namespace", namespace)
    assert result.returncode == 0 and _annotations(api, path)[GC] == "true"
    result = _cli(cluster, "configure", "--cluster-name", cluster_name, "--namespace", namespace,
                  "--gc-task", "load-balancer")
    assert result.returncode == 0 and _annotations(api, path)[TASKS] == "load-balancer"
    missing = _cli(cluster, "enable", "--cluster-name", "no-such-cluster", "--namespace", namespace)
    assert missing.returncode == 1 and "no Cluster, AWSCluster or AWSManagedControlPlane" in missing.stderr

    wait_for(lambda: FINALIZER in (api.get(path)["metadata"].get("finalizers") or []), "the finalizer", timeout=30)
    api.delete(path)
    wait_for(lambda: api.get_or_none(path) is None, "the AWSCluster to be gone", timeout=60, interval=0.5)
    # Only the selected task ran.
    assert w.existing(cloud_client, made) == w.Made(security_groups=made.security_groups)


def test_opted_out_cluster_goes_at_once_and_leaves_its_resources(capa, api, cloud, cloud_client, namespace):
    cluster_name = f"{namespace}-out"
    net = w.network(cloud.ec2)
    made = w.build_cluster(cloud_client, net, _prefix(namespace, "o"), w.cluster_tags(cluster_name), load_balancers=1,
                           security_groups=1)
    api.create(aws_clusters(namespace), aws_cluster_manifest("infra-out", cluster_name, {GC: "false"}))
    path = f"{aws_clusters(namespace)}/infra-out"
    wait_for(lambda: FINALIZER in (api.get(path)["metadata"].get("finalizers") or []), "the finalizer", timeout=30)
    api.delete(path)
    wait_for(lambda: api.get_or_none(path) is None, "the AWSCluster to be gone", timeout=30, interval=0.2)
    assert w.existing(cloud_client, made) == made


def test_an_unreadable_opt_out_value_blocks_deletion_until_fixed(capa, api, cloud_client, namespace):
    api.create(aws_clusters(namespace), aws_cluster_manifest("infra-bad", f"{namespace}-bad", {GC: "maybe"}))
    path = f"{aws_clusters(namespace)}/infra-bad"
    wait_for(lambda: FINALIZER in (api.get(path)["metadata"].get("finalizers") or []), "the finalizer", timeout=30)
    api.delete(path)
    wait_for(lambda: "is not a boolean" in _annotations(api, path).get(LAST_ERROR, ""), "the blocked annotation",
             timeout=30)
    wait_for(lambda: "ExternalResourceGCBlocked" in {e["reason"] for e in _events(api, namespace, "infra-bad")},
             "the ExternalResourceGCBlocked Event", timeout=30)
    time.sleep(2)
    assert api.get_or_none(path) is not None  # still held
    try:
        api.patch(path, {"metadata": {"annotations": {GC: "false"}}})
    except ApiError as exc:  # already gone: nothing to fix
        assert exc.status == 404
    wait_for(lambda: api.get_or_none(path) is None, "the AWSCluster to be gone", timeout=30, interval=0.2)


# ------------------------------------------------- plan, collection, audit

ALL_TASKS = "instance,load-balancer,target-group,network-interface,elastic-ip,security-group,volume"


def _nodewarden(cluster, *args: str) -> subprocess.CompletedProcess:
    """The CLI as a user runs it: the stack's kubeconfig, moto as the AWS endpoint."""
    return subprocess.run(
        [sys.executable, "-m", "hooks.cli", "gc", *args], cwd=REPO, capture_output=True, text=True, timeout=60,
        env={**os.environ, **cluster.aws_env(), "KUBECONFIG": str(cluster.kubeconfig)},
    )


def test_plan_then_collection_leaves_nothing_but_what_the_plan_keeps(capa, api, cluster, cloud, cloud_client,
                                                                     namespace, tmp_path):
    """One resource of each kind the cluster's controllers make, and three that are not cluster-gc's to delete.

    ``gc plan`` says what goes, in order, and what stays and why; after the
    AWSCluster is finalized, ``gc audit`` (tagging API and describe calls)
    finds nothing tagged for the cluster but what the plan kept.
    """
    name = f"{namespace}-zero"
    net = w.network(cloud.ec2)
    # The cloud controller's ELBv2 and classic load balancers, target group and security group; a CSI
    # volume (the volume task is on below); a nodewarden Machine's running instance; an available ENI
    # the VPC CNI left; an Elastic IP tagged for the cluster.
    made = w.build_cluster(cloud_client, net, _prefix(namespace, "z"), w.cluster_tags(name), load_balancers=1,
                           classic_elbs=1, target_groups=1, security_groups=1, volumes=1, instances=1,
                           network_interfaces=1, elastic_ips=1,
                           volume_tags=w.cluster_tags(name, service=None) + [{"Key": "CSIVolumeName",
                                                                              "Value": "pvc-data"}])
    # Not cluster-gc's: CAPA's own security group, one tagged shared, and another cluster's.
    capa_tag = {"Key": f"sigs.k8s.io/cluster-api-provider-aws/cluster/{name}", "Value": "owned"}
    capa_sg, shared_sg, other_sg = (
        w.build_cluster(cloud_client, net, _prefix(namespace, letter), w.cluster_tags(name), security_groups=1,
                        sg_tags=sg_tags).security_groups[0]
        for letter, sg_tags in (("c", w.cluster_tags(name, service=None) + [capa_tag]),
                                ("s", [{"Key": f"kubernetes.io/cluster/{name}", "Value": "shared"}]),
                                ("o", w.cluster_tags(f"{name}-other", service=None))))

    api.create(aws_clusters(namespace), aws_cluster_manifest("infra-zero", name, {TASKS: ALL_TASKS}))
    path = f"{aws_clusters(namespace)}/infra-zero"
    wait_for(lambda: FINALIZER in (api.get(path)["metadata"].get("finalizers") or []), "the finalizer", timeout=30)

    # The plan: read from the AWSCluster (its tasks annotation, region), changing nothing.
    planned = _nodewarden(cluster, "plan", name, "--namespace", namespace, "--output", "json")
    assert planned.returncode == 0, planned.stderr
    plan = json.loads(planned.stdout)
    assert plan["tasksFrom"] == "annotation" and plan["clusterObject"] == f"AWSCluster {namespace}/infra-zero"
    assert plan["region"] == w.REGION and ",".join(plan["tasks"]) == ALL_TASKS
    assert [(r["kind"], r["id"]) for r in plan["delete"]] == [
        ("instance", made.instances[0]),
        ("classic-load-balancer", made.classic_elbs[0]),
        ("elbv2-load-balancer", made.load_balancers[0]),
        ("target-group", made.target_groups[0]),
        ("network-interface", made.network_interfaces[0]),
        ("elastic-ip", made.elastic_ips[0]),
        ("security-group", made.security_groups[0]),
        ("volume", made.volumes[0]),
    ]
    assert {r["id"]: r["reason"] for r in plan["keep"]} == {capa_sg: KEEP_CAPA, shared_sg: KEEP_NOT_OWNED}
    text = _nodewarden(cluster, "plan", name, "--namespace", namespace)
    assert text.returncode == 0 and f"from {TASKS} on AWSCluster {namespace}/infra-zero" in text.stdout
    assert w.existing(cloud_client, made) == made  # the plan deleted nothing
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(planned.stdout)

    started = time.monotonic()
    api.delete(path)
    wait_for(lambda: api.get_or_none(path) is None, "the AWSCluster to be finalized", timeout=60, interval=0.2)
    seconds = time.monotonic() - started

    audited = _nodewarden(cluster, "audit", name, "--expect-kept", str(plan_file), "--output", "json")
    report = json.loads(audited.stdout)
    assert audited.returncode == 0, (report["leftovers"], audited.stderr)
    assert report["leftovers"] == [] and report["clean"] is True
    assert {r["id"]: r["reason"] for r in report["kept"]} == {capa_sg: KEEP_CAPA, shared_sg: KEEP_NOT_OWNED}
    # moto, like AWS for a while, still lists the terminated instance in the tagging API: gone, not a leftover.
    assert {r["id"] for r in report["goneButListedByTaggingApi"]} <= set(made.instances)
    others = cloud.ec2.describe_security_groups(GroupIds=[other_sg])["SecurityGroups"]
    assert [g["GroupId"] for g in others] == [other_sg]  # another cluster's: untouched, and no business of the audit
    kinds = {r["kind"] for r in plan["delete"]}
    print(f"\ncluster-gc zero orphans: {len(plan['delete'])} resources of {len(kinds)} kinds deleted, "
          f"{len(plan['keep'])} kept as planned; deletion to finalized {seconds:.1f} s; "
          f"audit: {len(report['leftovers'])} leftovers, {len(report['kept'])} kept, "
          f"{len(report['goneButListedByTaggingApi'])} gone but still listed by the tagging API")
