"""Garbage collection of what a workload cluster's controllers made in AWS.

In the spirit of CAPA's GC service: discovery finds the resources tagged for
the cluster (``discovery``), and one cleanup function per AWS service deletes
them (``elbv2``, ``classic_elb``, ``ec2``), run in a fixed task order by
``runner``: instances, load balancers, target groups, ENIs, Elastic IPs,
security groups, then (only when asked) volumes. Adding a service means
adding a kind in hooks.teardown.tasks and its deleter here.
"""
from __future__ import annotations

from hooks.aws.gc import classic_elb, ec2, elbv2
from hooks.teardown.tasks import CLASSIC_ELB, EC2_INSTANCE, EIP, ELBV2_LB, ENI, SG, TG, VOL

# kind -> (boto3 service, delete function taking (client, id) -> DELETED | GONE)
DELETERS = {
    EC2_INSTANCE: ("ec2", ec2.terminate_instance),
    ELBV2_LB: ("elbv2", elbv2.delete_load_balancer),
    CLASSIC_ELB: ("elb", classic_elb.delete_load_balancer),
    TG: ("elbv2", elbv2.delete_target_group),
    ENI: ("ec2", ec2.delete_network_interface),
    EIP: ("ec2", ec2.release_address),
    SG: ("ec2", ec2.delete_security_group),
    VOL: ("ec2", ec2.delete_volume),
}


def delete(aws, kind: str, region: str, ident: str) -> str:
    """Delete one resource; raises botocore errors the runner classifies."""
    service, delete_fn = DELETERS[kind]
    return delete_fn(aws.client(service, region), ident)


def read_one(aws, kind: str, region: str, ident: str) -> dict | None:
    """One EC2 resource as discovery records it (``{"kind", "id", "arn", "tags", "state"}``), read now;
    None when EC2 no longer knows it (or, for an instance, it is terminated)."""
    found = ec2.by_id(aws.client("ec2", region), kind, [ident]).get(ident)
    if found is None:
        return None
    return {"kind": kind, "id": ident, "arn": "", "tags": found["tags"], "state": found["state"]}
