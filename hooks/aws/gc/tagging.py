"""The Resource Groups Tagging API: every resource carrying one tag, every page.

Resources are classified by ARN afterwards (as CAPA does). A caller after
load balancers alone (node-detacher) names their resource types, so the
listing does not page through every instance, volume and ENI tagged for the
cluster; otherwise no type is named. The API may still list resources
deleted moments ago, and tags as they were minutes ago, so discovery reads
what it lists again from each resource's own service.
"""
from __future__ import annotations

from hooks.aws.gc.resources import tags_to_dict

PAGE_SIZE = 100  # the API's maximum ResourcesPerPage

# The tagging API is refused (IAM policy without tag:GetResources, an SCP, a
# partition without the API): discovery then lists each service instead.
DENIED = (
    "AccessDenied",
    "AccessDeniedException",
    "UnauthorizedOperation",
    "UnauthorizedException",
    "UnrecognizedClientException",
)


def resources_tagged(tagging, key: str, values: list[str],
                     resource_types: tuple[str, ...] = ()) -> dict[str, dict[str, str]]:
    """{ARN: tags} of every resource with tag ``key`` set to one of ``values`` (no values: to any value), of
    ``resource_types`` only when some are named (``elasticloadbalancing:targetgroup``)."""
    found: dict[str, dict[str, str]] = {}
    paginator = tagging.get_paginator("get_resources")
    tag_filter = {"Key": key, "Values": values} if values else {"Key": key}
    types = {"ResourceTypeFilters": list(resource_types)} if resource_types else {}
    for page in paginator.paginate(TagFilters=[tag_filter], ResourcesPerPage=PAGE_SIZE, **types):
        for mapping in page.get("ResourceTagMappingList", []):
            found[mapping["ResourceARN"]] = tags_to_dict(mapping.get("Tags"))
    return found
