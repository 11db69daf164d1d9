"""A cluster's load balancers in moto: instances, target groups, a classic ELB, and who is registered where.

The ``world`` fixture is used by the tests of node-detacher and of hooks/aws/elb.py; a module takes it with
``from tests.support.load_balancers import world``.
"""
from __future__ import annotations

import pytest

from hooks.aws import elb as elb_api
from hooks.aws.lb_discovery import CACHE

CLUSTER = "test-cluster"


def make_instances(ec2, count):
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24", AvailabilityZone="us-east-1a")["Subnet"]["SubnetId"]
    ids = [i["InstanceId"] for i in ec2.run_instances(ImageId="ami-12c6146b", MinCount=count, MaxCount=count,
                                                      SubnetId=subnet)["Instances"]]
    return vpc, ids


def make_target_group(elbv2, vpc, name, tags):
    arn = elbv2.create_target_group(Name=name, Protocol="TCP", Port=80, VpcId=vpc, TargetType="instance")[
        "TargetGroups"][0]["TargetGroupArn"]
    if tags:
        elbv2.add_tags(ResourceArns=[arn], Tags=[{"Key": k, "Value": v} for k, v in tags.items()])
    return arn


def tg_members(elbv2, arn):
    return sorted((d["Target"]["Id"], d["Target"]["Port"])
                  for d in elbv2.describe_target_health(TargetGroupArn=arn)["TargetHealthDescriptions"])


def elb_members(elb, name):
    lb = elb.describe_load_balancers(LoadBalancerNames=[name])["LoadBalancerDescriptions"][0]
    return sorted(i["InstanceId"] for i in lb["Instances"])


@pytest.fixture
def world(aws):
    """Our cluster's TG (two ports) and classic ELB, another cluster's TG, an untagged TG, a static TG."""
    CACHE.clear()
    elb_api.HEALTH.clear()  # readings of another test's load balancers (a classic ELB's name is the same)
    ec2, elbv2, elb = aws("ec2"), aws("elbv2"), aws("elb")
    vpc, (mine, neighbour) = make_instances(ec2, 2)
    ours = make_target_group(elbv2, vpc, "ours", {f"kubernetes.io/cluster/{CLUSTER}": "owned",
                                     "kubernetes.io/service-name": "default/web"})
    lbc = make_target_group(elbv2, vpc, "lbc", {"elbv2.k8s.aws/cluster": CLUSTER, "service.k8s.aws/stack": "default/api"})
    other = make_target_group(elbv2, vpc, "other-cluster", {"kubernetes.io/cluster/someone-else": "owned"})
    untagged = make_target_group(elbv2, vpc, "untagged", {})
    static = make_target_group(elbv2, vpc, "terraform-made", {})
    # One port per instance per group: moto keys targets by instance only;
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
