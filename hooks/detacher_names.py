"""Names kept from mumoshu/node-detacher (users migrate) and our own progress keys."""

# From node-detacher: keep these exact names.
DETACHING = "node-detacher.variant.run/detaching"
POD_PRIORITY = "node-detacher.variant.run/deletion-priority"
DAEMONSET_POD_PRIORITY = "node-detacher.variant.run/pod-deletion-priority"
MANAGED_BY = "node-detacher.variant.run/managed-by"
CONDITION = "NodeBeingDetached"
# The taint that keeps evicted DaemonSet pods from coming back (the original's contract).
DETACHING_TAINT = "node-detacher.variant.run/detaching"

# Kubernetes: the service controller and the AWS Load Balancer Controller skip nodes with it.
# kube-controller-manager's taint for a cordoned node (spec.unschedulable).
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
EXCLUDE_LABEL = "node.kubernetes.io/exclude-from-external-load-balancers"
EXCLUDE_VALUE = "nodewarden"

# Our progress, recorded on the Node so the next call sees it.
SINCE = "nodewarden.io/detaching-since"
REASON = "nodewarden.io/detach-reason"
DEREGISTERED = "nodewarden.io/deregistered"
# What is about to leave: written on the Node before any of it is sent to AWS, so whatever becomes of the
# calls and their record, a re-attach knows what to register.
DEREGISTERING = "nodewarden.io/deregistering"
# When the exclude step handed its deregistrations over (written with the label, only then).
DEREGISTERING_SINCE = "nodewarden.io/deregistering-since"
DETACHED_AT = "nodewarden.io/detached-at"
ERROR = "nodewarden.io/detach-error"
ATTEMPTS = "nodewarden.io/detach-attempts"
FOR_POD = "nodewarden.io/detach-for-pod"
FOR_POD_SINCE = "nodewarden.io/detach-for-pod-since"
REATTACH_FAILING_SINCE = "nodewarden.io/reattach-failing-since"

# Left by a re-attach on a node back in service: what it registered, to register once more when no
# deregistration sent before it can still land (REJOIN_AT).
REJOIN = "nodewarden.io/rejoin"
REJOIN_AT = "nodewarden.io/rejoin-at"

OUR_ANNOTATIONS = (DETACHING, SINCE, REASON, DEREGISTERED, DEREGISTERING, DEREGISTERING_SINCE, DETACHED_AT, ERROR,
                   ATTEMPTS, REATTACH_FAILING_SINCE)
REJOIN_ANNOTATIONS = (REJOIN, REJOIN_AT)

ATTACHMENT_API = "nodewarden.io/v1alpha1"
ATTACHMENT_KIND = "Attachment"
NODE_LABEL = "nodewarden.io/node"

