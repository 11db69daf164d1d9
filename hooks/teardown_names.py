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
# Since when the deletion waits for resources of the cluster to be free (hooks.teardown.progress).
WAITING_SINCE = "cluster-gc.nodewarden.io/waiting-since"
# What AWS refused to delete as in use on the last call (``kind/id``, comma-separated): held by something
# cluster-gc does not delete (another cluster's load balancer, a hand-made rule), so waited for like an
# attachment, within the same wait limit.
REFUSED_IN_USE = "cluster-gc.nodewarden.io/refused-in-use"
PROGRESS_ANNOTATIONS = (REMAINING, LAST_ERROR, STALLED_SINCE, WAITING_SINCE, REFUSED_IN_USE)


def finalizer(settings: Settings) -> str:
    """The finalizer Metacontroller puts on the objects of this DecoratorController."""
    return decorator_finalizer(settings.gc_controller_name)


# Why a resource tagged for the cluster is not deleted (hooks.teardown.plan): said by the plan,
# the audit and the progress annotations, so users can grep for them.
KEEP_NOT_OWNED = "not tagged owned for this cluster"
KEEP_NOT_MADE_BY_CONTROLLER = "tagged for this cluster, but not made by one of its controllers"
KEEP_LB_CONTROLLER_OFF = "the AWS Load Balancer Controller's, which is not included (NODEWARDEN_GC_INCLUDE_LB_CONTROLLER)"
KEEP_CAPA = "CAPA's own: CAPA deletes it in its own teardown"
KEEP_EKS = "EKS's own: EKS deletes it with the cluster"
KEEP_TASK_OFF = "its task is not selected"
KEEP_IN_USE = "in use (attached, associated or terminating): waited for"
KEEP_RECENT = "made by the VPC CNI moments ago, which may still attach it: waited for"
KEEP_REFUSED_IN_USE = "refused as in use by something cluster-gc does not delete: tried again, and waited for"
KEEP_GONE = "already gone"
KEEP_REASONS = (KEEP_NOT_OWNED, KEEP_NOT_MADE_BY_CONTROLLER, KEEP_LB_CONTROLLER_OFF, KEEP_CAPA, KEEP_EKS,
                KEEP_TASK_OFF, KEEP_IN_USE, KEEP_RECENT, KEEP_GONE)
# Kept for now only: cluster-gc deletes these once they are free, and holds the cluster meanwhile.
WAITED_FOR = (KEEP_IN_USE, KEEP_RECENT)
