"""What cluster-gc collects: resource kinds, GC tasks, and who made a resource.

Pure functions only; discovery (I/O) and deletion live in the per-service
modules beside this one.

Tasks keep CAPA's names (``aws.cluster.x-k8s.io/external-resource-tasks-gc``)
plus our opt-in ``volume``. They run in ``TASK_ORDER``: a load balancer holds
its target groups (listeners) and its security groups (ENIs), so those can
only go after it.
"""
from __future__ import annotations

from typing import Mapping

from hooks.ec2_names import OWNED, cluster_tag

LOAD_BALANCER = "load-balancer"
TARGET_GROUP = "target-group"
SECURITY_GROUP = "security-group"
VOLUME = "volume"

TASK_ORDER = (LOAD_BALANCER, TARGET_GROUP, SECURITY_GROUP, VOLUME)
# What CAPA collects when the tasks annotation is absent or empty. EBS volumes
# hold data, so they are collected only when asked for by name.
DEFAULT_TASKS = (LOAD_BALANCER, TARGET_GROUP, SECURITY_GROUP)

# Resource kinds: one deleter each (see hooks.aws.gc.DELETERS).
ELBV2_LB = "elbv2-load-balancer"
CLASSIC_ELB = "classic-load-balancer"
TG = "target-group"
SG = "security-group"
VOL = "volume"

KIND_TASK = {
    ELBV2_LB: LOAD_BALANCER,
    CLASSIC_ELB: LOAD_BALANCER,
    TG: TARGET_GROUP,
    SG: SECURITY_GROUP,
    VOL: VOLUME,
}
TASK_KINDS = {task: tuple(k for k, t in KIND_TASK.items() if t == task) for task in TASK_ORDER}

# Tags the cloud controller and the AWS Load Balancer Controller put on what they make (besides the
# cluster's tag, hooks.ec2_names.cluster_tag).
SERVICE_NAME_TAG = "kubernetes.io/service-name"
LB_CONTROLLER_CLUSTER_TAG = "elbv2.k8s.aws/cluster"
EKS_CLUSTER_TAG = "aws:eks:cluster-name"
# CAPA tags the security groups it made itself with this prefix; CAPA deletes
# those in its own network teardown, after the instances using them are gone.
CAPA_CLUSTER_TAG_PREFIX = "sigs.k8s.io/cluster-api-provider-aws/cluster/"
# A volume made by a Kubernetes volume provisioner for a PersistentVolume
# (in-tree provisioner or the EBS CSI driver), not a root disk or a user's.
VOLUME_PROVISIONER_TAGS = ("kubernetes.io/created-for/pv/name", "CSIVolumeName", "ebs.csi.aws.com/cluster")

# Who made a resource.
CLOUD_CONTROLLER = "cloud-controller"
LB_CONTROLLER = "aws-load-balancer-controller"
VOLUME_PROVISIONER = "volume-provisioner"


def parse_arn(arn: str) -> tuple[str, str] | None:
    """(kind, id) of an ARN the collector knows, else None.

    The id is what the delete call takes: the ARN for ELBv2 load balancers
    and target groups, the name for a classic ELB, the sg-/vol- id for EC2.
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
        if resource.startswith("security-group/"):
            return SG, resource[len("security-group/"):]
        if resource.startswith("volume/"):
            return VOL, resource[len("volume/"):]
    return None


def is_candidate(tags: Mapping[str, str], cluster_name: str, include_lb_controller: bool) -> bool:
    """The discovery filter: tagged for this cluster by either controller."""
    if tags.get(cluster_tag(cluster_name)) == OWNED:
        return True
    return include_lb_controller and tags.get(LB_CONTROLLER_CLUSTER_TAG) == cluster_name


def made_by(kind: str, tags: Mapping[str, str], cluster_name: str, include_lb_controller: bool) -> str | None:
    """Which controller of the workload cluster made this resource, or None to keep it.

    Only what a controller of the cluster made is collected: the cloud
    controller tags its load balancers and target groups with the Service's
    name; its security groups carry only the cluster tag, so there the tags
    of EKS and of CAPA itself are what rule a group out.
    """
    owned = tags.get(cluster_tag(cluster_name)) == OWNED
    by_lb_controller = include_lb_controller and tags.get(LB_CONTROLLER_CLUSTER_TAG) == cluster_name
    if kind == SG:
        if tags.get(EKS_CLUSTER_TAG) or any(k.startswith(CAPA_CLUSTER_TAG_PREFIX) for k in tags):
            return None
        if owned:
            return CLOUD_CONTROLLER
        return LB_CONTROLLER if by_lb_controller else None
    if kind == VOL:
        if owned and any(tags.get(t) for t in VOLUME_PROVISIONER_TAGS):
            return VOLUME_PROVISIONER
        return None
    if kind in (ELBV2_LB, CLASSIC_ELB, TG):
        if owned and tags.get(SERVICE_NAME_TAG):
            return CLOUD_CONTROLLER
        return LB_CONTROLLER if by_lb_controller else None
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
    from botocore.exceptions import ClientError

    from hooks.aws.clients import error_code

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
    from botocore.exceptions import ClientError

    from hooks.aws.clients import error_code

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
