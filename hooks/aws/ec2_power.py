"""EC2 power for fencing: force a stop, start again, read the state and the tags that say whose it is.

Only the state DescribeInstances reports proves a power-off (``stopped`` or
``terminated``); what StopInstances answers is a request accepted, not a
fact. An instance DescribeInstances does not know is no proof either (a
wrong region looks the same), so InstanceNotFound is an error, never "off".

Every read is fresh, never the process's cached view: it goes out with the
other fresh reads by id that arrive within the batch window
(``ClusterInstances.fresh_by_id``), as one DescribeInstances by an
instance-id filter. Such a filter leaves out an id EC2 does not know where
``InstanceIds`` would fail the call, so the id missing from the answer is
what InstanceNotFound stands for. A failed batch read is its every
caller's error.

A Node's providerID is the node's own claim: an instance is this cluster's to
power off or on only when it carries the cluster's tag
(``hooks.ec2_names.cluster_tagged``).
"""
from __future__ import annotations

from hooks.aws.instance_view import ClusterInstances


class InstanceNotFound(LookupError):
    pass


def stop(ec2, instance_id: str) -> str:
    """Power off now: no OS shutdown, so the fence never waits for the node it fences, and a node that is only
    partly hung gets no chance to write on its way down.

    ``Force`` alone would first attempt a graceful shutdown and force the stop only after EC2's timeout;
    ``SkipOsShutdown`` skips that attempt. ``Force`` stays for an instance stuck in ``stopping``.
    """
    response = ec2.stop_instances(InstanceIds=[instance_id], Force=True, SkipOsShutdown=True)
    return _reported_state(response.get("StoppingInstances"), instance_id)


def start(ec2, instance_id: str) -> str:
    response = ec2.start_instances(InstanceIds=[instance_id])
    return _reported_state(response.get("StartingInstances"), instance_id)


def describe(instances: ClusterInstances, region: str | None, instance_id: str) -> dict:
    """The instance as DescribeInstances answers now (``instances.summary``: ``state``, ``tags`` and
    ``privateIp`` among its fields)."""
    found = instances.fresh_by_id(region or "", instance_id)
    if found is None:
        raise InstanceNotFound(f"DescribeInstances does not know {instance_id} in {region or 'the default region'}")
    return found


def state(instances: ClusterInstances, region: str | None, instance_id: str) -> str:
    """The instance's current state name (pending, running, stopping, stopped, ...)."""
    return describe(instances, region, instance_id)["state"]


def _reported_state(changes, instance_id: str) -> str:
    for change in changes or []:
        if change.get("InstanceId") == instance_id:
            return (change.get("CurrentState") or {}).get("Name", "unknown")
    return "unknown"
