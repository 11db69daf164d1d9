"""Which resource a controller of the workload cluster made, from its tags: only that is collected."""
from __future__ import annotations

from typing import Mapping

from hooks.ec2_names import OWNED, cluster_tag
from hooks.teardown.tasks import CLASSIC_ELB, ELBV2_LB, SG, TG, VOL

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
