"""ELBv2 (application, network, gateway) load balancers and target groups.

Listing and tag reads for discovery without the tagging API, and the two
delete calls. Deleting a load balancer deletes its listeners too; a target
group still used by a listener answers ``ResourceInUse`` until then.
"""
from __future__ import annotations


from hooks.aws.gc.resources import delete_unless_gone, paged_ids, tags_in_chunks

DESCRIBE_TAGS_LIMIT = 20  # ResourceArns per DescribeTags call
PAGE_SIZE = 400  # the most DescribeLoadBalancers/DescribeTargetGroups return per page
NOT_FOUND = ("LoadBalancerNotFound", "TargetGroupNotFound")


def load_balancer_arns(elbv2) -> list[str]:
    return paged_ids(elbv2, "describe_load_balancers", "LoadBalancers", "LoadBalancerArn", PageSize=PAGE_SIZE)


def target_group_arns(elbv2) -> list[str]:
    return paged_ids(elbv2, "describe_target_groups", "TargetGroups", "TargetGroupArn", PageSize=PAGE_SIZE)


def tags_of(elbv2, arns: list[str]) -> dict[str, dict[str, str]]:
    """Tags of each ARN, read in chunks of 20; ARNs deleted meanwhile are left out."""
    return tags_in_chunks(lambda chunk: elbv2.describe_tags(ResourceArns=chunk)["TagDescriptions"],
                          arns, "ResourceArn", NOT_FOUND, DESCRIBE_TAGS_LIMIT)


def delete_load_balancer(elbv2, arn: str) -> str:
    return delete_unless_gone(elbv2.delete_load_balancer, NOT_FOUND, LoadBalancerArn=arn)


def delete_target_group(elbv2, arn: str) -> str:
    return delete_unless_gone(elbv2.delete_target_group, NOT_FOUND, TargetGroupArn=arn)
