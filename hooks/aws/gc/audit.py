"""The audit after cluster-gc: every resource of a region still tagged for a cluster, found two ways.

- the Resource Groups Tagging API (GetResources, no resource-type filter,
  every page), once per tag that makes a resource the cluster's
  (hooks.teardown.ownership.cluster_tag_filters);
- the describe calls of each kind cluster-gc knows: ELBv2 and classic load
  balancers, target groups, and EC2's instances not terminated, network
  interfaces, Elastic IPs, security groups and volumes, read with the same
  tags.

Each resource says which way found it. What only the tagging API lists, of a
kind the describe calls cover, is gone: the API goes on listing resources
deleted or terminated moments ago. What only the describe calls find exists:
the API lags behind new resources, and does not cover every type. Resources
of other kinds (a VPC, a subnet, a listener) only the tagging API can list;
they count as there.

``judge`` then compares what is there with what a saved plan said cluster-gc
keeps (by kind and id): the rest are leftovers.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from hooks.aws.gc import classic_elb, ec2, elbv2, tagging
from hooks.aws.gc.discovery import EC2_KINDS
from hooks.aws.gc.resources import parse_arn
from hooks.teardown.ownership import cluster_tag_filters, tagged_for
from hooks.teardown.tasks import CLASSIC_ELB, ELBV2_LB, KIND_TASK, TG, deletion_order

TAGGING_API = "tagging-api"
DESCRIBE = "describe"
DESCRIBED_KINDS = (ELBV2_LB, CLASSIC_ELB, TG, *EC2_KINDS)


def classify_arn(arn: str) -> tuple[str, str]:
    """(kind, id) of an ARN: cluster-gc's kinds as its deleters name them, any other as
    ``<service>:<resource type>`` with the ARN for id."""
    parsed = parse_arn(arn)
    if parsed:
        return parsed
    parts = arn.split(":", 5)
    if len(parts) != 6:
        return "unknown", arn
    resource_type = parts[5].replace(":", "/").partition("/")[0]
    return f"{parts[2]}:{resource_type}", arn


# ------------------------------------------------------------------- finding


@dataclass
class Found:
    kind: str
    id: str
    arn: str = ""
    tags: dict = field(default_factory=dict)
    state: str | None = None
    seen_by: set = field(default_factory=set)

    @property
    def key(self) -> tuple[str, str]:
        return (self.kind, self.id)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "id": self.id, "arn": self.arn, "tags": dict(sorted(self.tags.items())),
                "state": self.state, "seenBy": sorted(self.seen_by)}


def _order(item: Found) -> tuple:
    if item.kind in KIND_TASK:
        return (0, *deletion_order({"kind": item.kind, "id": item.id}))
    return (1, item.kind, item.id)


def find(aws, cluster_name: str, region: str) -> list[Found]:
    """Every resource of ``region`` tagged for ``cluster_name``, by the tagging API and by describe calls.

    Raises botocore's errors: an audit that could not ask both ways has no verdict.
    """
    found: dict[tuple[str, str], Found] = {}

    def add(kind: str, ident: str, arn: str, tags: dict, state: str | None, way: str) -> None:
        item = found.setdefault((kind, ident), Found(kind, ident))
        item.arn = item.arn or arn
        if way == DESCRIBE:  # the service's own answer, read after the tagging API's
            item.tags, item.state = tags, state
        elif not item.tags:
            item.tags = tags
        item.seen_by.add(way)

    client = aws.client("resourcegroupstaggingapi", region)
    for key, value in cluster_tag_filters(cluster_name):
        for arn, tags in tagging.resources_tagged(client, key, [value] if value is not None else []).items():
            kind, ident = classify_arn(arn)
            add(kind, ident, arn, tags, None, TAGGING_API)
    for kind, ident, arn, tags, state in _described(aws, region, cluster_name):
        add(kind, ident, arn, tags, state, DESCRIBE)
    return sorted(found.values(), key=_order)


def _described(aws, region: str, cluster_name: str):
    """(kind, id, arn, tags, state) of each resource the describe calls find tagged for the cluster."""
    client = aws.client("elbv2", region)
    for arn, tags in elbv2.tags_of(client, elbv2.load_balancer_arns(client)).items():
        if tagged_for(tags, cluster_name):
            yield ELBV2_LB, arn, arn, tags, None
    for arn, tags in elbv2.tags_of(client, elbv2.target_group_arns(client)).items():
        if tagged_for(tags, cluster_name):
            yield TG, arn, arn, tags, None
    client = aws.client("elb", region)
    for name, tags in classic_elb.tags_of(client, classic_elb.load_balancer_names(client)).items():
        if tagged_for(tags, cluster_name):
            yield CLASSIC_ELB, name, "", tags, None
    client = aws.client("ec2", region)
    # One call per kind and tag: EC2 filters on tags server-side.
    for kind in EC2_KINDS:
        seen: dict[str, dict] = {}
        for key, value in cluster_tag_filters(cluster_name):
            seen.update(ec2.tagged(client, kind, key, value))
        for ident, item in seen.items():
            yield kind, ident, "", item["tags"], item["state"]
# ------------------------------------------------------------------- verdict


@dataclass(frozen=True)
class AuditReport:
    cluster_name: str
    region: str
    leftovers: list[Found]  # there, and no plan said it is kept
    kept: list[tuple[Found, str]]  # there, as the plan said, with the plan's reason
    gone: list[Found]  # listed by the tagging API only, of a kind describe covers: deleted moments ago

    @property
    def clean(self) -> bool:
        return not self.leftovers

    @property
    def tagging_only(self) -> list[Found]:
        """There, though only the tagging API lists it (a kind no describe call covers)."""
        return [f for f in self.leftovers + [k for k, _ in self.kept] if f.seen_by == {TAGGING_API}]

    @property
    def describe_only(self) -> list[Found]:
        """There, though the tagging API does not list it (it lags, or does not cover the type)."""
        return [f for f in self.leftovers + [k for k, _ in self.kept] if f.seen_by == {DESCRIBE}]

    def to_dict(self) -> dict:
        return {
            "cluster": self.cluster_name,
            "region": self.region,
            "clean": self.clean,
            "leftovers": [f.to_dict() for f in self.leftovers],
            "kept": [{**f.to_dict(), "reason": reason} for f, reason in self.kept],
            "goneButListedByTaggingApi": [f.to_dict() for f in self.gone],
            "listedByTaggingApiOnly": [f.to_dict() for f in self.tagging_only],
            "foundByDescribeOnly": [f.to_dict() for f in self.describe_only],
        }


def judge(cluster_name: str, region: str, found: list[Found],
          expected_kept: Mapping[tuple[str, str], str] | None = None) -> AuditReport:
    """Leftovers: what is there that ``expected_kept`` ((kind, id) -> the plan's reason) does not hold."""
    expected_kept = expected_kept or {}
    leftovers, kept, gone = [], [], []
    for item in found:
        if item.seen_by == {TAGGING_API} and item.kind in DESCRIBED_KINDS:
            gone.append(item)
        elif item.key in expected_kept:
            kept.append((item, expected_kept[item.key]))
        else:
            leftovers.append(item)
    return AuditReport(cluster_name, region, leftovers, kept, gone)
