"""AWS's side of the resources cluster-gc collects: ARNs, tags, paging, and delete calls.

Shared by discovery and the per-service modules beside this one. Which
resource is collected, and in what order, is decided in hooks.teardown.
"""
from __future__ import annotations

from botocore.exceptions import ClientError

from hooks.aws.clients import error_code
from hooks.teardown.tasks import CLASSIC_ELB, EC2_INSTANCE, EIP, ELBV2_LB, ENI, SG, TG, VOL

# The resource types of EC2 ARNs (``arn:aws:ec2:<region>:<account>:<type>/<id>``) the collector knows.
EC2_ARN_TYPES = {"instance": EC2_INSTANCE, "network-interface": ENI, "elastic-ip": EIP,
                 "security-group": SG, "volume": VOL}


def parse_arn(arn: str) -> tuple[str, str] | None:
    """(kind, id) of an ARN the collector knows, else None.

    The id is what the delete call takes: the ARN for ELBv2 load balancers
    and target groups, the name for a classic ELB, the EC2 id (sg-, vol-, eni-,
    eipalloc-, i-) for EC2.
    """
    parts = arn.split(":", 5)
    if len(parts) != 6 or parts[0] != "arn":
        return None
    service, resource = parts[2], parts[5]
    if service == "elasticloadbalancing":
        if resource.startswith("targetgroup/"):
            return TG, arn
        if resource.startswith("loadbalancer/"):
            rest = resource[len("loadbalancer/"):]
            if rest.split("/", 1)[0] in ("app", "net", "gwy"):
                return ELBV2_LB, arn
            if rest and "/" not in rest:
                return CLASSIC_ELB, rest
        return None  # listeners, rules
    if service == "ec2":
        resource_type, _, ident = resource.partition("/")
        kind = EC2_ARN_TYPES.get(resource_type)
        if kind and ident and "/" not in ident:
            return kind, ident
    return None


def tags_to_dict(tags: list | None) -> dict[str, str]:
    """AWS's [{"Key":…, "Value":…}] as a dict."""
    return {t["Key"]: t.get("Value", "") for t in tags or [] if "Key" in t}


def chunked(items: list, size: int):
    """Consecutive slices of at most ``size`` items (AWS batch limits)."""
    for i in range(0, len(items), size):
        yield items[i : i + size]


# What a delete call reports: it removed the resource, or it was already gone.
DELETED = "deleted"
GONE = "gone"


def delete_unless_gone(call, not_found: tuple[str, ...], **params) -> str:
    """Run one delete call; an already-deleted resource counts as done (GONE)."""
    try:
        call(**params)
    except ClientError as exc:
        if error_code(exc) in not_found:
            return GONE
        raise
    return DELETED


def tags_in_chunks(describe, ids: list[str], id_key: str, not_found: tuple[str, ...], size: int = 20) -> dict:
    """Tags per id, read ``size`` at a time (the DescribeTags limit); vanished ids are left out.

    ``describe(chunk)`` returns TagDescriptions. When one id of a chunk
    vanished between listing and reading, the whole call fails, so that chunk
    is read again one id at a time.
    """
    def read(chunk: list[str]) -> list[dict]:
        try:
            return describe(chunk)
        except ClientError as exc:
            if error_code(exc) not in not_found:
                raise
            if len(chunk) == 1:
                return []
        return [desc for one in chunk for desc in read([one])]

    found: dict[str, dict[str, str]] = {}
    for chunk in chunked(list(ids), size):
        for desc in read(chunk):
            found[desc[id_key]] = tags_to_dict(desc.get("Tags"))
    return found


def paged_ids(client, operation: str, items_key: str, id_key: str, **params) -> list[str]:
    """Every ``id_key`` of ``items_key`` across all pages of a Describe call."""
    return [item[id_key]
            for page in client.get_paginator(operation).paginate(**params)
            for item in page.get(items_key, [])]
