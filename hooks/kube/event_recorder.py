"""Sends the Events a hook decided (hooks.events), off the request path, the way client-go's recorder does.

- aggregated: the same reason and message about the same object within
  ``AGGREGATE_SECONDS`` bumps ``count`` and ``lastTimestamp`` of the Event
  already created instead of creating another; a Normal one repeated within
  ``REPEAT_SECONDS`` is a hook call Metacontroller redid (after a write
  conflict or from a stale cache), not news, and is not sent again;
- rate-limited: each object gets a bucket of ``BURST`` Events that refills one
  every ``REFILL_SECONDS``; what does not fit is dropped and counted;
- bounded: at most ``QUEUE_LIMIT`` Events wait; beyond that they are dropped.

A failure to send one is logged and changes no decision.
"""
from __future__ import annotations

import datetime as dt
import logging
import queue
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Callable

from hooks import timefmt
from hooks.events import MESSAGE_LIMIT, Event
from hooks.metrics import EVENTS, EVENTS_DROPPED

log = logging.getLogger(__name__)

AGGREGATE_SECONDS = 600.0
REPEAT_SECONDS = 10.0
BURST = 25
REFILL_SECONDS = 300.0
QUEUE_LIMIT = 1000


@dataclass
class _Sent:
    name: str
    namespace: str
    count: int
    at: float


class Recorder:
    """Sends Events for one process. ``inline=True`` sends in the caller's thread (for tests and the CLI)."""

    def __init__(self, kube: Callable[[], object], *, inline: bool = False, clock: Callable[[], float] = time.monotonic,
                 utcnow: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.timezone.utc)):
        self._kube = kube
        self._inline = inline
        self._clock = clock
        self._utcnow = utcnow  # the Events' timestamps
        self._queue: queue.Queue = queue.Queue(maxsize=QUEUE_LIMIT)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._sent: dict[tuple, _Sent] = {}
        self._buckets: dict[tuple, tuple[float, float]] = {}  # object -> (tokens, at)
        self.dropped = 0

    # -- the request path: never blocks, never raises
    def record(self, component: str, about: dict, event: Event) -> None:
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
        self.dropped += 1
        EVENTS_DROPPED.labels(why).inc()
        log.info("event dropped", extra={"reason": event.reason, "why": why})

    def _send(self, component: str, about: dict, event: Event) -> None:
        namespace = about.get("namespace") or "default"  # cluster-scoped objects' Events live in default
        obj_key = tuple(str(about.get(k) or "") for k in ("kind", "namespace", "name", "uid"))
        key = obj_key + (component, event.reason, event.warning, event.message)
        now = self._clock()
        stamp = timefmt.fmt(self._utcnow())
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
