"""``nodewarden gc plan`` against moto in server mode and the in-memory Kubernetes API.

The plan reads the cluster's object as finalize does (name, region, tasks),
flags override, and it changes nothing; its JSON is what ``gc audit
--expect-kept`` takes.
"""
from __future__ import annotations

import json

import pytest

from hooks import cli
from hooks.teardown_names import (GC_ANNOTATION, KEEP_CAPA, KEEP_LB_CONTROLLER_OFF, KEEP_NOT_OWNED, KEEP_TASK_OFF,
                                  TASKS_ANNOTATION)
from worlds import cluster_gc as w

pytestmark = pytest.mark.moto

CAPA_TAG = "sigs.k8s.io/cluster-api-provider-aws/cluster/alpha"


@pytest.fixture
def net(aws):
    return w.network(aws("ec2"))


def _sg(aws, net, name: str, tags: dict) -> str:
    return aws("ec2").create_security_group(
        GroupName=name, Description="test", VpcId=net.vpc,
        TagSpecifications=[{"ResourceType": "security-group",
                            "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}])["GroupId"]


def aws_cluster(annotations: dict | None = None, region: str = w.REGION) -> dict:
    """alpha's AWSCluster as the API server has it: labelled with its Cluster API cluster's name."""
    return {"kind": "AWSCluster", "metadata": {"name": "alpha-infra", "namespace": "ns",
                                              "labels": {"cluster.x-k8s.io/cluster-name": "alpha"},
                                              "annotations": dict(annotations or {})},
            "spec": {"region": region}}


@pytest.fixture
def alpha(aws, net) -> dict:
    made = w.build_cluster(aws, net, "a", w.cluster_tags("alpha"), load_balancers=1, classic_elbs=1,
                           target_groups=1, security_groups=1, volumes=1)
    capa = _sg(aws, net, "capa", {"kubernetes.io/cluster/alpha": "owned", CAPA_TAG: "owned"})
    shared = _sg(aws, net, "shared", {"kubernetes.io/cluster/alpha": "shared"})
    _sg(aws, net, "beta", {"kubernetes.io/cluster/beta": "owned"})
    return {"made": made, "capa": capa, "shared": shared}


def _run(kube, capsys, *argv: str) -> tuple[int, str, str]:
    args = cli.build_parser().parse_args(["gc", "plan", *argv])
    code = args.func(args, kube=kube)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_plan_reads_the_tasks_and_region_from_the_cluster_object_and_changes_nothing(aws, alpha, capsys):
    kube = w.FakeKube([aws_cluster({TASKS_ANNOTATION: "load-balancer,target-group,security-group,volume"},
                                   region=w.REGION)], without_crds=("Cluster",))
    code, out, err = _run(kube, capsys, "alpha", "-n", "ns", "-o", "json")
    assert code == 0, err
    plan = json.loads(out)
    made = alpha["made"]
    assert plan["clusterObject"] == "AWSCluster ns/alpha-infra" and plan["tasksFrom"] == "annotation"
    assert plan["region"] == w.REGION and plan["cluster"] == "alpha"
    assert [(r["kind"], r["id"], r["task"]) for r in plan["delete"]] == [
        ("classic-load-balancer", made.classic_elbs[0], "load-balancer"),
        ("elbv2-load-balancer", made.load_balancers[0], "load-balancer"),
        ("target-group", made.target_groups[0], "target-group"),
        ("security-group", made.security_groups[0], "security-group"),
        ("volume", made.volumes[0], "volume"),
    ]
    assert {r["id"]: r["reason"] for r in plan["keep"]} == {alpha["capa"]: KEEP_CAPA,
                                                            alpha["shared"]: KEEP_NOT_OWNED}
    assert w.existing(aws, made) == made and kube.patches == []


def test_flags_override_the_annotation_and_the_text_says_where_the_tasks_came_from(aws, alpha, capsys):
    kube = w.FakeKube([aws_cluster({TASKS_ANNOTATION: "volume"})], without_crds=("Cluster",))
    code, out, _ = _run(kube, capsys, "alpha", "-n", "ns", "--gc-task", "security-group")
    assert code == 0
    assert "tasks: security-group (from --gc-task)" in out
    assert "would delete, in this order (1):" in out and alpha["made"].security_groups[0] in out
    assert f"{alpha['made'].volumes[0]}: {KEEP_TASK_OFF}" in out
    assert f"{alpha['capa']}: {KEEP_CAPA}" in out

    code, out, _ = _run(kube, capsys, "alpha", "-n", "ns")
    assert code == 0 and f"tasks: volume (from {TASKS_ANNOTATION} on AWSCluster ns/alpha-infra)" in out


def test_without_the_cluster_object_the_name_is_the_tags_and_the_tasks_the_default(aws, alpha, capsys):
    code, out, _ = _run(w.FakeKube(unavailable=True), capsys, "alpha", "--region", w.REGION, "-o", "json")
    plan = json.loads(out)
    assert code == 0 and plan["tasksFrom"] == "default" and plan["clusterObject"] is None
    assert "volume" not in plan["tasks"] and "unreachable" in plan["notes"][0]
    assert alpha["made"].volumes[0] in {r["id"] for r in plan["keep"]}  # the volume task is opt-in


def test_an_opted_out_cluster_is_said_and_an_unknown_task_is_refused(aws, alpha, capsys):
    kube = w.FakeKube([aws_cluster({GC_ANNOTATION: "false"})], without_crds=("Cluster",))
    code, out, _ = _run(kube, capsys, "alpha", "-n", "ns")
    assert code == 0 and "is opted out" in out

    kube = w.FakeKube([aws_cluster({TASKS_ANNOTATION: "load-balancer,nat-gateway"})], without_crds=("Cluster",))
    code, _, err = _run(kube, capsys, "alpha", "-n", "ns")
    assert code == 2 and "nat-gateway" in err and "blocks the deletion" in err
    code, _, _ = _run(kube, capsys, "alpha", "-n", "ns", "--gc-task", "load-balancer")
    assert code == 0
    code, _, err = _run(kube, capsys, "alpha", "-n", "ns", "--gc-task", "nat-gateway")
    assert code == 2 and "unsupported gc task" in err


def test_what_is_kept_only_until_free_is_a_leftover_for_the_audit(aws, net, capsys, tmp_path):
    made = w.build_cluster(aws, net, "a", w.cluster_tags("alpha"), volumes=1)
    ec2 = aws("ec2")
    instance = ec2.run_instances(ImageId=ec2.describe_images()["Images"][0]["ImageId"], MinCount=1, MaxCount=1,
                                 Placement={"AvailabilityZone": net.zones[0]})["Instances"][0]["InstanceId"]
    ec2.attach_volume(VolumeId=made.volumes[0], InstanceId=instance, Device="/dev/sdf")
    code, out, _ = _run(w.FakeKube(unavailable=True), capsys, "alpha", "--region", w.REGION,
                        "--gc-task", "volume", "-o", "json")
    plan = json.loads(out)
    assert code == 0 and [(r["id"], r["waitedFor"]) for r in plan["keep"]] == [(made.volumes[0], True)]
    path = tmp_path / "plan.json"
    path.write_text(out)
    # cluster-gc would have waited for it and deleted it: still there, it is a leftover.
    assert cli.main(["gc", "audit", "alpha", "--expect-kept", str(path)]) == 1
    assert made.volumes[0] in capsys.readouterr().out


def test_the_lb_controllers_resources_are_planned_only_when_included(aws, net, capsys):
    group = w.build_cluster(aws, net, "l", w.lb_controller_tags("alpha"), target_groups=1).target_groups[0]
    kube = w.FakeKube(unavailable=True)
    code, out, _ = _run(kube, capsys, "alpha", "--region", w.REGION, "-o", "json")
    plan = json.loads(out)
    assert code == 0 and plan["delete"] == [] and [r["reason"] for r in plan["keep"]] == [KEEP_LB_CONTROLLER_OFF]
    code, out, _ = _run(kube, capsys, "alpha", "--region", w.REGION, "--include-lb-controller", "-o", "json")
    plan = json.loads(out)
    assert code == 0 and plan["includeLbController"] is True and [r["id"] for r in plan["delete"]] == [group]


def test_no_region_anywhere_is_a_usage_error(aws, capsys, monkeypatch):
    monkeypatch.delenv("AWS_REGION")
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    code, _, err = _run(w.FakeKube(unavailable=True), capsys, "alpha")
    assert code == 2 and "no region" in err


def test_the_plan_is_what_the_audit_expects_kept(aws, alpha, capsys, tmp_path):
    kube = w.FakeKube([aws_cluster()], without_crds=("Cluster",))
    code, out, _ = _run(kube, capsys, "alpha", "-n", "ns", "-o", "json")
    assert code == 0
    path = tmp_path / "plan.json"
    path.write_text(out)
    plan = json.loads(out)
    ec2, elb, elbv2 = aws("ec2"), aws("elb"), aws("elbv2")
    # What finalize would do, done by hand: everything the plan deletes goes.
    for r in plan["delete"]:
        if r["kind"] == "elbv2-load-balancer":
            elbv2.delete_load_balancer(LoadBalancerArn=r["id"])
        elif r["kind"] == "classic-load-balancer":
            elb.delete_load_balancer(LoadBalancerName=r["id"])
        elif r["kind"] == "target-group":
            elbv2.delete_target_group(TargetGroupArn=r["id"])
        elif r["kind"] == "security-group":
            ec2.delete_security_group(GroupId=r["id"])
    kept_volume = alpha["made"].volumes[0]  # the volume task is off by default: kept, and said so
    assert kept_volume in {r["id"] for r in plan["keep"]}
    assert cli.main(["gc", "audit", "alpha", "--expect-kept", str(path)]) == 0
    assert "clean" in capsys.readouterr().out


def test_the_plan_names_what_is_tagged_for_the_cluster_of_kinds_it_does_not_collect(aws, alpha, capsys, tmp_path):
    """A VPC tagged owned for alpha (CAPA's network): not cluster-gc's to delete, and a leftover for the audit
    until CAPA deletes it. The plan says so, rather than nothing, and the audit does not take it as kept."""
    ec2 = aws("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16", TagSpecifications=[{
        "ResourceType": "vpc", "Tags": [{"Key": "kubernetes.io/cluster/alpha", "Value": "owned"}]}])["Vpc"]["VpcId"]
    code, out, _ = _run(w.FakeKube(unavailable=True), capsys, "alpha", "--region", w.REGION, "-o", "json")
    assert code == 0
    plan = json.loads(out)
    others = {r["id"]: r for r in plan["otherKinds"]}
    arn = f"arn:aws:ec2:{w.REGION}:123456789012:vpc/{vpc}"
    assert others[arn]["kind"] == "ec2:vpc" and others[arn]["tags"] == {"kubernetes.io/cluster/alpha": "owned"}
    assert arn not in {r["id"] for r in plan["keep"] + plan["delete"]}

    code, out, _ = _run(w.FakeKube(unavailable=True), capsys, "alpha", "--region", w.REGION)
    assert code == 0 and vpc in out and "not a kind cluster-gc collects" in out

    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    args = cli.build_parser().parse_args(["gc", "audit", "alpha", "--expect-kept", str(path), "-o", "json"])
    assert args.func(args) == 1
    report = json.loads(capsys.readouterr().out)
    assert arn in {r["id"] for r in report["leftovers"]}
