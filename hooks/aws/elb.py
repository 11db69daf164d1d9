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


# A target of a group with no reading at hand taken since the caller's detach began: it waits as for a draining one.
UNREAD = "unread"


class HealthBoard:
    """Target states per target group, read once for every node draining from it.

    When hundreds of nodes leave at once, each would otherwise ask about its
    own targets in every group it was in: calls grow with nodes times groups.
    Here one DescribeTargetHealth of a group answers every node that asks
    within ``max_age`` seconds, so the calls grow with the groups alone. A
    reading begun before what the caller already knows (``not_before``, when
    its detach began) is never used: it could predate the deregistration.
    A target a reading does not list is not registered ('unused').

    One group is read at a time per process, and a caller that finds a read
    under way does not wait for it: it is answered from the latest reading
    it may use, older than ``max_age`` or none (UNREAD). Either only makes it
    wait longer, never stop early (a target out of a group stays out while
    its node is detached). So a read under way holds one hook thread, not
    every caller's, and the rate of reads is bounded by how fast the API
    answers them.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._reader = threading.Lock()
        self._readings: dict[tuple[str, str], tuple[float, dict]] = {}

    def states(self, elbv2, region: str, target_group_arn: str, instance_id: str, ports: list[int], *,
               max_age: float, not_before: float, may_read: bool = True) -> dict[int, str]:
        key = (region, target_group_arn)
        reading, age = self._usable(key, not_before)
        if (reading is None or age > max_age) and may_read and self._reader.acquire(blocking=False):
            try:
                reading, age = self._usable(key, not_before)  # another thread may have just read it
                if reading is None or age > max_age:
                    began = time.time()
                    reading = group_states(elbv2, target_group_arn)
                    with self._lock:
                        self._readings[key] = (began, reading)
            finally:
                self._reader.release()
        if reading is None:
            return {port: UNREAD for port in ports}
        return {port: reading.get((instance_id, port), "unused") for port in ports}

    def _usable(self, key, not_before: float) -> tuple[dict | None, float]:
        """The latest reading begun at or after ``not_before``, and its age."""
        with self._lock:
            found = self._readings.get(key)
        if found is None or found[0] < not_before:
            return None, 0.0
        return found[1], time.time() - found[0]

    def clear(self) -> None:
        with self._lock:
            self._readings.clear()


HEALTH = HealthBoard()
