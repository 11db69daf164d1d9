"""Prometheus metrics shared by every controller.

Under gunicorn each worker is a process; set PROMETHEUS_MULTIPROC_DIR to an
empty writable directory and /metrics aggregates all workers.
"""
from __future__ import annotations

import os

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import multiprocess

from hooks import events

HOOK_LATENCY = Histogram(
    "nodewarden_hook_duration_seconds",
    "Time to serve one Metacontroller hook call.",
    ["controller", "hook", "code"],
    # No bound more than 1.7 times the one below, so a percentile read off the buckets is close.
    buckets=(0.001, 0.0015, 0.0025, 0.004, 0.006, 0.01, 0.015, 0.025, 0.04, 0.06, 0.1, 0.15, 0.25, 0.4, 0.6,
             1, 1.5, 2.5, 4, 6, 10),
)
HOOK_REQUEST_BYTES = Histogram(
    "nodewarden_hook_request_bytes",
    "Size of the request bodies Metacontroller sends, refused ones (413) included.",
    ["controller", "hook"],
    buckets=(1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864),
)
HOOK_AUTH_REFUSED = Counter(
    "nodewarden_hook_auth_refused_total",
    "Hook requests refused before their body was read: no or a wrong bearer token, a client certificate"
    " whose names are not allowed, no token readable, a failed TLS handshake (reason=tls), a handshake and"
    " request head not whole in time (reason=stalled) or a head too large (reason=head-too-large).",
    ["reason"],
)
AWS_CALLS = Counter(
    "nodewarden_aws_calls_total",
    "AWS API calls by service, operation and outcome (ok, or the error code).",
    ["service", "operation", "outcome"],
)
AWS_RATE_LIMITED = Counter(
    "nodewarden_aws_rate_limited_total",
    "AWS calls not sent: this process's share of the bucket had no token within the hook call's wait.",
    ["bucket", "operation"],
)
AWS_RATE_WAIT_SECONDS = Histogram(
    "nodewarden_aws_rate_wait_seconds",
    "Seconds an AWS call waited for a token of this process's share of its bucket.",
    ["bucket", "operation"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5),
)
BACKGROUND_READS = Counter(
    "nodewarden_aws_background_reads_total",
    "AWS reads made on a thread of their own while the last answer serves the hooks, by read"
    " (instance-types, zone-offerings) and outcome (ok, or the error code).",
    ["read", "outcome"],
)
ACTIONS = Counter(
    "nodewarden_actions_total",
    "Side effects carried out by controllers.",
    ["controller", "kind", "outcome"],
)
EVENTS = Counter(
    "nodewarden_events_total",
    "Kubernetes Events the controllers reported, by controller, reason and type (Normal, Warning);"
    " the alerts on detaching, fencing and cluster-gc read their reasons.",
    ["controller", "reason", "type"],
)
EVENTS_DROPPED = Counter(
    "nodewarden_events_dropped_total",
    "Kubernetes Events not sent: rate limited per object, or the send queue was full.",
    ["why"],
)
STORM_GUARD = Gauge(
    "nodewarden_fencing_storm_guard_active",
    "1 while a NodeFencingPolicy holds new fencing back because too many nodes are unhealthy.",
    ["policy"],
    # Each gunicorn worker sets it when it serves the policy's sync; the latest
    # write is the truth ("max" would keep a released guard at 1 forever).
    multiprocess_mode="mostrecent",
)
OWNER_REPLACEMENTS = Counter(
    "nodewarden_owner_replacements_total",
    "Fenced nodes by owner kind (NodeClaim, AutoScalingGroup, ClusterAPIMachine, Machine, None) and outcome"
    " (NodeClaimDeleted, InstanceMarkedUnhealthy, RemediationRequested, RepairedByNodePool, InstanceTerminated,"
    " Unattributed, Abandoned, NodeReadyAgain).",
    ["kind", "outcome"],
)
MACHINE_EVENTS = Counter(
    "nodewarden_machine_events_total",
    "Machine lifecycle events by node pool: launched, registration-timeout, no-capacity, leaked-instance-terminated,"
    " instance-gone, node-gone, terminated.",
    ["nodepool", "event"],
)

