"""Classic ELBs: listing, tag reads and deletion.

DeleteLoadBalancer succeeds for a name that does not exist, so a repeated
delete after a crash is harmless.
"""
from __future__ import annotations

from botocore.exceptions import ClientError

from hooks.aws.clients import error_code
from hooks.aws.gc.resources import DELETED, GONE, chunked, tags_to_dict

DESCRIBE_TAGS_LIMIT = 20  # LoadBalancerNames per DescribeTags call
PAGE_SIZE = 400
NOT_FOUND = ("LoadBalancerNotFound", "AccessPointNotFound")


def load_balancer_names(elb) -> list[str]:
    names: list[str] = []
    for page in elb.get_paginator("describe_load_balancers").paginate(PageSize=PAGE_SIZE):
        names.extend(lb["LoadBalancerName"] for lb in page.get("LoadBalancerDescriptions", []))
    return names


def tags_of(elb, names: list[str]) -> dict[str, dict[str, str]]:
    """Tags of each load balancer, read in chunks of 20; vanished ones are left out."""
    found: dict[str, dict[str, str]] = {}
    for chunk in chunked(list(names), DESCRIBE_TAGS_LIMIT):
        for desc in _describe_tags(elb, chunk):
            found[desc["LoadBalancerName"]] = tags_to_dict(desc.get("Tags"))
    return found


def _describe_tags(elb, chunk: list[str]) -> list[dict]:
    try:
        return elb.describe_tags(LoadBalancerNames=chunk)["TagDescriptions"]
    except ClientError as exc:
        if error_code(exc) not in NOT_FOUND:
            raise
        if len(chunk) == 1:
            return []
    descs: list[dict] = []
    for name in chunk:
        descs.extend(_describe_tags(elb, [name]))
    return descs


def delete_load_balancer(elb, name: str) -> str:
    try:
        elb.delete_load_balancer(LoadBalancerName=name)
    except ClientError as exc:
        if error_code(exc) in NOT_FOUND:
            return GONE
        raise
    return DELETED
