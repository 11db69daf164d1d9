"""Names kept from the Node Fencing KEP and Kubernetes, and our own."""
from __future__ import annotations

import hashlib

API_GROUP = "nodewarden.io"
API_VERSION = "nodewarden.io/v1alpha1"
POLICY_KIND = "NodeFencingPolicy"
REQUEST_KIND = "FencingRequest"

# The KEP's NodeConditions and taints: keep these exact names.
TRIAGED = "FencingTriaged"
REQUIRED = "FencingRequired"
COMPLETE = "FencingComplete"
OUR_CONDITIONS = (TRIAGED, REQUIRED, COMPLETE)
TRIAGED_TAINT = "node.kubernetes.io/fencingtriaged"  # PreferNoSchedule
REQUIRED_TAINT = "node.kubernetes.io/fencingrequired"  # NoSchedule
OUR_TAINTS = {TRIAGED_TAINT: "PreferNoSchedule", REQUIRED_TAINT: "NoSchedule"}

# Kubernetes (stable since 1.28): kube-controller-manager force-deletes the
# terminating pods of a NotReady node with this taint and detaches its volumes.
OUT_OF_SERVICE_TAINT = "node.kubernetes.io/out-of-service"
OUT_OF_SERVICE_VALUE = "nodeshutdown"
OUT_OF_SERVICE_EFFECT = "NoExecute"


# Pods that may fail over at once, without waiting for fencing.
FAILOVER_LABEL = "nodewarden.io/failover"
FAILOVER_IMMEDIATE = "immediate"

# On the Node: the last error of an action the node-fencing hook could not carry out.
ERROR_ANNOTATION = "nodewarden.io/fencing-error"
# On the Node: the countedAt of the policy count that admitted it for fencing (written by the policy
# controller, so the Node is synced at once on a count it can see; a hint, never a permission).
COUNT_ANNOTATION = "nodewarden.io/fencing-count"
# On FencingRequests the node-fencing hook creates.
POLICY_ANNOTATION = "nodewarden.io/fencing-policy"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "nodewarden"

# FencingRequest: actions, strategies, phases and condition types.
ACTION_OFF = "Off"
ACTION_REBOOT = "Reboot"
ACTIONS = (ACTION_OFF, ACTION_REBOOT)
OUT_OF_SERVICE = "OutOfServiceTaint"
RESOURCE_DELETION = "ResourceDeletion"
STRATEGIES = (OUT_OF_SERVICE, RESOURCE_DELETION)

PENDING = "Pending"
POWERING_OFF = "PoweringOff"
RECOVERING = "Recovering"
POWERING_ON = "PoweringOn"
SUCCEEDED = "Succeeded"
FAILED = "Failed"
FINISHED_PHASES = (SUCCEEDED, FAILED)
PHASES = (PENDING, POWERING_OFF, RECOVERING, POWERING_ON, SUCCEEDED, FAILED)

FENCING_SUCCEEDED = "FencingSucceeded"  # power-off confirmed: the node can no longer write
RECOVERED = "Recovered"
COMPLETE_CONDITION = "Complete"
FAILED_CONDITION = "Failed"
QUEUED_CONDITION = "Queued"  # another request for the same node is fencing it first
VERIFIED_CONDITION = "Verified"  # False while the API server cannot confirm the request and its Node

# Taint bookkeeping on the FencingRequest status (recovery.outOfServiceTaint).
TAINT_APPLIED = "Applied"
TAINT_REMOVED = "Removed"

# NodeFencingPolicy status condition.
STORM_GUARD = "StormGuard"
POLICY_VALID = "Valid"


_MAX_NAME = 253


def request_name(node_name: str) -> str:
    """The FencingRequest of a node: ``fence-<node>``, hashed when too long."""
    name = f"fence-{node_name}"
    if len(name) <= _MAX_NAME:
        return name
    digest = hashlib.sha256(node_name.encode()).hexdigest()[:10]
    return f"{name[: _MAX_NAME - 11].rstrip('.-')}-{digest}"
