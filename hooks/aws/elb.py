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


def _chunks(items: list, size: int = BATCH):
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _targets(instance_id: str, ports: list[int]) -> list[dict]:
    return [{"Id": instance_id, "Port": port} for port in sorted(set(ports))]


def deregister_targets(elbv2, target_group_arn: str, instance_id: str, ports: list[int]) -> None:
    for batch in _chunks(_targets(instance_id, ports)):
        try:
            elbv2.deregister_targets(TargetGroupArn=target_group_arn, Targets=batch)
        except ClientError as exc:
            # AWS answers success for an absent target; some implementations say
            # InvalidTarget instead. Either way the target is not registered.
            if error_code(exc) != "InvalidTarget":
                raise


def register_targets(elbv2, target_group_arn: str, instance_id: str, ports: list[int]) -> None:
    for batch in _chunks(_targets(instance_id, ports)):
        elbv2.register_targets(TargetGroupArn=target_group_arn, Targets=batch)


def deregister_instance(elb, load_balancer_name: str, instance_id: str) -> None:
    elb.deregister_instances_from_load_balancer(
        LoadBalancerName=load_balancer_name, Instances=[{"InstanceId": instance_id}]
    )


def register_instance(elb, load_balancer_name: str, instance_id: str) -> None:
    elb.register_instances_with_load_balancer(
        LoadBalancerName=load_balancer_name, Instances=[{"InstanceId": instance_id}]
    )


def target_states(elbv2, target_group_arn: str, instance_id: str, ports: list[int]) -> dict[int, str]:
    """State of the instance's targets per port; 'unused' when not registered at all."""
    try:
        described = elbv2.describe_target_health(
            TargetGroupArn=target_group_arn, Targets=_targets(instance_id, ports)
        )["TargetHealthDescriptions"]
    except ClientError as exc:
        if error_code(exc) == "InvalidTarget":
            return {port: "unused" for port in ports}
        raise
    states = {port: "unused" for port in ports}
    for desc in described:
        target = desc.get("Target", {})
        if target.get("Id") == instance_id and target.get("Port") in states:
            states[target["Port"]] = desc.get("TargetHealth", {}).get("State", "unused")
    return states
