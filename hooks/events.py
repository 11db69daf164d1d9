"""Kubernetes Events: every reason, and the one Event type a hook's Plan carries (pure).

Sending them is hooks.kube.event_recorder's: after the hook has answered,
aggregated, rate-limited and bounded. An Event is a report, never progress.
"""
from __future__ import annotations

from dataclasses import dataclass, field

# ------------------------------------------------------------------ reasons
# node-detacher
DETACHING = "Detaching"
DEREGISTERED = "Deregistered"
DETACHED = "Detached"
DETACH_FAILED = "DetachFailed"
DETACH_SKIPPED = "DetachSkipped"
DETACH_ABANDONED = "DetachAbandoned"
EVICTING_PODS = "EvictingPods"
REATTACHED = "Reattached"
REATTACH_ABANDONED = "ReattachAbandoned"
DAEMONSET_POD_TERMINATING = "DaemonSetPodTerminating"
DAEMONSET_POD_READY = "DaemonSetPodReady"
DAEMONSET_POD_REQUEST_ENDED = "DaemonSetPodRequestEnded"
# node: a Node handed over from node-detacher and node-fencing (hooks/handover/)
ATTACHMENT_CLAIMED = "AttachmentClaimed"
DECORATOR_FINALIZERS_REMOVED = "DecoratorFinalizersRemoved"
HAND_OVER_FAILED = "HandOverFailed"
# node-fencing
FENCING_TRIAGED = "FencingTriaged"
FENCING_REQUIRED = "FencingRequired"
FENCING_HELD_BACK = "FencingHeldBack"
FENCING_SKIPPED = "FencingSkipped"
FENCING_CLEARED = "FencingCleared"
NODE_FENCED = "NodeFenced"
FAILED_OVER = "FailedOver"
FAILOVER_FAILED = "FailoverFailed"
FENCING_ACTION_FAILED = "FencingActionFailed"
# node-fencing-policy
INVALID_SPEC = "InvalidSpec"
STORM_GUARD_HOLDING = "StormGuardHolding"
STORM_GUARD_RELEASED = "StormGuardReleased"
# fencing-request
FENCING_STARTED = "FencingStarted"
FENCING_QUEUED = "FencingQueued"
STOP_REQUESTED = "StopRequested"
START_REQUESTED = "StartRequested"
POWERED_OFF = "PoweredOff"
POWERED_ON = "PoweredOn"
OUT_OF_SERVICE_TAINT_APPLIED = "OutOfServiceTaintApplied"
OUT_OF_SERVICE_TAINT_KEPT = "OutOfServiceTaintKept"
OUT_OF_SERVICE_TAINT_REMOVED = "OutOfServiceTaintRemoved"
RESOURCES_DELETED = "ResourcesDeleted"
RECOVERY_TIMED_OUT = "RecoveryTimedOut"
FENCING_COMPLETE = "FencingComplete"
FENCING_FAILED = "FencingFailed"
# fencing-request: the fenced node's owner asked to replace it
OWNER_REPLACEMENT_REQUESTED = "OwnerReplacementRequested"
OWNER_REPLACEMENT_HELD = "OwnerReplacementHeld"
OWNER_REPLACEMENT_ABANDONED = "OwnerReplacementAbandoned"
NODE_UNATTRIBUTED = "NodeUnattributed"
STANDBY_ENTERED = "InstanceStandbyEntered"
STANDBY_EXITED = "InstanceStandbyExited"
STANDBY_REFUSED = "InstanceStandbyRefused"
# cluster-gc
GC_SKIPPED = "ExternalResourceGCSkipped"
GC_BLOCKED = "ExternalResourceGCBlocked"
GC_RETRYING = "ExternalResourceGCRetrying"
RESOURCES_COLLECTED = "ExternalResourcesCollected"
EXTERNAL_RESOURCES_DELETED = "ExternalResourcesDeleted"
EXTERNAL_RESOURCES_LEFT = "ExternalResourcesLeft"
# machine, nodepool
LAUNCH_REQUESTED = "LaunchRequested"
INSTANCE_LAUNCHED = "InstanceLaunched"
INSTANCE_FOUND = "InstanceFound"
LAUNCH_FAILED = "LaunchFailed"
INSUFFICIENT_CAPACITY = "InsufficientCapacity"  # EC2 refused every instance type and subnet of a Machine
DUPLICATE_INSTANCE = "DuplicateInstanceTerminated"
NODE_REGISTERED = "NodeRegistered"
NODE_PROVIDER_ID_MISMATCH = "NodeProviderIDMismatch"
NODE_PROVIDER_ID_CONFLICT = "NodeProviderIDConflict"
NODE_GONE = "NodeGone"
INSTANCE_NOT_OWNED = "InstanceNotOwned"
MACHINE_INITIALIZED = "MachineInitialized"
REGISTRATION_TIMED_OUT = "RegistrationTimedOut"
INSTANCE_GONE = "InstanceGone"
MACHINE_TERMINATING = "MachineTerminating"
NODE_CORDONED = "NodeCordoned"
DRAIN_TIMED_OUT = "DrainTimedOut"
DRAIN_BLOCKED = "DrainBlockedByPodDisruptionBudget"
VOLUME_DETACH_TIMED_OUT = "VolumeDetachTimedOut"
INSTANCE_TERMINATE_REQUESTED = "InstanceTerminateRequested"
INSTANCE_TERMINATED = "InstanceTerminated"
NODE_DELETED = "NodeDeleted"
MACHINE_ACTION_FAILED = "MachineActionFailed"
MACHINE_CREATED = "MachineCreated"
MACHINE_REMOVED = "MachineRemoved"
LEAKED_INSTANCE_TERMINATED = "LeakedInstanceTerminated"
# interruption
INTERRUPTION_RECORDED = "InterruptionRecorded"
INTERRUPTION_POLL_FAILED = "InterruptionPollFailed"
INTERRUPTION_ACTION_FAILED = "InterruptionActionFailed"
# Disruption: a Machine chosen to go (on the Machine), its pool starting it and its replacement ready.
MACHINE_DISRUPTED = "MachineDisrupted"
MACHINE_INTERRUPTED = "MachineInterrupted"
INTERRUPTION_RETIRED = "InterruptionRetired"  # a stop EC2 no longer agrees with, taken off the Machine
DISRUPTION_STARTED = "DisruptionStarted"
REPLACEMENT_INITIALIZED = "ReplacementInitialized"
# Provisioning NodePools: on a pod, a Machine will run it, or no pool can; on a Machine, the pods it was made for;
# on a pool, a Machine it consolidates.
NOMINATED = "Nominated"
FAILED_PROVISIONING = "FailedProvisioning"
PROVISIONED = "Provisioned"
CONSOLIDATION = "Consolidating"

