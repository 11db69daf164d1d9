"""node-detacher against moto in server mode: real boto3 calls, real ELB state."""
from __future__ import annotations

import json

import pytest
from botocore.exceptions import ClientError

from hooks.aws.lb_discovery import CACHE
from hooks.detacher import names
from hooks.dispatch import serve
from tests.support import RecordingKube, apply_decorator_response

pytestmark = pytest.mark.moto

CLUSTER = "test-cluster"
NS = "nodewarden-system"


def _instances(ec2, count):
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24", AvailabilityZone="us-east-1a")["Subnet"]["SubnetId"]
    ids = [i["InstanceId"] for i in ec2.run_instances(ImageId="ami-12c6146b", MinCount=count, MaxCount=count,
                                                      SubnetId=subnet)["Instances"]]
    return vpc, ids


def _tg(elbv2, vpc, name, tags):
    arn = elbv2.create_target_group(Name=name, Protocol="TCP", Port=80, VpcId=vpc, TargetType="instance")[
        "TargetGroups"][0]["TargetGroupArn"]
    if tags:
        elbv2.add_tags(ResourceArns=[arn], Tags=[{"Key": k, "Value": v} for k, v in tags.items()])
    return arn


def _members(elbv2, arn):
    return sorted((d["Target"]["Id"], d["Target"]["Port"])
                  for d in elbv2.describe_target_health(TargetGroupArn=arn)["TargetHealthDescriptions"])


def _elb_members(elb, name):
    lb = elb.describe_load_balancers(LoadBalancerNames=[name])["LoadBalancerDescriptions"][0]
    return sorted(i["InstanceId"] for i in lb["Instances"])


@pytest.fixture
def world(aws):
    """Our cluster's TG (two ports) and classic ELB, another cluster's TG, an untagged TG, a static TG."""
    CACHE.clear()
    ec2, elbv2, elb = aws("ec2"), aws("elbv2"), aws("elb")
    vpc, (mine, neighbour) = _instances(ec2, 2)
    ours = _tg(elbv2, vpc, "ours", {f"kubernetes.io/cluster/{CLUSTER}": "owned",
                                     "kubernetes.io/service-name": "default/web"})
    lbc = _tg(elbv2, vpc, "lbc", {"elbv2.k8s.aws/cluster": CLUSTER, "service.k8s.aws/stack": "default/api"})
    other = _tg(elbv2, vpc, "other-cluster", {"kubernetes.io/cluster/someone-else": "owned"})
    untagged = _tg(elbv2, vpc, "untagged", {})
    static = _tg(elbv2, vpc, "terraform-made", {})
    # One port per instance per group: moto keys targets by instance only (DESIGN.md §5);
    # several ports in one group are covered by the fixtures and the Stubber test below.
    elbv2.register_targets(TargetGroupArn=ours, Targets=[{"Id": mine, "Port": 30443}, {"Id": neighbour, "Port": 30080}])
    for arn in (lbc, other, untagged, static):
        elbv2.register_targets(TargetGroupArn=arn, Targets=[{"Id": mine, "Port": 31000}])
    elb.create_load_balancer(LoadBalancerName="legacy", AvailabilityZones=["us-east-1a"],
                             Listeners=[{"Protocol": "TCP", "LoadBalancerPort": 80, "InstancePort": 30080}],
                             Tags=[{"Key": f"kubernetes.io/cluster/{CLUSTER}", "Value": "owned"}])
    elb.register_instances_with_load_balancer(LoadBalancerName="legacy", Instances=[{"InstanceId": mine},
                                                                                  {"InstanceId": neighbour}])
    return {"ec2": ec2, "elbv2": elbv2, "elb": elb, "mine": mine, "neighbour": neighbour, "ours": ours,
            "lbc": lbc, "other": other, "untagged": untagged, "static": static}


def _node(instance):
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "node-a", "uid": "u-1", "labels": {}, "annotations": {}},
            "spec": {"providerID": f"aws:///us-east-1a/{instance}"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}


class Harness:
    """Plays Metacontroller's part for one Node: apply responses, keep attachments."""

    def __init__(self, ctx, node):
        self.ctx, self.node, self.attachments, self.responses = ctx, node, [], []

    def sync(self, hook="sync"):
        body = {"controller": {}, "parent": self.node,
                "children": {"Attachment.nodewarden.io/v1alpha1": {f"{NS}/{a['metadata']['name']}": a
                                                                   for a in self.attachments}},
                "related": {}, "finalizing": hook == "finalize"}
        response = serve("node-detacher", hook, json.loads(json.dumps(body)), self.ctx)
        self.node = apply_decorator_response(self.node, response)
        self.attachments = response["attachments"]
        self.responses.append(response)
        return response


@pytest.fixture
def harness(world, make_ctx):
    kube = RecordingKube()
    # moto files classic ELBs under 'elb:loadbalancer' in the tagging API, where AWS uses
    # 'elasticloadbalancing:loadbalancer' (DESIGN.md §5), so the classic ELB is configured
    # as a static one here; tagged classic discovery is tested with a Stubber below.
    ctx = make_ctx({"NODEWARDEN_STATIC_TARGET_GROUPS": world["static"], "NODEWARDEN_STATIC_CLASSIC_ELBS": "legacy",
                    "NODEWARDEN_DISCOVERY_CACHE_SECONDS": "0"}, kube=kube)
    return Harness(ctx, _node(world["mine"])), kube


