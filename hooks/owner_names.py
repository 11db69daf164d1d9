"""The names of a node's owners (Karpenter, EC2 Auto Scaling, Cluster API, nodewarden), as their APIs spell
them, and the replacement policy's own words."""
from __future__ import annotations

# Owner kinds, in the order a fenced node's owner is looked for.
OWNER_MACHINE = "Machine"  # a nodewarden Machine of a NodePool
OWNER_NODECLAIM = "NodeClaim"  # Karpenter
OWNER_ASG = "AutoScalingGroup"  # EC2 Auto Scaling, EKS managed node groups
OWNER_CAPI_MACHINE = "ClusterAPIMachine"

# Hints: where to look for the owner, never proof of it.
KARPENTER_NODEPOOL_LABEL = "karpenter.sh/nodepool"
ASG_NAME_TAG = "aws:autoscaling:groupName"
CAPI_MACHINE_ANNOTATION = "cluster.x-k8s.io/machine"
CAPI_CLUSTER_NAMESPACE_ANNOTATION = "cluster.x-k8s.io/cluster-namespace"
CAPI_DEPLOYMENT_LABEL = "cluster.x-k8s.io/deployment-name"

# API groups and versions.
NODECLAIM_GROUP = "karpenter.sh"
NODECLAIM_VERSION = "v1"
NODECLAIM_KIND = "NodeClaim"
CAPI_GROUP = "cluster.x-k8s.io"
CAPI_VERSION = "v1beta2"
CAPI_MACHINE_KIND = "Machine"

# Cluster API v1.14 (core/v1beta2, in status.conditions as metav1.Conditions): a MachineHealthCheck sets
# HealthCheckSucceeded=False and, when it leaves remediation to the Machine's owner, OwnerRemediated=False
# with reason WaitingForRemediation. The MachineSet (and KubeadmControlPlane) controller remediates a
# Machine, not being deleted, with both False: it deletes it and makes another. It takes OwnerRemediated
# off again while HealthCheckSucceeded is True (what a MachineHealthCheck watching a healthy Node writes).
CAPI_HEALTH_CHECK_SUCCEEDED = "HealthCheckSucceeded"
CAPI_OWNER_REMEDIATED = "OwnerRemediated"
CAPI_NODE_READY = "NodeReady"
CAPI_UNHEALTHY_NODE_REASON = "UnhealthyNode"  # HealthCheckSucceeded=False: the Node fails the checks
CAPI_WAITING_FOR_REMEDIATION_REASON = "WaitingForRemediation"  # OwnerRemediated=False: the owner's turn

# EC2 Auto Scaling: an instance's lifecycle states and health as DescribeAutoScalingInstances reports them.
ASG_IN_SERVICE = "InService"
ASG_STANDBY = "Standby"
ASG_ENTERING_STANDBY = "EnteringStandby"  # on its way to Standby: EnterStandby was taken
ASG_HEALTHY = "Healthy"
ASG_UNHEALTHY = "Unhealthy"

# NodeFencingPolicy / FencingRequest spec.replacement.
REPLACE_OWNER = "Owner"
REPLACE_NONE = "None"
REPLACE_MODES = (REPLACE_OWNER, REPLACE_NONE)
UNATTRIBUTED_KEEP = "Keep"
UNATTRIBUTED_TERMINATE = "Terminate"
UNATTRIBUTED_CHOICES = (UNATTRIBUTED_KEEP, UNATTRIBUTED_TERMINATE)

# FencingRequest status.replacement.standby.
STANDBY_ENTERED = "Entered"
STANDBY_EXITED = "Exited"
STANDBY_REFUSED = "Refused"  # EnterStandby refused: no reboot; powered off and replaced through the group

# The FencingRequest condition, and its reasons.
OWNER_REPLACEMENT = "OwnerReplacement"
NODECLAIM_DELETED = "NodeClaimDeleted"
INSTANCE_MARKED_UNHEALTHY = "InstanceMarkedUnhealthy"
REMEDIATION_REQUESTED = "RemediationRequested"
REPAIRED_BY_NODEPOOL = "RepairedByNodePool"
INSTANCE_TERMINATED = "InstanceTerminated"
DONE_REASONS = (NODECLAIM_DELETED, INSTANCE_MARKED_UNHEALTHY, REMEDIATION_REQUESTED, REPAIRED_BY_NODEPOOL,
                INSTANCE_TERMINATED)
DISABLED = "Disabled"
UNATTRIBUTED = "Unattributed"
HELD_STORM_GUARD = "StormGuard"
HELD_GROUP_UNHEALTHY = "GroupUnhealthy"
HELD_BUDGET = "Budget"
ERROR = "Error"
ABANDONED = "Abandoned"
NOT_NEEDED = "NodeReadyAgain"  # the node is Ready again after its power-off (a Reboot, or started by someone)
