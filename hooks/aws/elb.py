"""ELBv2 target groups and classic ELBs: register, deregister, target state.

Every function is idempotent and makes one call per load balancer (batched
by 200 targets), never one call per target.
"""
from __future__ import annotations

from botocore.exceptions import ClientError

from hooks.aws.clients import error_code

BATCH = 200
# States in which a target no longer gets new traffic and has finished draining.
GONE_STATES = ("unused",)
# The load balancer or target group itself no longer exists: whatever we
# wanted from it (out, drained) is true, and there is nothing to rejoin.
GONE_CODES = ("TargetGroupNotFound", "LoadBalancerNotFound")
# What register/deregister report when the load balancer was already gone.
GONE = "gone"


def _chunks(items: list, size: int = BATCH):
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _targets(instance_id: str, ports: list[int]) -> list[dict]:
    return [{"Id": instance_id, "Port": port} for port in sorted(set(ports))]


def _gone(exc: ClientError) -> bool:
    return error_code(exc) in GONE_CODES


def _unless_gone(call, forgiven: tuple[str, ...] = (), **params) -> str | None:
    """One call; GONE when its load balancer no longer exists, None when done or ``forgiven``."""
    try:
        call(**params)
    except ClientError as exc:
        if _gone(exc):
            return GONE
        if error_code(exc) not in forgiven:
            raise
    return None


def deregister_targets(elbv2, target_group_arn: str, instance_id: str, ports: list[int]) -> str | None:
    """Out of the target group; GONE when the group no longer exists (out all the same).

    AWS answers success for an absent target; some implementations say
    InvalidTarget instead. Either way the target is not registered.
    """
    for batch in _chunks(_targets(instance_id, ports)):
        if _unless_gone(elbv2.deregister_targets, ("InvalidTarget",), TargetGroupArn=target_group_arn,
                        Targets=batch) == GONE:
            return GONE
    return None


def register_targets(elbv2, target_group_arn: str, instance_id: str, ports: list[int]) -> str | None:
    """Back into the target group; GONE when it no longer exists (nothing to rejoin)."""
    for batch in _chunks(_targets(instance_id, ports)):
        if _unless_gone(elbv2.register_targets, TargetGroupArn=target_group_arn, Targets=batch) == GONE:
            return GONE
    return None


def deregister_instance(elb, load_balancer_name: str, instance_id: str) -> str | None:
    return _unless_gone(elb.deregister_instances_from_load_balancer, LoadBalancerName=load_balancer_name,
                        Instances=[{"InstanceId": instance_id}])


def register_instance(elb, load_balancer_name: str, instance_id: str) -> str | None:
    return _unless_gone(elb.register_instances_with_load_balancer, LoadBalancerName=load_balancer_name,
                        Instances=[{"InstanceId": instance_id}])


def target_states(elbv2, target_group_arn: str, instance_id: str, ports: list[int]) -> dict[int, str]:
    """State of the instance's targets per port; 'unused' when not registered at all."""
    try:
        described = elbv2.describe_target_health(
            TargetGroupArn=target_group_arn, Targets=_targets(instance_id, ports)
        )["TargetHealthDescriptions"]
    except ClientError as exc:
        if error_code(exc) == "InvalidTarget" or _gone(exc):
            return {port: "unused" for port in ports}  # not registered, or no group left to drain from
        raise
    states = {port: "unused" for port in ports}
    for desc in described:
        target = desc.get("Target", {})
        if target.get("Id") == instance_id and target.get("Port") in states:
            states[target["Port"]] = desc.get("TargetHealth", {}).get("State", "unused")
    return states