MACHINES_DISRUPTED = Counter(
    "nodewarden_machines_disrupted_total",
    "Machines a NodePool started to disrupt, by reason: Repair, Drifted, Expired, SpotInterruption,"
    " InstanceStopping, RebalanceRecommendation, ScheduledChange, StatusImpaired, Empty, Underutilized.",
    ["nodepool", "reason"],
)
REPLACEMENT_SECONDS = Histogram(
    "nodewarden_machine_replacement_seconds",
    "Time from a disruption's signal (the EC2 notice, the fence confirmed, drift or expiry seen) to its"
    " replacement Machine Initialized.",
    ["nodepool", "reason"],
    buckets=(1, 2, 5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 600, 1200, 3600),
)
PROVISIONED_PODS = Counter(
    "nodewarden_provisioning_pods_total",
    "Pending pods a provisioning NodePool placed on a Machine it created for them.",
    ["nodepool"],
)
MACHINES_LAUNCHED = Counter(
    "nodewarden_machines_launched_total",
    "Machines a NodePool created, by reason: Provisioning (for pending pods), Replacement (for a disrupted"
    " Machine), Replicas (a static pool's count).",
    ["nodepool", "reason"],
)
PROVISIONING_DECISION_SECONDS = Histogram(
    "nodewarden_provisioning_decision_seconds",
    "Time a provisioning round takes to decide, from its readings to the Machines to create.",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
PROVISIONED_REQUEST_RATIO = Histogram(
    "nodewarden_provisioned_request_ratio",
    "For each Machine a provisioning NodePool created, the requests of the pods it was made for over its"
    " allocatable, by resource (cpu, memory).",
    ["nodepool", "resource"],
    buckets=(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1),
)
CONSOLIDATIONS = Counter(
    "nodewarden_consolidations_total",
    "Machines a provisioning NodePool consolidated, by reason: Empty, Underutilized.",
    ["nodepool", "reason"],
)
INTERRUPTION_MESSAGES = Counter(
    "nodewarden_interruption_messages_total",
    "Interruption messages and status checks by kind (SpotInterruption, RebalanceRecommendation,"
    " ScheduledChange, InstanceStopping, StatusImpaired, unknown) and outcome (recorded, duplicate, ignored,"
    " unknown, malformed, foreign, unconfirmed, waiting: left on the queue for its Machine); see"
    " docs/interruptions.md.",
    ["kind", "outcome"],
)


# The Events the alerts count (kustomize/components/prometheus-rules), as
# (controller, reason, type). Their series exist at 0 from the start, so the
# first one after a restart is an increase Prometheus sees, not a new series.
ALERTED_EVENTS = (
    ("node-detacher", events.DETACHED, "Warning"),
    ("node-detacher", events.DETACH_ABANDONED, "Warning"),
    ("node-detacher", events.DETACH_FAILED, "Warning"),
    ("fencing-request", events.FENCING_FAILED, "Warning"),
    ("fencing-request", events.RECOVERY_TIMED_OUT, "Warning"),
    ("node-fencing-policy", events.STORM_GUARD_HOLDING, "Warning"),
    ("machine", events.REGISTRATION_TIMED_OUT, "Warning"),
    ("nodepool", events.LEAKED_INSTANCE_TERMINATED, "Warning"),
    ("cluster-gc", events.GC_BLOCKED, "Warning"),
    ("cluster-gc", events.GC_RETRYING, "Warning"),
    ("cluster-gc", events.EXTERNAL_RESOURCES_LEFT, "Warning"),
    ("fencing-request", events.OWNER_REPLACEMENT_ABANDONED, "Warning"),
)
DROP_REASONS = ("rate limited", "queue full")


def zero_alerted_series() -> None:
    for labels in ALERTED_EVENTS:
        EVENTS.labels(*labels)
    for why in DROP_REASONS:
        EVENTS_DROPPED.labels(why)


def record_action(controller: str, kind: str, ok: bool) -> None:
    ACTIONS.labels(controller, kind, "ok" if ok else "error").inc()


def exposition() -> bytes:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry)
    return generate_latest()
