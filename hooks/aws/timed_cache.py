"""Per-process answers of AWS reads, each kept until its time is up (a monotonic clock): read by the caller
that misses (``TimedCache``), or on a thread of its own while the last answer serves (``Refreshed``)."""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Hashable, Iterable, TypeVar

from hooks.aws.clients import error_code
from hooks.metrics import BACKGROUND_READS

V = TypeVar("V")
FOREVER = float("inf")
_log = logging.getLogger(__name__)


class TimedCache:
    """Values by key, each with its own lifetime. Thread-safe.

    One read at a time per cache: threads that miss together wait for the
    first one's read and are answered from it instead of reading again. A
    read that raises keeps nothing.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._lock = threading.Lock()
        self._reading = threading.Lock()
        self._kept: dict[Hashable, tuple[object, float]] = {}  # key -> (value, until)

    def _fresh(self, keys: Iterable[Hashable]) -> tuple[dict, list]:
        now = self.clock()
        found, missing = {}, []
        with self._lock:
            for key in keys:
                kept = self._kept.get(key)
                if kept is not None and now < kept[1]:
                    found[key] = kept[0]
                else:
                    missing.append(key)
        return found, missing

    def _keep(self, values: dict, seconds: float) -> None:
        until = self.clock() + seconds
        with self._lock:
            for key, value in values.items():
                self._kept[key] = (value, until)

    def get(self, key: Hashable, read: Callable[[], tuple[V, float]]) -> V:
        """The kept value, or ``read()``'s (a value and how many seconds to keep it)."""
        found, _ = self._fresh([key])
        if key in found:
            return found[key]
        with self._reading:
            found, _ = self._fresh([key])
            if key in found:
                return found[key]
            value, seconds = read()
            self._keep({key: value}, seconds)
            return value

    def get_many(self, keys: Iterable[Hashable], read: Callable[[list], tuple[dict, float]]) -> dict:
        """Each key's kept value; the missing and expired ones are read together (``read(keys)`` answers a value
        for every key it was given and how many seconds to keep them)."""
        keys = list(dict.fromkeys(keys))
        found, missing = self._fresh(keys)
        if missing:
            with self._reading:
                again, missing = self._fresh(missing)
                found.update(again)
                if missing:
                    values, seconds = read(missing)
                    values = {key: values[key] for key in missing}
                    self._keep(values, seconds)
                    found.update(values)
        return {key: found[key] for key in keys}

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()


def _on_a_thread(name: str, job: Callable[[], None]) -> None:
    threading.Thread(target=job, name=name, daemon=True).start()


class Refreshed:
    """Values by key, each read on a thread of its own and answered as last read: a caller waits for a read
    only as long as it asks to, and only when nothing was read yet. Thread-safe.

    A value past its lifetime is answered as it is while the next read runs; one read per key at a time. A
    read that fails keeps the last value, is logged and counted (``nodewarden_aws_background_reads_total``),
    and is not tried again before ``retry_seconds`` have passed.
    """

    def __init__(self, name: str, retry_seconds: float, clock: Callable[[], float] = time.monotonic,
                 start: Callable[[str, Callable[[], None]], None] = _on_a_thread):
        self.name, self.retry_seconds, self.clock = name, retry_seconds, clock
        self._start = start
        self._lock = threading.Lock()
        self._kept: dict[Hashable, tuple[object, float]] = {}  # key -> (value, until)
        self._reading: dict[Hashable, threading.Event] = {}  # key -> set when its read ends
        self._failed: dict[Hashable, tuple[float, str]] = {}  # key -> (when, what), since its last good read

    def get(self, key: Hashable, read: Callable[[], tuple[V, float]], wait: float = 0.0) -> V | None:
        """The value last read for ``key``, None when none has been read yet. A read (``read()``: a value and
        how many seconds it is fresh) starts when the value is missing or past its lifetime, unless one is
        running or one failed less than ``retry_seconds`` ago. With nothing read yet, waits at most ``wait``
        seconds for the read that is running."""
        with self._lock:
            now = self.clock()
            kept = self._kept.get(key)
            running = self._reading.get(key)
            failed = self._failed.get(key)
            begin = (running is None and (kept is None or now >= kept[1])
                     and (failed is None or now - failed[0] >= self.retry_seconds))
            if begin:
                running = self._reading[key] = threading.Event()
        if begin:
            self._start(f"{self.name}-read", lambda: self._read(key, read, running))
        if kept is None and running is not None and wait > 0:
            running.wait(wait)
            with self._lock:
                kept = self._kept.get(key)
        return kept[0] if kept is not None else None

    def _read(self, key: Hashable, read: Callable[[], tuple[object, float]], done: threading.Event) -> None:
        try:
            value, seconds = read()
        except Exception as exc:  # noqa: BLE001 - a thread of its own: the log and the metric are its report
            code = error_code(exc)
            _log.warning("%s of %s failed; the last one read stays in use, tried again in %.0f s: %s: %s",
                         self.name, key, self.retry_seconds, code, exc)
            BACKGROUND_READS.labels(self.name, code).inc()
            with self._lock:
                self._failed[key] = (self.clock(), f"{code}: {exc}")
        else:
            BACKGROUND_READS.labels(self.name, "ok").inc()
            with self._lock:
                self._kept[key] = (value, self.clock() + seconds)
                self._failed.pop(key, None)
        finally:
            with self._lock:
                self._reading.pop(key, None)
            done.set()

    def failure(self, key: Hashable) -> str | None:
        """What the last read of ``key`` failed with, None when it did not fail."""
        with self._lock:
            failed = self._failed.get(key)
        return failed[1] if failed is not None else None

    def join(self, key: Hashable, timeout: float) -> bool:
        """Wait at most ``timeout`` seconds for the read of ``key`` that is running; False when it still is."""
        with self._lock:
            running = self._reading.get(key)
        return running is None or running.wait(timeout)

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()
            self._failed.clear()
