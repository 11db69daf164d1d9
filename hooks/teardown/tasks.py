"""GC tasks, the order they run in, and the resource kinds each one collects.

Tasks keep CAPA's names (``aws.cluster.x-k8s.io/external-resource-tasks-gc``)
plus our opt-in ``volume``. They run in ``TASK_ORDER``: a load balancer holds
its target groups (listeners) and its security groups (ENIs), so those can
only go after it.
"""
from __future__ import annotations

LOAD_BALANCER = "load-balancer"
TARGET_GROUP = "target-group"
SECURITY_GROUP = "security-group"
VOLUME = "volume"

TASK_ORDER = (LOAD_BALANCER, TARGET_GROUP, SECURITY_GROUP, VOLUME)
# What CAPA collects when the tasks annotation is absent or empty. EBS volumes
# hold data, so they are collected only when asked for by name.
DEFAULT_TASKS = (LOAD_BALANCER, TARGET_GROUP, SECURITY_GROUP)

# Resource kinds: one deleter each (see hooks.aws.gc.DELETERS).
ELBV2_LB = "elbv2-load-balancer"
CLASSIC_ELB = "classic-load-balancer"
TG = "target-group"
SG = "security-group"
VOL = "volume"

KIND_TASK = {
    ELBV2_LB: LOAD_BALANCER,
    CLASSIC_ELB: LOAD_BALANCER,
    TG: TARGET_GROUP,
    SG: SECURITY_GROUP,
    VOL: VOLUME,
}
TASK_KINDS = {task: tuple(k for k, t in KIND_TASK.items() if t == task) for task in TASK_ORDER}
