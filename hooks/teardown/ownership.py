"""Which resource a controller of the workload cluster made, from its tags: only that is collected.

``owner_of`` answers who made a resource, or why it is not ours to delete
(a reason of hooks.teardown_names); ``tagged_for`` says whether a resource is
tagged for the cluster at all, by any key its makers use.
"""
from __future__ import annotations

import datetime as dt
from typing import Mapping

from hooks import timefmt
from hooks.ec2_names import OWNED, cluster_tag
from hooks.machine_names import TAG_MACHINE, TAG_MACHINE_UID
from hooks.teardown_names import (KEEP_CAPA, KEEP_EKS, KEEP_LB_CONTROLLER_OFF, KEEP_NOT_MADE_BY_CONTROLLER,
                                  KEEP_NOT_OWNED)
from hooks.teardown.tasks import EC2_INSTANCE, EIP, ENI, SG, VOL

# Tags the cloud controller and the AWS Load Balancer Controller put on what they make (besides the
# cluster's tag, hooks.ec2_names.cluster_tag).
SERVICE_NAME_TAG = "kubernetes.io/service-name"
LB_CONTROLLER_CLUSTER_TAG = "elbv2.k8s.aws/cluster"
EKS_CLUSTER_TAG = "aws:eks:cluster-name"
# CAPA tags what it made itself (security groups, Elastic IPs, its instances) with this
# prefix; CAPA deletes those in its own teardown.
CAPA_CLUSTER_TAG_PREFIX = "sigs.k8s.io/cluster-api-provider-aws/cluster/"
# A volume made by a Kubernetes volume provisioner for a PersistentVolume
# (in-tree provisioner or the EBS CSI driver), not a root disk or a user's.
VOLUME_PROVISIONER_TAGS = ("kubernetes.io/created-for/pv/name", "CSIVolumeName", "ebs.csi.aws.com/cluster")
# The Amazon VPC CNI's tags on every ENI it creates, as amazon-vpc-cni-k8s writes them
# (pkg/awsutils/awsutils.go: eniClusterTagKey, eniNodeTagKey, eniCreatedAtTagKey): the
# cluster's name (only when the CNI's CLUSTER_NAME is set), the instance it was made for,
# and when (RFC 3339).
CNI_CLUSTER_TAG = "cluster.k8s.amazonaws.com/name"
CNI_INSTANCE_TAG = "node.k8s.amazonaws.com/instance_id"
CNI_CREATED_AT_TAG = "node.k8s.amazonaws.com/createdAt"
# The CNI itself deletes an available ENI of its own only this long after createdAt
# (eniDeleteCooldownTime there): before that, it may be about to attach it.
CNI_ENI_COOLDOWN_SECONDS = 300

# Who made a resource.
CLOUD_CONTROLLER = "cloud-controller"
LB_CONTROLLER = "aws-load-balancer-controller"
VOLUME_PROVISIONER = "volume-provisioner"
MACHINE_CONTROLLER = "nodewarden-machine"
VPC_CNI = "vpc-cni"
# An Elastic IP tagged owned for the cluster, and by none of CAPA or EKS: whoever made it did so for the cluster.
CLUSTER_OWNED = "cluster-owned"


def cluster_tag_filters(cluster_name: str) -> tuple[tuple[str, str | None], ...]:
    """Every tag that says a resource is the cluster's, by whoever made it: (key, value; None for any value)."""
    return (
        (cluster_tag(cluster_name), None),
        (LB_CONTROLLER_CLUSTER_TAG, cluster_name),
        (CNI_CLUSTER_TAG, cluster_name),
        (CAPA_CLUSTER_TAG_PREFIX + cluster_name, None),
        (EKS_CLUSTER_TAG, cluster_name),
    )


def tagged_for(tags: Mapping[str, str], cluster_name: str) -> bool:
    """Whether any tag says the resource is the cluster's (``cluster_tag_filters``)."""
    return any(key in tags and (value is None or tags[key] == value)
               for key, value in cluster_tag_filters(cluster_name))


def is_candidate(tags: Mapping[str, str], cluster_name: str, include_lb_controller: bool) -> bool:
    """The discovery filter: tagged for this cluster by a controller whose resources are collected."""
    if tags.get(cluster_tag(cluster_name)) == OWNED or tags.get(CNI_CLUSTER_TAG) == cluster_name:
        return True
    return include_lb_controller and tags.get(LB_CONTROLLER_CLUSTER_TAG) == cluster_name


def owner_of(kind: str, tags: Mapping[str, str], cluster_name: str, include_lb_controller: bool) -> tuple[str, str]:
    """(who made the resource, "") when a controller of the workload cluster did, else ("", why it is kept).

    Only what a controller of the cluster made is collected. What EKS or CAPA
    tagged as theirs is theirs to delete. The cloud controller tags its load
    balancers and target groups with the Service's name; its security groups
    carry only the cluster tag. A Machine's instance carries the Machine's
    tags, a CNI ENI the CNI's, a provisioned volume its provisioner's.
    """
    if tags.get(EKS_CLUSTER_TAG):
        return "", KEEP_EKS
    if any(key.startswith(CAPA_CLUSTER_TAG_PREFIX) for key in tags):
        return "", KEEP_CAPA
    owned = tags.get(cluster_tag(cluster_name)) == OWNED
    not_ours = KEEP_NOT_MADE_BY_CONTROLLER if owned else KEEP_NOT_OWNED
    if kind == ENI:
        if tags.get(CNI_CLUSTER_TAG) == cluster_name:
            return (VPC_CNI, "") if tags.get(CNI_INSTANCE_TAG) else ("", KEEP_NOT_MADE_BY_CONTROLLER)
        return "", not_ours
    if kind == EC2_INSTANCE:
        if owned and tags.get(TAG_MACHINE) and tags.get(TAG_MACHINE_UID):
            return MACHINE_CONTROLLER, ""
        return "", not_ours
    if kind == VOL:
        if owned and any(tags.get(t) for t in VOLUME_PROVISIONER_TAGS):
            return VOLUME_PROVISIONER, ""
        return "", not_ours
    # Load balancers, target groups, security groups and Elastic IPs.
    if owned and kind == EIP:
        return CLUSTER_OWNED, ""
    if owned and (kind == SG or tags.get(SERVICE_NAME_TAG)):
        return CLOUD_CONTROLLER, ""
    if tags.get(LB_CONTROLLER_CLUSTER_TAG) == cluster_name:
        return (LB_CONTROLLER, "") if include_lb_controller else ("", KEEP_LB_CONTROLLER_OFF)
    return "", not_ours


def made_by(kind: str, tags: Mapping[str, str], cluster_name: str, include_lb_controller: bool) -> str | None:
    """Which controller of the workload cluster made this resource, or None to keep it (``owner_of``)."""
    return owner_of(kind, tags, cluster_name, include_lb_controller)[0] or None


def cni_recent(tags: Mapping[str, str], now: dt.datetime) -> bool:
    """Whether the VPC CNI made this ENI less than its cooldown ago.

    An absent or unreadable time is not recent, nor is one far ahead of ``now``
    (a clock skew of a few minutes counts as recent, a bogus date proves nothing).
    """
    age = timefmt.seconds_since(tags.get(CNI_CREATED_AT_TAG), now)
    return age is not None and -CNI_ENI_COOLDOWN_SECONDS < age < CNI_ENI_COOLDOWN_SECONDS
