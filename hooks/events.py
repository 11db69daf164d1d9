"""Kubernetes Events: every reason, one Event type, one recorder.

A hook decides which Events to send (``Event`` values in its Plan); the
recorder sends them after the hook has answered, off the request path, the way
client-go's recorder does:

- aggregated: the same reason and message about the same object within
  ``AGGREGATE_SECONDS`` bumps ``count`` and ``lastTimestamp`` of the Event
  already created instead of creating another; a Normal one repeated within
  ``REPEAT_SECONDS`` is a hook call Metacontroller redid (after a write
  conflict or from a stale cache), not news, and is not sent again;
- rate-limited: each object gets a bucket of ``BURST`` Events that refills one
  every ``REFILL_SECONDS``; what does not fit is dropped and counted;
- bounded: at most ``QUEUE_LIMIT`` Events wait; beyond that they are dropped.

An Event is a report, never progress: a failure to send one is logged and
changes no decision.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

log = logging.getLogger(__name__)

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
# cluster-gc
GC_SKIPPED = "ExternalResourceGCSkipped"
GC_BLOCKED = "ExternalResourceGCBlocked"
GC_RETRYING = "ExternalResourceGCRetrying"
RESOURCES_COLLECTED = "ExternalResourcesCollected"
EXTERNAL_RESOURCES_DELETED = "ExternalResourcesDeleted"
# machine, nodepool
LAUNCH_REQUESTED = "LaunchRequested"
INSTANCE_LAUNCHED = "InstanceLaunched"
INSTANCE_FOUND = "InstanceFound"
LAUNCH_FAILED = "LaunchFailed"
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

MESSAGE_LIMIT = 1024
AGGREGATE_SECONDS = 600.0
REPEAT_SECONDS = 10.0
BURST = 25
REFILL_SECONDS = 300.0
QUEUE_LIMIT = 1000


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


# ----------------------------------------------------------------- recorder


@dataclass
class _Sent:
    name: str
    namespace: str
    count: int
    at: float


class Recorder:
    """Sends Events for one process. ``inline=True`` sends in the caller's thread (for tests and the CLI)."""

    def __init__(self, kube: Callable[[], object], *, inline: bool = False, clock: Callable[[], float] = time.monotonic):
        self._kube = kube
        self._inline = inline
        self._clock = clock
        self._queue: queue.Queue = queue.Queue(maxsize=QUEUE_LIMIT)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._sent: dict[tuple, _Sent] = {}
        self._buckets: dict[tuple, tuple[float, float]] = {}  # object -> (tokens, at)
        self.dropped = 0

    # -- the request path: never blocks, never raises
    def record(self, component: str, about: dict, event: Event) -> None:
        from hooks.metrics import EVENTS

        # Counted as decided, whether it is then sent, folded into an earlier one or dropped.
        EVENTS.labels(component, event.reason, "Warning" if event.warning else "Normal").inc()
        item = (component, about, event)
        if self._inline:
            try:
                self._send(*item)
            except Exception:  # noqa: BLE001 - never fails a hook
                log.exception("event not recorded")
            return
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            self._drop("queue full", event)
            return
        self._start()

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every queued Event has been sent (or dropped); False on timeout."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)
        return True

    # -- the sender
    def _start(self) -> None:
        with self._lock:
            # A forked gunicorn worker inherits no threads: start one in each process.
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="event-recorder", daemon=True)
                self._thread.start()

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            try:
                self._send(*item)
            except Exception:  # noqa: BLE001 - the sender must outlive any one Event
                log.exception("event sender failed")
            finally:
                self._queue.task_done()

    def _allowed(self, obj_key: tuple) -> bool:
        now = self._clock()
        tokens, at = self._buckets.get(obj_key, (float(BURST), now))
        tokens = min(float(BURST), tokens + (now - at) / REFILL_SECONDS)
        if tokens < 1.0:
            self._buckets[obj_key] = (tokens, now)
            return False
        self._buckets[obj_key] = (tokens - 1.0, now)
        return True

    def _drop(self, why: str, event: Event) -> None:
        from hooks.metrics import EVENTS_DROPPED

        self.dropped += 1
        EVENTS_DROPPED.labels(why).inc()
        log.info("event dropped", extra={"reason": event.reason, "why": why})

    def _send(self, component: str, about: dict, event: Event) -> None:
        from hooks import timefmt
        from hooks.runtime import utcnow

        namespace = about.get("namespace") or "default"  # cluster-scoped objects' Events live in default
        obj_key = tuple(str(about.get(k) or "") for k in ("kind", "namespace", "name", "uid"))
        key = obj_key + (component, event.reason, event.warning, event.message)
        now = self._clock()
        stamp = timefmt.fmt(utcnow())
        self._expire(now)
        previous = self._sent.get(key)
        try:
            kube = self._kube()
            if previous is not None:
                if not event.warning and now - previous.at < REPEAT_SECONDS:
                    # The same step reported again at once: a call Metacontroller redid
                    # (a conflict, a stale cache), not a second occurrence.
                    return
                previous.count += 1
                previous.at = now
                _patch_count(kube, previous, stamp)
                return
            if not self._allowed(obj_key):
                self._drop("rate limited", event)
                return
            name = f"{about.get('name') or 'object'}.{uuid.uuid4().hex[:16]}"
            _create(kube, namespace, name, component, about, event, stamp)
            self._sent[key] = _Sent(name, namespace, 1, now)
        except Exception as exc:  # noqa: BLE001 - an Event must never fail a hook
            log.warning("event not recorded", extra={"reason": event.reason, "error": str(exc)[:300]})

    def _expire(self, now: float) -> None:
        if len(self._sent) > 4 * QUEUE_LIMIT or any(now - s.at > AGGREGATE_SECONDS for s in self._sent.values()):
            self._sent = {k: s for k, s in self._sent.items() if now - s.at <= AGGREGATE_SECONDS}
        if len(self._buckets) > 4 * QUEUE_LIMIT:
            self._buckets = {k: v for k, v in self._buckets.items() if now - v[1] <= REFILL_SECONDS * BURST}


def _create(kube, namespace: str, name: str, component: str, about: dict, event: Event, stamp: str) -> None:
    from lightkube.models.core_v1 import EventSource, ObjectReference
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import Event as KubeEvent

    kube.create(KubeEvent(
        metadata=ObjectMeta(name=name, namespace=namespace),
        involvedObject=ObjectReference(apiVersion=about.get("apiVersion"), kind=about.get("kind"),
                                       name=about.get("name"), namespace=about.get("namespace"),
                                       uid=about.get("uid")),
        reason=event.reason,
        message=event.message[:MESSAGE_LIMIT],
        type="Warning" if event.warning else "Normal",
        source=EventSource(component=component),
        firstTimestamp=stamp,
        lastTimestamp=stamp,
        count=1,
    ), namespace=namespace)


def _patch_count(kube, sent: _Sent, stamp: str) -> None:
    from lightkube.resources.core_v1 import Event as KubeEvent

    kube.merge_patch(KubeEvent, sent.name, {"count": sent.count, "lastTimestamp": stamp}, namespace=sent.namespace)
