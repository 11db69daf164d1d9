"""The names EC2 and the clusters on it share: the tag that makes an instance (or a load balancer, a
security group, a volume) a cluster's, and the states an instance is in."""
from __future__ import annotations

# The tag the AWS cloud provider and the Machine controller put on what is a cluster's:
# ``kubernetes.io/cluster/<cluster name>`` = ``owned`` (the cluster made it) or ``shared``.
CLUSTER_TAG_PREFIX = "kubernetes.io/cluster/"
OWNED = "owned"
SHARED = "shared"
CLUSTER_TAG_VALUES = (OWNED, SHARED)

# Instance states, as DescribeInstances and the state-change events name them.
PENDING = "pending"
RUNNING = "running"
STOPPING = "stopping"
STOPPED = "stopped"
SHUTTING_DOWN = "shutting-down"
TERMINATED = "terminated"
STATES = (PENDING, RUNNING, STOPPING, STOPPED, SHUTTING_DOWN, TERMINATED)
# The only states that prove a power-off.
OFF_STATES = (STOPPED, TERMINATED)
# An instance in one of these will never run again.
GONE_STATES = (SHUTTING_DOWN, TERMINATED)
# The instance is going: stopped or on its way to it, or gone.
LEAVING_STATES = (STOPPING, STOPPED, SHUTTING_DOWN, TERMINATED)
# Every state but the gone ones.
KEPT_STATES = (PENDING, RUNNING, STOPPING, STOPPED)

# RunInstances errors that say EC2 cannot give this instance type, in this subnet, at this capacity type,
# now: a refusal for capacity, after which another instance type or subnet may still launch.
CAPACITY_ERRORS = frozenset({
    "InsufficientInstanceCapacity", "Unsupported", "InsufficientCapacity", "UnsupportedOperation",
    "InsufficientHostCapacity", "InsufficientReservedInstanceCapacity", "VcpuLimitExceeded",
    "SpotMaxPriceTooLow", "MaxSpotInstanceCountExceeded",
})


def cluster_tag(cluster_name: str) -> str:
    return f"{CLUSTER_TAG_PREFIX}{cluster_name}"


def cluster_owned(tags: dict, cluster_name: str) -> bool:
    """Whether the tags say the cluster owns the instance (``owned``, not ``shared``); no cluster name, no
    instance is."""
    return bool(cluster_name) and tags.get(cluster_tag(cluster_name)) == OWNED


def cluster_tagged(tags: dict, cluster_name: str) -> bool:
    """Whether the tags make the instance this cluster's, made by it or shared with it; no cluster name,
    no instance is."""
    return bool(cluster_name) and tags.get(cluster_tag(cluster_name)) in CLUSTER_TAG_VALUES
