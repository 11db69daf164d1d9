"""ELBv2 (application, network, gateway) load balancers and target groups.

Listing and tag reads for discovery without the tagging API, and the two
delete calls. Deleting a load balancer deletes its listeners too; a target
group still used by a listener answers ``ResourceInUse`` until then.
"""
from __future__ import annotations


from hooks.aws.gc.resources import delete_unless_gone, tags_in_chunks

DESCRIBE_TAGS_LIMIT = 20  # ResourceArns per DescribeTags call
PAGE_SIZE = 400  # the most DescribeLoadBalancers/DescribeTargetGroups return per page
NOT_FOUND = ("LoadBalancerNotFound", "TargetGroupNotFound")


def load_balancer_arns(elbv2) -> list[str]:
    arns: list[str] = []
    for page in elbv2.get_paginator("describe_load_balancers").paginate(PageSize=PAGE_SIZE):
        arns.extend(lb["LoadBalancerArn"] for lb in page.get("LoadBalancers", []))
    return arns


def target_group_arns(elbv2) -> list[str]:
    arns: list[str] = []
    for page in elbv2.get_paginator("describe_target_groups").paginate(PageSize=PAGE_SIZE):
        arns.extend(tg["TargetGroupArn"] for tg in page.get("TargetGroups", []))
    return arns


def tags_of(elbv2, arns: list[str]) -> dict[str, dict[str, str]]:
    """Tags of each ARN, read in chunks of 20; ARNs deleted meanwhile are left out."""
    return tags_in_chunks(lambda chunk: elbv2.describe_tags(ResourceArns=chunk)["TagDescriptions"],
                          arns, "ResourceArn", NOT_FOUND, DESCRIBE_TAGS_LIMIT)


def delete_load_balancer(elbv2, arn: str) -> str:
    return delete_unless_gone(elbv2.delete_load_balancer, NOT_FOUND, LoadBalancerArn=arn)


def delete_target_group(elbv2, arn: str) -> str:
    return delete_unless_gone(elbv2.delete_target_group, NOT_FOUND, TargetGroupArn=arn)