MESSAGE_LIMIT = 1024


def ref(obj: dict) -> dict:
    """The involved-object reference of a Kubernetes object (a dict); only string fields are kept."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    found = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "name": meta.get("name"),
             "namespace": meta.get("namespace"), "uid": meta.get("uid")}
    return {k: v for k, v in found.items() if isinstance(v, str) and v}


def node_ref(name: str, uid: str | None = None) -> dict:
    return {"apiVersion": "v1", "kind": "Node", "name": name, **({"uid": uid} if uid else {})}


def pod_ref(namespace: str, name: str, uid: str | None = None) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "name": name, "namespace": namespace, **({"uid": uid} if uid else {})}


@dataclass(frozen=True)
class Event:
    """One Event to send. ``about`` is an involved-object reference; None means the hook's parent."""

    reason: str
    message: str
    warning: bool = False
    about: dict | None = field(default=None, hash=False, compare=True)

    def to_dict(self) -> dict:
        out = {"reason": self.reason, "message": self.message[:MESSAGE_LIMIT]}
        if self.warning:
            out["warning"] = True
        if self.about is not None:
            out["about"] = self.about
        return out


def normal(reason: str, message: str, about: dict | None = None) -> Event:
    return Event(reason, message[:MESSAGE_LIMIT], False, about)


def warning(reason: str, message: str, about: dict | None = None) -> Event:
    return Event(reason, message[:MESSAGE_LIMIT], True, about)
