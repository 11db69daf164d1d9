"""EC2 power for fencing: force a stop, start again, read the state.

Only the state DescribeInstances reports proves a power-off (``stopped`` or
``terminated``); what StopInstances answers is a request accepted, not a
fact. An instance DescribeInstances does not know is no proof either (a
wrong region looks the same), so InstanceNotFound is an error, never "off".
"""
from __future__ import annotations


# The only states that prove a power-off.
OFF_STATES = ("stopped", "terminated")


class InstanceNotFound(LookupError):
    pass


def stop(ec2, instance_id: str) -> str:
    """Force a stop (no OS shutdown: a hung node must not get to write on its way down)."""
    response = ec2.stop_instances(InstanceIds=[instance_id], Force=True)
    return _reported_state(response.get("StoppingInstances"), instance_id)


def start(ec2, instance_id: str) -> str:
    response = ec2.start_instances(InstanceIds=[instance_id])
    return _reported_state(response.get("StartingInstances"), instance_id)


def state(ec2, instance_id: str) -> str:
    """The instance's current state name (pending, running, stopping, stopped, ...)."""
    response = ec2.describe_instances(InstanceIds=[instance_id])
    for reservation in response.get("Reservations") or []:
        for instance in reservation.get("Instances") or []:
            if instance.get("InstanceId") == instance_id:
                return (instance.get("State") or {}).get("Name", "unknown")
    raise InstanceNotFound(f"DescribeInstances did not return {instance_id}")


def _reported_state(changes, instance_id: str) -> str:
    for change in changes or []:
        if change.get("InstanceId") == instance_id:
            return (change.get("CurrentState") or {}).get("Name", "unknown")
    return "unknown"
