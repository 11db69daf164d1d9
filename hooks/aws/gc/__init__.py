"""Garbage collection of what a workload cluster's controllers made in AWS.

In the spirit of CAPA's GC service: discovery finds the resources tagged for
the cluster (``discovery``), and one cleanup function per AWS service deletes
them (``elbv2``, ``classic_elb``, ``ec2``), run in a fixed task order by
``runner``: load balancers, then target groups, then security groups, then
(only when asked) volumes. Adding a service means adding a kind in
hooks.teardown.tasks and its deleter here.
"""
from __future__ import annotations

from hooks.aws.gc import classic_elb, ec2, elbv2
from hooks.teardown.tasks import CLASSIC_ELB, ELBV2_LB, SG, TG, VOL

# kind -> (boto3 service, delete function taking (client, id) -> DELETED | GONE)
DELETERS = {
    ELBV2_LB: ("elbv2", elbv2.delete_load_balancer),
    CLASSIC_ELB: ("elb", classic_elb.delete_load_balancer),
    TG: ("elbv2", elbv2.delete_target_group),
    SG: ("ec2", ec2.delete_security_group),
    VOL: ("ec2", ec2.delete_volume),
}


def delete(aws, kind: str, region: str, ident: str) -> str:
    """Delete one resource; raises botocore errors the runner classifies."""
    service, delete_fn = DELETERS[kind]
    return delete_fn(aws.client(service, region), ident)
