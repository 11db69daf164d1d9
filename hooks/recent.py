"""A per-process memory of recently used keys, bounded: the least recently used is forgotten first."""
from __future__ import annotations

import collections
import threading
from typing import Any


class Recent:
    """Thread-safe; keeps at most ``size`` keys."""

    def __init__(self, size: int):
        self._lock = threading.Lock()
        self._kept: collections.OrderedDict[str, Any] = collections.OrderedDict()
        self._size = size

    def get(self, key: str) -> Any | None:
        with self._lock:
            found = self._kept.get(key)
            if found is not None:
                self._kept.move_to_end(key)
            return found

    def put(self, key: str, value: Any) -> None:
        with self._lock:
            self._put(key, value)

    def first(self, key: str) -> bool:
        """Whether ``key`` is new here (it is kept from now on)."""
        with self._lock:
            if key in self._kept:
                self._kept.move_to_end(key)
                return False
            self._put(key, True)
            return True

    def _put(self, key: str, value: Any) -> None:
        self._kept[key] = value
        self._kept.move_to_end(key)
        while len(self._kept) > self._size:
            self._kept.popitem(last=False)
