"""Per-process answers of AWS reads, each kept until its time is up (a monotonic clock)."""
from __future__ import annotations

import threading
import time
from typing import Callable, Hashable, Iterable, TypeVar

V = TypeVar("V")
FOREVER = float("inf")


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
