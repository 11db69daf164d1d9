"""Ownership: the instance behind the Node is this cluster's to power off or on.

The Node's providerID is the node's own claim. Only the instance's tag
``kubernetes.io/cluster/<NODEWARDEN_CLUSTER_NAME>`` = ``owned`` or ``shared``
(``hooks.ec2_names.cluster_tagged``), as DescribeInstances answered this call,
lets a power-off be issued or confirmed, a destructive recovery step go on, or a Reboot's start be issued;
the power actions read it again right before they run (``ClusterInstance``).
Without a cluster name, no instance is this cluster's.
"""
from __future__ import annotations

from hooks.ec2_names import cluster_tag, cluster_tagged
from hooks.fencing.request_phases.state import Step
from hooks.plan import ClusterInstance


def ours(step: Step) -> bool:
    """Whether this call's DescribeInstances proves the instance this cluster's; fails the request when it
    proves the opposite, waits (bounded) when it proves nothing."""
    instance = step.provider.get("instanceID")
    cluster = step.settings.cluster_name
    if not cluster:
        step.fail("ClusterNameUnset", "NODEWARDEN_CLUSTER_NAME is not set: no instance can be proven this "
                                      "cluster's, so none is powered off or on")
        return False
    seen = step.observed.get("instance") if isinstance(step.observed.get("instance"), dict) else {}
    if seen.get("notFound"):
        step.fail("InstanceNotFound", f"DescribeInstances does not know instance {instance} in "
                                      f"{step.provider.get('region') or 'the default region'}")
        return False
    tags = seen.get("tags")
    if not isinstance(tags, dict):
        step.cannot_tell("InstanceUnavailable", f"the tags of instance {instance} could not be read",
                         str(seen.get("error") or "not described"))
        return False
    if not cluster_tagged(tags, cluster):
        step.fail("NotClusterInstance", f"instance {instance} is not tagged {cluster_tag(cluster)}=owned or shared: "
                                        "it is not this cluster's to power off")
        return False
    return True


def proof(step: Step) -> tuple:
    """The precondition every power action carries: still this cluster's right before it runs."""
    return (ClusterInstance(step.provider["instanceID"], step.settings.cluster_name,
                            step.provider.get("region") or None),)
