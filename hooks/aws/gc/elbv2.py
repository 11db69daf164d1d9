"""ELBv2 (application, network, gateway) load balancers and target groups.

Listing and tag reads for discovery without the tagging API, and the two
delete calls. Deleting a load balancer deletes its listeners too; a target
group still used by a listener answers ``ResourceInUse`` until then.
"""
from __future__ import annotations

from botocore.exceptions import ClientError

from hooks.aws.clients import error_code
from hooks.aws.gc.resources import DELETED, GONE, chunked, tags_to_dict

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
    found: dict[str, dict[str, str]] = {}
    for chunk in chunked(list(arns), DESCRIBE_TAGS_LIMIT):
        for desc in _describe_tags(elbv2, chunk):
            found[desc["ResourceArn"]] = tags_to_dict(desc.get("Tags"))
    return found


def _describe_tags(elbv2, chunk: list[str]) -> list[dict]:
    try:
        return elbv2.describe_tags(ResourceArns=chunk)["TagDescriptions"]
    except ClientError as exc:
        if error_code(exc) not in NOT_FOUND:
            raise
        if len(chunk) == 1:
            return []
    # One of the chunk vanished between listing and reading: the whole call
    # fails, so read the others one at a time.
    descs: list[dict] = []
    for arn in chunk:
        descs.extend(_describe_tags(elbv2, [arn]))
    return descs


def delete_load_balancer(elbv2, arn: str) -> str:
    try:
        elbv2.delete_load_balancer(LoadBalancerArn=arn)
    except ClientError as exc:
        if error_code(exc) in NOT_FOUND:
            return GONE
        raise
    return DELETED


def delete_target_group(elbv2, arn: str) -> str:
    try:
        elbv2.delete_target_group(TargetGroupArn=arn)
    except ClientError as exc:
        if error_code(exc) in NOT_FOUND:
            return GONE
        raise
    return DELETED
