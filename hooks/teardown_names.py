"""The names cluster-gc shares with CAPA, clusterctl, Metacontroller and users: keep them stable."""
from __future__ import annotations

from hooks.config import Settings
from hooks.contract import decorator_finalizer

# Names CAPA uses for the opt-out, the task list and the cluster label.
GC_ANNOTATION = "aws.cluster.x-k8s.io/external-resource-gc"
TASKS_ANNOTATION = "aws.cluster.x-k8s.io/external-resource-tasks-gc"
CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"
MANAGED_CONTROL_PLANE = "AWSManagedControlPlane"
PARENT_KINDS = ("AWSCluster", MANAGED_CONTROL_PLANE)
# clusterctl move sets this on the objects it deletes from the source cluster
# after copying them: the cluster lives on elsewhere, its resources with it.
DELETE_FOR_MOVE = "clusterctl.cluster.x-k8s.io/delete-for-move"

# Our progress, on the parent while it is held.
REMAINING = "cluster-gc.nodewarden.io/remaining"
LAST_ERROR = "cluster-gc.nodewarden.io/last-error"
STALLED_SINCE = "cluster-gc.nodewarden.io/stalled-since"
PROGRESS_ANNOTATIONS = (REMAINING, LAST_ERROR, STALLED_SINCE)


def finalizer(settings: Settings) -> str:
    """The finalizer Metacontroller puts on the objects of this DecoratorController."""
    return decorator_finalizer(settings.gc_controller_name)
