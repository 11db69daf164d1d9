"""EC2 instances in moto behind a target group and a classic ELB, and the Nodes
that name them: the world node-detacher acts on, for the demo, tests and bench.

Target groups and classic ELBs carry the cloud controller's cluster tag, so
node-detacher finds them by tag, as it would on AWS.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from hooks.aws import rate_limits

from . import kwok

REGION = "us-east-1"
ZONE = "us-east-1a"
NODE_PORT = 30080
# An image moto knows; the instances never boot anyway.
IMAGE_ID = "ami-12c6146b"


# The local stack's own AWS calls (the demo, the tests' checks, the kubelet stand-in) are one more tool in the
# account: they spend at most this share of each bucket, waiting for their tokens, so a test that polls AWS
# in a tight loop never starves the hooks of theirs.
OWN_SHARE = 0.25
OWN_LIMITER = rate_limits.Limiter(OWN_SHARE, outside_hook_wait=600.0)


class Aws:
    """boto3 clients bound to one endpoint (moto) and region, metered by the stack's own share."""

    def __init__(self, env: Mapping[str, str], config: Config | None = None, metered: bool = True):
        self._metered = metered  # False: a world built while the throttling is off, unlimited here too
        self._kwargs = {
            "config": config,
            "region_name": env.get("AWS_REGION", REGION),
            "endpoint_url": env["AWS_ENDPOINT_URL"],
            "aws_access_key_id": env.get("AWS_ACCESS_KEY_ID", "testing"),
            "aws_secret_access_key": env.get("AWS_SECRET_ACCESS_KEY", "testing"),
        }
        self.ec2 = self._client("ec2")
        self.elbv2 = self._client("elbv2")
        self.elb = self._client("elb")
        # Interruptions: the queue EventBridge sends EC2's events to (docs/interruptions.md).
        self.sqs = self._client("sqs")
        self.events = self._client("events")
        # Auto Scaling groups: an owner fencing asks to replace a node (devcluster/owners.py).
        self.autoscaling = self._client("autoscaling")

    def _client(self, service: str):
        client = boto3.client(service, **self._kwargs)
        if self._metered:
            rate_limits.meter(client, service, self._kwargs["region_name"], OWN_LIMITER)
        return client


def cluster_tag(cluster_name: str) -> list[dict]:
    return [{"Key": f"kubernetes.io/cluster/{cluster_name}", "Value": "owned"}]


def create_classic_elb(aws: Aws, name: str, cluster_name: str) -> str:
    aws.elb.create_load_balancer(
        LoadBalancerName=name,
        Listeners=[{"Protocol": "TCP", "LoadBalancerPort": 80, "InstancePort": NODE_PORT}],
        AvailabilityZones=[ZONE],
        Tags=cluster_tag(cluster_name),
    )
    return name


def create_target_group(aws: Aws, name: str, cluster_name: str) -> str:
    vpc = aws.ec2.describe_vpcs()["Vpcs"][0]["VpcId"]
    group = aws.elbv2.create_target_group(
        Name=name, Protocol="TCP", Port=NODE_PORT, VpcId=vpc, TargetType="instance",
        Tags=cluster_tag(cluster_name),
    )
    return group["TargetGroups"][0]["TargetGroupArn"]


def target_group_arns(aws: Aws) -> list[str]:
    pages = aws.elbv2.get_paginator("describe_target_groups").paginate()
    return [group["TargetGroupArn"] for page in pages for group in page["TargetGroups"]]


def delete_target_group(aws: Aws, arn: str) -> None:
    """Delete a target group; one already gone, or still behind a listener, is left as it is."""
    try:
        aws.elbv2.delete_target_group(TargetGroupArn=arn)
    except ClientError as exc:
        if exc.response["Error"]["Code"] not in ("TargetGroupNotFound", "ResourceInUse"):
            raise


def launch_instances(aws: Aws, count: int, cluster_name: str | None = None) -> list[str]:
    """Instances tagged for ``cluster_name`` (the local stack's by default), as a cluster's nodes' are:
    fencing powers off only an instance with its cluster's tag."""
    if cluster_name is None:
        from .cluster import CLUSTER_NAME as cluster_name
    reservation = aws.ec2.run_instances(
        ImageId=IMAGE_ID, MinCount=count, MaxCount=count, InstanceType="t3.micro",
        Placement={"AvailabilityZone": ZONE},
        TagSpecifications=[{"ResourceType": "instance", "Tags": cluster_tag(cluster_name)}],
    )
    return [i["InstanceId"] for i in reservation["Instances"]]


def register(aws: Aws, instance_ids: list[str], target_group_arn: str, classic_elb: str) -> None:
    aws.elbv2.register_targets(
        TargetGroupArn=target_group_arn,
        Targets=[{"Id": i, "Port": NODE_PORT} for i in instance_ids],
    )
    aws.elb.register_instances_with_load_balancer(
        LoadBalancerName=classic_elb, Instances=[{"InstanceId": i} for i in instance_ids]
    )


def targets(aws: Aws, target_group_arn: str) -> set[tuple[str, int]]:
    """(instance id, port) of every target still in the group and not leaving it."""
    descriptions = aws.elbv2.describe_target_health(TargetGroupArn=target_group_arn)
    return {
        (d["Target"]["Id"], d["Target"].get("Port"))
        for d in descriptions["TargetHealthDescriptions"]
        if d.get("TargetHealth", {}).get("State") not in ("draining", "unused")
    }


def elb_instances(aws: Aws, classic_elb: str) -> set[str]:
    described = aws.elb.describe_load_balancers(LoadBalancerNames=[classic_elb])
    return {i["InstanceId"] for i in described["LoadBalancerDescriptions"][0].get("Instances", [])}


def node_manifest(name: str, instance_id: str, labels: Mapping[str, str] | None = None, *,
                  alive: bool = True) -> dict:
    """A Node as a kubelet would register it. ``alive``: with kwok's label, so kwok
    keeps it Ready (devcluster/kwok.py); without, a Node no kubelet ever posted for."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "topology.kubernetes.io/region": REGION,
                "topology.kubernetes.io/zone": ZONE,
                **(kwok.labels() if alive else {}),
                **(labels or {}),
            },
        },
        "spec": {"providerID": f"aws:///{ZONE}/{instance_id}"},
    }


# Metacontroller's finalizer of the Node decorator: on a Node once the decorator has synced it.
NODE_FINALIZER = "metacontroller.io/decoratorcontroller-node"


def node_seen(node: Mapping | None) -> bool:
    """The Node decorator has synced this Node (a Node's metadata or the whole Node)."""
    meta = (node or {}).get("metadata", node) or {}
    return NODE_FINALIZER in (meta.get("finalizers") or [])


@dataclass
class Fleet:
    """Instances and the load balancers that hold them."""

    instance_ids: list[str]
    target_group_arn: str
    classic_elb: str


def create_fleet(aws: Aws, *, count: int, target_group: str, classic_elb: str,
                 cluster_name: str) -> Fleet:
    """Launch ``count`` instances into a new tagged target group and an existing classic ELB."""
    arn = create_target_group(aws, target_group, cluster_name)
    ids = launch_instances(aws, count)
    register(aws, ids, arn, classic_elb)
    return Fleet(ids, arn, classic_elb)
