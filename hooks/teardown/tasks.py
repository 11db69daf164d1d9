"""GC tasks, the order they run in, and the resource kinds each one collects.

Tasks keep CAPA's names (``aws.cluster.x-k8s.io/external-resource-tasks-gc``)
plus our own: ``instance``, ``network-interface``, ``elastic-ip`` and the
opt-in ``volume``. They run in ``TASK_ORDER``: an instance holds ENIs,
Elastic IPs, volumes and security groups; a load balancer holds its target
groups (listeners) and its security groups (ENIs); an ENI holds its security
groups and the Elastic IP associated with it. So each can only go after what
holds it.
"""
from __future__ import annotations

INSTANCE = "instance"
LOAD_BALANCER = "load-balancer"
TARGET_GROUP = "target-group"
NETWORK_INTERFACE = "network-interface"
ELASTIC_IP = "elastic-ip"
SECURITY_GROUP = "security-group"
VOLUME = "volume"

TASK_ORDER = (INSTANCE, LOAD_BALANCER, TARGET_GROUP, NETWORK_INTERFACE, ELASTIC_IP, SECURITY_GROUP, VOLUME)
# What is collected when the tasks annotation is absent or empty: CAPA's three, and what
# a cluster's own controllers leave that keeps the VPC alive. EBS volumes hold data, so
# they are collected only when asked for by name.
DEFAULT_TASKS = (INSTANCE, LOAD_BALANCER, TARGET_GROUP, NETWORK_INTERFACE, ELASTIC_IP, SECURITY_GROUP)

# Resource kinds: one deleter each (see hooks.aws.gc.DELETERS).
EC2_INSTANCE = "instance"
ELBV2_LB = "elbv2-load-balancer"
CLASSIC_ELB = "classic-load-balancer"
TG = "target-group"
ENI = "network-interface"
EIP = "elastic-ip"
SG = "security-group"
VOL = "volume"

KIND_TASK = {
    EC2_INSTANCE: INSTANCE,
    ELBV2_LB: LOAD_BALANCER,
    CLASSIC_ELB: LOAD_BALANCER,
    TG: TARGET_GROUP,
    ENI: NETWORK_INTERFACE,
    EIP: ELASTIC_IP,
    SG: SECURITY_GROUP,
    VOL: VOLUME,
}
TASK_KINDS = {task: tuple(k for k, t in KIND_TASK.items() if t == task) for task in TASK_ORDER}
# A resource's place in the order of deletion: its task's, then its kind, then its id.
TASK_RANK = {task: i for i, task in enumerate(TASK_ORDER)}


def deletion_order(resource: dict) -> tuple:
    """The sort key of a resource record (``{"kind", "id", …}``) in the order of deletion."""
    return (TASK_RANK[KIND_TASK[resource["kind"]]], resource["kind"], resource["id"])
