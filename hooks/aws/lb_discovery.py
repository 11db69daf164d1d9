"""Which load balancers each instance of the cluster is in.

Sources: target groups and classic ELBs tagged for this cluster by the cloud
controller (``kubernetes.io/cluster/<name>``) or the AWS Load Balancer
Controller (``elbv2.k8s.aws/cluster=<name>``), found through the tagging API,
plus untagged ones named in configuration (Terraform). One pass reads every
member of every such load balancer, so the result serves all nodes: it is
cached per region for NODEWARDEN_DISCOVERY_CACHE_SECONDS, and each node's
Attachment is filled from it. No per-node scan of the region.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from hooks.config import Settings

_TYPES = ["elasticloadbalancing:loadbalancer", "elasticloadbalancing:targetgroup"]
# Targets in these states are already leaving; a detach has nothing to do for them.
_LEAVING = ("draining", "unused")
_PARALLEL_READS = 8


@dataclass
class Index:
    built_at: float
    members: dict[str, set] = field(default_factory=dict)  # instance id -> memberships
    target_groups: int = 0
    classic_elbs: int = 0

    def memberships(self, instance_id: str) -> list[tuple]:
        return sorted(self.members.get(instance_id, set()))


def classify_arn(arn: str) -> tuple[str, str] | None:
    """('tg', arn) for a target group, ('elb', name) for a classic ELB, None for ELBv2 LBs."""
    _, _, resource = arn.partition(":elasticloadbalancing:")
    resource = resource.split(":", 2)[-1] if resource else ""
    if resource.startswith("targetgroup/"):
        return ("tg", arn)
    if resource.startswith("loadbalancer/"):
        rest = resource[len("loadbalancer/"):]
        if rest.split("/", 1)[0] in ("app", "net", "gwy"):
            return None  # ELBv2 load balancers: their target groups are tagged too
        return ("elb", rest)
    return None


def tagged_load_balancers(tagging, settings: Settings) -> tuple[set[str], set[str]]:
    """(target group ARNs, classic ELB names) tagged for this cluster, every page."""
    filters = [[{"Key": f"kubernetes.io/cluster/{settings.cluster_name}"}]]
    if settings.include_lb_controller:
        filters.append([{"Key": "elbv2.k8s.aws/cluster", "Values": [settings.cluster_name]}])
    tgs, elbs = set(), set()
    paginator = tagging.get_paginator("get_resources")
    for tag_filters in filters:
        for page in paginator.paginate(TagFilters=tag_filters, ResourceTypeFilters=_TYPES, ResourcesPerPage=100):
            for item in page.get("ResourceTagMappingList", []):
                kind = classify_arn(item.get("ResourceARN", ""))
                if kind and kind[0] == "tg":
                    tgs.add(kind[1])
                elif kind:
                    elbs.add(kind[1])
    return tgs, elbs


def build_index(aws, region: str, settings: Settings) -> Index:
    tgs: set[str] = set(settings.static_target_groups)
    elbs: set[str] = set(settings.static_classic_elbs)
    if settings.cluster_name:
        tagged_tgs, tagged_elbs = tagged_load_balancers(aws.client("resourcegroupstaggingapi", region), settings)
        tgs |= tagged_tgs
        elbs |= tagged_elbs
    index = Index(built_at=time.monotonic(), target_groups=len(tgs), classic_elbs=len(elbs))
    if tgs:
        elbv2 = aws.client("elbv2", region)
        # One DescribeTargetHealth per group; in parallel, since a hook must answer
        # in well under 2 s even for clusters with a hundred target groups.
        with ThreadPoolExecutor(max_workers=min(_PARALLEL_READS, len(tgs))) as pool:
            healths = pool.map(lambda arn: (arn, elbv2.describe_target_health(TargetGroupArn=arn)), sorted(tgs))
            for arn, health in healths:
                for desc in health["TargetHealthDescriptions"]:
                    target = desc.get("Target", {})
                    state = desc.get("TargetHealth", {}).get("State")
                    if str(target.get("Id", "")).startswith("i-") and state not in _LEAVING and target.get("Port"):
                        index.members.setdefault(target["Id"], set()).add(("tg", arn, int(target["Port"])))
    names = sorted(elbs)
    elb = aws.client("elb", region) if names else None
    for i in range(0, len(names), 20):
        described = elb.describe_load_balancers(LoadBalancerNames=names[i : i + 20])
        for lb in described.get("LoadBalancerDescriptions", []):
            for inst in lb.get("Instances", []):
                index.members.setdefault(inst["InstanceId"], set()).add(("elb", lb["LoadBalancerName"]))
    return index


class IndexCache:
    """Per-process, per-region cache; one build at a time per region."""

    def __init__(self):
        self._lock = threading.Lock()
        self._indexes: dict[str, Index] = {}
        self._building: dict[str, threading.Lock] = {}

    def get(self, aws, region: str, settings: Settings) -> Index:
        with self._lock:
            index = self._indexes.get(region)
            if index and time.monotonic() - index.built_at < settings.discovery_cache_seconds:
                return index
            build_lock = self._building.setdefault(region, threading.Lock())
        with build_lock:
            with self._lock:
                index = self._indexes.get(region)
                if index and time.monotonic() - index.built_at < settings.discovery_cache_seconds:
                    return index
            index = build_index(aws, region, settings)
            with self._lock:
                self._indexes[region] = index
            return index

    def clear(self) -> None:
        with self._lock:
            self._indexes.clear()


CACHE = IndexCache()
