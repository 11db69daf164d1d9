"""EC2 power for fencing: force a stop, start again, read the state and the tags that say whose it is.

Only the state DescribeInstances reports proves a power-off (``stopped`` or
``terminated``); what StopInstances answers is a request accepted, not a
fact. An instance DescribeInstances does not know is no proof either (a
wrong region looks the same), so InstanceNotFound is an error, never "off".

A Node's providerID is the node's own claim: an instance is this cluster's to
power off or on only when it carries the cluster's tag
(``hooks.ec2_names.cluster_tagged``).
"""
from __future__ import annotations

from botocore.exceptions import ClientError

from hooks.aws.clients import error_code

_NOT_FOUND = ("InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed")


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


def describe(ec2, instance_id: str) -> dict:
    """``{"state", "tags", "privateIp"}`` of the instance as DescribeInstances answers now."""
    try:
        response = ec2.describe_instances(InstanceIds=[instance_id])
    except ClientError as exc:
        if error_code(exc) in _NOT_FOUND:
            raise InstanceNotFound(f"DescribeInstances does not know {instance_id}") from exc
        raise
    for reservation in response.get("Reservations") or []:
        for instance in reservation.get("Instances") or []:
            if instance.get("InstanceId") == instance_id:
                return {"state": (instance.get("State") or {}).get("Name", "unknown"),
                        "tags": {t.get("Key"): t.get("Value") for t in instance.get("Tags") or []
                                 if isinstance(t.get("Key"), str)},
                        "privateIp": instance.get("PrivateIpAddress")}
    raise InstanceNotFound(f"DescribeInstances did not return {instance_id}")


def state(ec2, instance_id: str) -> str:
    """The instance's current state name (pending, running, stopping, stopped, ...)."""
    return describe(ec2, instance_id)["state"]


def _reported_state(changes, instance_id: str) -> str:
    for change in changes or []:
        if change.get("InstanceId") == instance_id:
            return (change.get("CurrentState") or {}).get("Name", "unknown")
    return "unknown"
