"""ELBv2 target groups and classic ELBs: register, deregister, target state.

Every function is idempotent and makes one call per load balancer (batched
by 200 targets), never one call per target.
"""
from __future__ import annotations

import threading
import time

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


def group_states(elbv2, target_group_arn: str) -> dict[tuple[str, int], str]:
    """Every target of a group and its state, in one call; {} when the group is gone."""
    try:
        described = elbv2.describe_target_health(TargetGroupArn=target_group_arn)["TargetHealthDescriptions"]
    except ClientError as exc:
        if _gone(exc):
            return {}  # no group left to drain from
        raise
    states = {}
    for desc in described:
        target = desc.get("Target", {})
        if isinstance(target.get("Id"), str) and isinstance(target.get("Port"), int):
            states[(target["Id"], target["Port"])] = desc.get("TargetHealth", {}).get("State", "unused")
    return states


class HealthBoard:
    """Target states per target group, read once for every node draining from it.

    When hundreds of nodes leave at once, each would otherwise ask about its
    own targets in every group it was in: calls grow with nodes times groups.
    Here one DescribeTargetHealth of a group answers every node that asks
    within ``max_age`` seconds, so the calls grow with the groups alone. A
    reading older than what the caller already knows (``not_before``, when
    its detach began) is never used: it could predate the deregistration.
    A target a reading does not list is not registered ('unused').
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._readings: dict[tuple[str, str], tuple[float, dict]] = {}
        self._reading_locks: dict[tuple[str, str], threading.Lock] = {}

    def states(self, elbv2, region: str, target_group_arn: str, instance_id: str, ports: list[int], *,
               max_age: float, not_before: float) -> dict[int, str]:
        key = (region, target_group_arn)
        reading = self._fresh(key, max_age, not_before)
        if reading is None:
            with self._reading_locks.setdefault(key, threading.Lock()):
                reading = self._fresh(key, max_age, not_before)  # another thread may have just read it
                if reading is None:
                    reading = group_states(elbv2, target_group_arn)
                    with self._lock:
                        self._readings[key] = (time.time(), reading)
        return {port: reading.get((instance_id, port), "unused") for port in ports}

    def _fresh(self, key, max_age: float, not_before: float) -> dict | None:
        with self._lock:
            found = self._readings.get(key)
        if found is None:
            return None
        read_at, reading = found
        if read_at < not_before or time.time() - read_at > max_age:
            return None
        return reading

    def clear(self) -> None:
        with self._lock:
            self._readings.clear()


HEALTH = HealthBoard()
