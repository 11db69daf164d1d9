"""The audit after cluster-gc: every resource of a region still tagged for a cluster, found two ways.

- the Resource Groups Tagging API (GetResources, no resource-type filter,
  every page), once per tag that marks a resource as the cluster's
  (``tag_filters``);
- the describe calls of each kind cluster-gc knows: ELBv2 and classic load
  balancers, target groups, security groups, volumes, network interfaces,
  Elastic IPs and instances not terminated, read with the same tags.

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
from typing import Iterable, Mapping

from hooks.aws.gc import classic_elb, elbv2
from hooks.aws.gc.resources import parse_arn, tags_to_dict
from hooks.ec2_names import STATES, TERMINATED, cluster_tag
from hooks.teardown.ownership import CAPA_CLUSTER_TAG_PREFIX, EKS_CLUSTER_TAG, LB_CONTROLLER_CLUSTER_TAG
from hooks.teardown.tasks import CLASSIC_ELB, ELBV2_LB, SG, TG, VOL

TAGGING_API = "tagging-api"
DESCRIBE = "describe"
PAGE_SIZE = 100  # GetResources' maximum ResourcesPerPage

# Kinds cluster-gc collects beyond the load balancers', security groups and volumes.
INSTANCE = "instance"
ENI = "network-interface"
EIP = "elastic-ip"
# The tag the VPC CNI (amazon-vpc-cni-k8s) puts on the ENIs it makes; the value is the cluster's name.
CNI_CLUSTER_TAG = "cluster.k8s.amazonaws.com/name"

# EC2's describe call per kind: (operation, paginated, list key, id key, tags key, state key, extra filters).
_EC2_KINDS = {
    SG: ("describe_security_groups", True, "SecurityGroups", "GroupId", "Tags", None, []),
    VOL: ("describe_volumes", True, "Volumes", "VolumeId", "Tags", "State", []),
    ENI: ("describe_network_interfaces", True, "NetworkInterfaces", "NetworkInterfaceId", "TagSet", "Status", []),
    EIP: ("describe_addresses", False, "Addresses", "AllocationId", "Tags", None, []),
    INSTANCE: ("describe_instances", True, "Reservations", "InstanceId", "Tags", "State",
               [{"Name": "instance-state-name", "Values": [s for s in STATES if s != TERMINATED]}]),
}
DESCRIBED_KINDS = (ELBV2_LB, CLASSIC_ELB, TG, *_EC2_KINDS)


@dataclass(frozen=True)
class TagFilter:
    key: str
    value: str | None = None  # None: any value (owned or shared)

    def matches(self, tags: Mapping[str, str]) -> bool:
        return self.key in tags and (self.value is None or tags[self.key] == self.value)


def tag_filters(cluster_name: str) -> tuple[TagFilter, ...]:
    """The tags that make a resource the cluster's: the cloud controller's and the Machines'
    (``kubernetes.io/cluster/<name>``), the AWS Load Balancer Controller's, the VPC CNI's, CAPA's and EKS's."""
    return (
        TagFilter(cluster_tag(cluster_name)),
        TagFilter(LB_CONTROLLER_CLUSTER_TAG, cluster_name),
        TagFilter(CNI_CLUSTER_TAG, cluster_name),
        TagFilter(f"{CAPA_CLUSTER_TAG_PREFIX}{cluster_name}"),
        TagFilter(EKS_CLUSTER_TAG, cluster_name),
    )


def tagged_for(tags: Mapping[str, str], filters: Iterable[TagFilter]) -> bool:
    return any(f.matches(tags) for f in filters)


def classify_arn(arn: str) -> tuple[str, str]:
    """(kind, id) of an ARN: cluster-gc's kinds as its deleters name them, any other as
    ``<service>:<resource type>`` with the ARN for id."""
    parsed = parse_arn(arn)
    if parsed:
        return parsed
    parts = arn.split(":", 5)
    if len(parts) != 6:
        return "unknown", arn
    service, resource = parts[2], parts[5]
    resource_type, _, ident = resource.replace(":", "/").partition("/")
    if service == "ec2" and resource_type in _EC2_KINDS and ident:
        return resource_type, ident
    return f"{service}:{resource_type}", arn


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


def find(aws, cluster_name: str, region: str) -> list[Found]:
    """Every resource of ``region`` tagged for ``cluster_name``, by the tagging API and by describe calls.

    Raises botocore's errors: an audit that could not ask both ways has no verdict.
    """
    filters = tag_filters(cluster_name)
    found: dict[tuple[str, str], Found] = {}

    def add(kind: str, ident: str, arn: str, tags: dict, state: str | None, way: str) -> None:
        item = found.setdefault((kind, ident), Found(kind, ident))
        item.arn = item.arn or arn
        if way == DESCRIBE:  # the service's own answer, read after the tagging API's
            item.tags, item.state = tags, state
        elif not item.tags:
            item.tags = tags
        item.seen_by.add(way)

    for arn, tags in _tagging(aws.client("resourcegroupstaggingapi", region), filters).items():
        kind, ident = classify_arn(arn)
        add(kind, ident, arn, tags, None, TAGGING_API)
    for kind, ident, arn, tags, state in _described(aws, region, filters):
        add(kind, ident, arn, tags, state, DESCRIBE)
    order = {kind: i for i, kind in enumerate(DESCRIBED_KINDS)}
    return sorted(found.values(), key=lambda f: (order.get(f.kind, len(order)), f.kind, f.id))


def _tagging(client, filters: tuple[TagFilter, ...]) -> dict[str, dict[str, str]]:
    """{ARN: tags} of every resource carrying one of ``filters``, every page of each."""
    found: dict[str, dict[str, str]] = {}
    paginator = client.get_paginator("get_resources")
    for tag in filters:
        wanted = {"Key": tag.key, **({"Values": [tag.value]} if tag.value is not None else {})}
        for page in paginator.paginate(TagFilters=[wanted], ResourcesPerPage=PAGE_SIZE):
            for mapping in page.get("ResourceTagMappingList", []):
                found[mapping["ResourceARN"]] = tags_to_dict(mapping.get("Tags"))
    return found


def _described(aws, region: str, filters: tuple[TagFilter, ...]):
    """(kind, id, arn, tags, state) of each resource the describe calls find tagged for the cluster."""
    client = aws.client("elbv2", region)
    for arn, tags in elbv2.tags_of(client, elbv2.load_balancer_arns(client)).items():
        if tagged_for(tags, filters):
            yield ELBV2_LB, arn, arn, tags, None
    for arn, tags in elbv2.tags_of(client, elbv2.target_group_arns(client)).items():
        if tagged_for(tags, filters):
            yield TG, arn, arn, tags, None
    client = aws.client("elb", region)
    for name, tags in classic_elb.tags_of(client, classic_elb.load_balancer_names(client)).items():
        if tagged_for(tags, filters):
            yield CLASSIC_ELB, name, "", tags, None
    client = aws.client("ec2", region)
    # One call per kind and tag (EC2 filters on tags server-side): every answer holds only the cluster's.
    for kind, (operation, paginated, list_key, id_key, tags_key, state_key, extra) in _EC2_KINDS.items():
        seen: set[str] = set()
        for tag in filters:
            by_tag = ({"Name": "tag-key", "Values": [tag.key]} if tag.value is None
                      else {"Name": f"tag:{tag.key}", "Values": [tag.value]})
            pages = (client.get_paginator(operation).paginate(Filters=[by_tag, *extra]) if paginated
                     else [getattr(client, operation)(Filters=[by_tag, *extra])])
            for page in pages:
                items = page.get(list_key, [])
                if kind == INSTANCE:
                    items = [i for reservation in items for i in reservation.get("Instances", [])]
                for item in items:
                    tags = tags_to_dict(item.get(tags_key))
                    if item[id_key] not in seen and tagged_for(tags, filters):
                        seen.add(item[id_key])
                        yield kind, item[id_key], "", tags, _state(kind, item, state_key)


def _state(kind: str, item: dict, state_key: str | None) -> str | None:
    if kind == INSTANCE:
        return (item.get("State") or {}).get("Name")
    if kind == EIP:
        return "associated" if item.get("AssociationId") else "unassociated"
    return item.get(state_key) if state_key else None


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
