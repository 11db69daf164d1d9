"""EC2 Auto Scaling for a fenced node's group: where an instance belongs, and asking the group to replace it.

Each step reads the instance's membership first (DescribeAutoScalingInstances)
and answers GONE when no group holds it any more (or another group does):
whatever the step was for is then none of the group's business. A step
already taken answers DONE without calling again, so a retried call is
harmless.

EnterStandby with ShouldDecrementDesiredCapacity=True is refused while the
group would fall below its minimum size (AWS answers a ValidationError that
names the sizes); ``enter_standby`` raises StandbyRefused then, before the
call when the group's sizes already say so, so the caller can tell a refusal
from a failure (``hooks.aws.clients.error_code`` of it is "StandbyRefused").
"""
from __future__ import annotations

from botocore.exceptions import ClientError

from hooks.aws.clients import error_code
from hooks.owner_names import ASG_ENTERING_STANDBY, ASG_STANDBY, ASG_UNHEALTHY

DONE = "done"
GONE = "gone"


class StandbyRefused(RuntimeError):
    """EnterStandby refused: taking the instance out of the group's capacity would put it below its minimum."""


def _health(value) -> str:
    # DescribeAutoScalingInstances answers HEALTHY/UNHEALTHY, DescribeAutoScalingGroups Healthy/Unhealthy.
    return value.capitalize() if isinstance(value, str) else ""


def describe_instance(client, instance_id: str) -> dict | None:
    """``{"group", "lifecycleState", "health", "instanceId"}`` of the instance as Auto Scaling reports it now;
    None when no group holds it. ``health`` is Healthy or Unhealthy."""
    response = client.describe_auto_scaling_instances(InstanceIds=[instance_id])
    for found in response.get("AutoScalingInstances") or []:
        if found.get("InstanceId") == instance_id:
            return {"group": found.get("AutoScalingGroupName"), "lifecycleState": found.get("LifecycleState"),
                    "health": _health(found.get("HealthStatus")), "instanceId": instance_id}
    return None


def describe_group(client, name: str) -> dict | None:
    """``{"name", "min", "max", "desired", "instances": [{"instanceId", "lifecycleState", "health"}]}`` of the
    group now; None when it does not exist."""
    response = client.describe_auto_scaling_groups(AutoScalingGroupNames=[name])
    for group in response.get("AutoScalingGroups") or []:
        if group.get("AutoScalingGroupName") == name:
            return {"name": name, "min": group.get("MinSize"), "max": group.get("MaxSize"),
                    "desired": group.get("DesiredCapacity"),
                    "instances": [{"instanceId": i.get("InstanceId"), "lifecycleState": i.get("LifecycleState"),
                                   "health": _health(i.get("HealthStatus"))}
                                  for i in group.get("Instances") or []]}
    return None


def _member(client, group: str | None, instance_id: str) -> dict | None:
    """The instance's membership now, if it is in ``group`` (in any group when None)."""
    found = describe_instance(client, instance_id)
    if found is None or (group is not None and found["group"] != group):
        return None
    return found


def set_unhealthy(client, instance_id: str) -> str:
    """Mark the instance Unhealthy in its group, grace period or not: the group terminates and replaces it."""
    found = _member(client, None, instance_id)
    if found is None:
        return GONE
    if found["health"] == ASG_UNHEALTHY:
        return DONE
    try:
        client.set_instance_health(InstanceId=instance_id, HealthStatus=ASG_UNHEALTHY, ShouldRespectGracePeriod=False)
    except ClientError:
        if _member(client, None, instance_id) is None:  # it left its group meanwhile
            return GONE
        raise
    return DONE


def enter_standby(client, group: str, instance_id: str) -> str:
    """Put the instance in Standby, taking it out of the group's desired capacity, so that the group neither
    counts it unhealthy while it is stopped nor launches another for it. Raises StandbyRefused when the group
    is at its minimum size."""
    found = _member(client, group, instance_id)
    if found is None:
        return GONE
    if found["lifecycleState"] in (ASG_STANDBY, ASG_ENTERING_STANDBY):
        return DONE
    sizes = describe_group(client, group)
    if sizes is None:
        return GONE
    if isinstance(sizes["desired"], int) and isinstance(sizes["min"], int) and sizes["desired"] - 1 < sizes["min"]:
        raise StandbyRefused(f"Auto Scaling group {group} is at its minimum size ({sizes['min']}, desired "
                             f"{sizes['desired']}): {instance_id} cannot leave its capacity for Standby")
    try:
        client.enter_standby(AutoScalingGroupName=group, InstanceIds=[instance_id], ShouldDecrementDesiredCapacity=True)
    except ClientError as exc:
        message = exc.response.get("Error", {}).get("Message", "")
        if error_code(exc) == "ValidationError" and "min-size" in message:
            raise StandbyRefused(f"Auto Scaling group {group} refused Standby for {instance_id}: {message}") from exc
        now = _member(client, group, instance_id)
        if now is None:
            return GONE
        if now["lifecycleState"] in (ASG_STANDBY, ASG_ENTERING_STANDBY):
            return DONE
        raise
    return DONE


def replace_from_standby(client, group: str, instance_id: str) -> str:
    """Return the instance from Standby to service and mark it Unhealthy there, so the group replaces it."""
    if exit_standby(client, group, instance_id) == GONE:
        return GONE
    return set_unhealthy(client, instance_id)


def exit_standby(client, group: str, instance_id: str) -> str:
    """Return the instance from Standby to service (the group's desired capacity grows by one again)."""
    found = _member(client, group, instance_id)
    if found is None:
        return GONE
    if found["lifecycleState"] not in (ASG_STANDBY, ASG_ENTERING_STANDBY):
        return DONE  # back in service already (Pending, InService), or on its way out of the group
    try:
        client.exit_standby(AutoScalingGroupName=group, InstanceIds=[instance_id])
    except ClientError:
        now = _member(client, group, instance_id)
        if now is None:
            return GONE
        if now["lifecycleState"] not in (ASG_STANDBY, ASG_ENTERING_STANDBY):
            return DONE
        raise
    return DONE