def test_discovery_fills_attachment_with_ports_and_only_this_clusters_load_balancers(world, harness):
    h, _ = harness
    h.sync()
    spec = h.attachments[0]["spec"]
    assert sorted((t["arn"], t["port"]) for t in spec["awsTargets"]) == sorted(
        [(world["ours"], 30443), (world["lbc"], 31000), (world["static"], 31000)])
    assert spec["awsLoadBalancers"] == [{"name": "legacy"}]
    assert spec["instanceID"] == world["mine"]


def test_cordon_detaches_then_uncordon_reattaches_exactly(world, harness):
    h, kube = harness
    elbv2, elb, mine, neighbour = world["elbv2"], world["elb"], world["mine"], world["neighbour"]
    before = {arn: _members(elbv2, world[arn]) for arn in ("ours", "lbc", "other", "untagged", "static")}
    h.sync()  # warm the Attachment while schedulable

    h.node["spec"]["unschedulable"] = True
    first = h.sync()
    assert first["labels"] == {names.EXCLUDE_LABEL: names.EXCLUDE_VALUE}
    # The label must land before anything leaves a load balancer.
    assert _members(elbv2, world["ours"]) == before["ours"]

    h.sync()  # label observed: deregister
    assert _members(elbv2, world["ours"]) == [(neighbour, 30080)]
    assert _members(elbv2, world["lbc"]) == []
    assert _members(elbv2, world["static"]) == []
    assert _elb_members(elb, "legacy") == [neighbour]
    # Another cluster's and untagged target groups are not ours to touch.
    assert _members(elbv2, world["other"]) == before["other"]
    assert _members(elbv2, world["untagged"]) == before["untagged"]

    h.sync()  # drain check: moto deregisters at once
    ann = h.node["metadata"]["annotations"]
    assert ann[names.DETACHING] == "true" and names.DETACHED_AT in ann
    assert [c["type"] for c in h.node["status"]["conditions"]] == ["Ready", names.CONDITION]
    assert {"Detaching", "Deregistered", "Detached"} <= set(kube.events())

    h.node["spec"]["unschedulable"] = False
    h.sync()
    for key in ("ours", "lbc", "other", "untagged", "static"):
        assert _members(elbv2, world[key]) == before[key], key
    assert _elb_members(elb, "legacy") == sorted([mine, neighbour])
    assert not any(k in h.node["metadata"]["annotations"] for k in names.OUR_ANNOTATIONS)
    assert names.EXCLUDE_LABEL not in h.node["metadata"]["labels"]
    assert [c["type"] for c in h.node["status"]["conditions"]] == ["Ready"]
    assert "Reattached" in kube.events()


def test_aws_failure_mid_detach_keeps_progress_and_resumes(world, harness):
    """moto cannot fail on demand: a botocore event hook injects one throttling error."""
    h, kube = harness
    elbv2 = world["elbv2"]
    h.sync()
    h.node["spec"]["unschedulable"] = True
    h.sync()

    client = h.ctx.aws.client("elbv2", "us-east-1")
    calls = []

    def flaky(params, **_):
        calls.append(params["TargetGroupArn"])
        if params["TargetGroupArn"] == world["lbc"] and calls.count(world["lbc"]) == 1:
            raise ClientError({"Error": {"Code": "Throttling", "Message": "Rate exceeded"}}, "DeregisterTargets")

    client.meta.events.register("provide-client-params.elastic-load-balancing-v2.DeregisterTargets", flaky)
    try:
        failed = h.sync()
        ann = h.node["metadata"]["annotations"]
        assert "Throttling" in ann[names.ERROR]
        assert failed["resyncAfterSeconds"] >= 5
        done = json.loads(ann[names.DEREGISTERED])
        assert ["tg", world["ours"], 30443] in done and ["tg", world["lbc"], 31000] not in done
        assert _members(elbv2, world["lbc"]) == [(world["mine"], 31000)]  # still there: the call failed
        assert "DetachFailed" in kube.events()

        h.sync()  # retry: only what is left is called again
        assert calls.count(world["lbc"]) == 2
        assert calls.count(world["ours"]) == 1
        assert _members(elbv2, world["lbc"]) == []
        assert names.ERROR not in h.node["metadata"]["annotations"]
    finally:
        client.meta.events.unregister("provide-client-params.elastic-load-balancing-v2.DeregisterTargets", flaky)


def test_unreachable_kubernetes_api_does_not_stop_the_aws_detach(world, make_ctx):
    """Events need the API; their failure must not undo or block the AWS work."""
    CACHE.clear()
    ctx = make_ctx({"NODEWARDEN_DISCOVERY_CACHE_SECONDS": "0", "NODEWARDEN_STATIC_CLASSIC_ELBS": "legacy"},
                   kube=RecordingKube(fail=True))
    h = Harness(ctx, _node(world["mine"]))
    h.sync()
    h.node["spec"]["unschedulable"] = True
    h.sync()
    h.sync()
    assert _members(world["elbv2"], world["ours"]) == [(world["neighbour"], 30080)]
