"""Classic ELBs: listing, tag reads and deletion.

DeleteLoadBalancer succeeds for a name that does not exist, so a repeated
delete after a crash is harmless.
"""
from __future__ import annotations


from hooks.aws.gc.resources import delete_unless_gone, paged_ids, tags_in_chunks

DESCRIBE_TAGS_LIMIT = 20  # LoadBalancerNames per DescribeTags call
PAGE_SIZE = 400
NOT_FOUND = ("LoadBalancerNotFound", "AccessPointNotFound")


def load_balancer_names(elb) -> list[str]:
    return paged_ids(elb, "describe_load_balancers", "LoadBalancerDescriptions", "LoadBalancerName",
                     PageSize=PAGE_SIZE)


def tags_of(elb, names: list[str]) -> dict[str, dict[str, str]]:
    """Tags of each load balancer, read in chunks of 20; vanished ones are left out."""
    return tags_in_chunks(lambda chunk: elb.describe_tags(LoadBalancerNames=chunk)["TagDescriptions"],
                          names, "LoadBalancerName", NOT_FOUND, DESCRIBE_TAGS_LIMIT)


def delete_load_balancer(elb, name: str) -> str:
    return delete_unless_gone(elb.delete_load_balancer, NOT_FOUND, LoadBalancerName=name)
