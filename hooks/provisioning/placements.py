"""The placement of a round, computed once for every provisioning pool that asks for it over the same inputs.

Every provisioning pool runs the same placement over the same readings and
keeps only its own claims (hooks/provisioning/rounds.py), each in a call of
its own, every ``NODEWARDEN_PROVISIONING_POLL_SECONDS``. A process keeps the
last few placements with what they were computed from: a round whose inputs
are equal to one of them (the pending pods as the scheduler sees them, the
pools, the Slots, the catalog, the DaemonSets) is answered that placement,
which ``schedule`` would compute again. A round that asks while the same
placement is being computed waits for it (``WAIT_SECONDS`` at most, then it
computes its own). Equal inputs, not the same
objects: each call reads the API server and EC2 on its own.
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Sequence

from hooks.provisioning import scheduling
from hooks.provisioning.catalog import InstanceOption
from hooks.provisioning.pods import PodView
from hooks.provisioning.scheduling import PoolView, Result, Slot

# Placements kept: the rounds of one poll over the same readings, and a few readings apart.
MAX_PLACEMENTS = 4
# A placement not asked for this long is dropped (at the next round that asks for any).
KEEP_SECONDS = 60.0
# A round waits this long at most for the same placement computed by another; then it computes its own.
WAIT_SECONDS = 5.0


def _pods_key(views: Sequence[PodView]) -> tuple:
    # A view compares by identity; what placing it reads is its key and its signature (how alike pods are told).
    return tuple((view.key, view.signature) for view in views)


class _Placement:
    __slots__ = ("inputs", "result", "done", "used")

    def __init__(self, inputs: tuple, used: float):
        self.inputs, self.used = inputs, used
        self.result: Result | None = None
        self.done = threading.Event()


class Placements:
    """The last ``MAX_PLACEMENTS`` placements by their inputs, least recently used first out. Thread-safe."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.computed = 0  # placements computed, not answered from another round's
        self._lock = threading.Lock()
        self._kept: list[_Placement] = []  # most recently used first

    def schedule(self, pods: Sequence[PodView], pools: Sequence[PoolView], slots: Sequence[Slot],
                 catalog: Sequence[InstanceOption], daemonsets: Sequence[PodView] = ()) -> Result:
        """``scheduling.schedule(pods, pools, slots, catalog, daemonsets)``, the same Result (its own copy)."""
        inputs = (_pods_key(pods), tuple(pools), tuple(slots), tuple(catalog), _pods_key(daemonsets))
        while True:
            with self._lock:
                now = self.clock()
                self._kept = [p for p in self._kept if not p.done.is_set() or now - p.used < KEEP_SECONDS]
                found = next((p for p in self._kept if p.inputs == inputs), None)
                if found is None:
                    found = _Placement(inputs, now)
                    self._kept = [found] + self._kept[:MAX_PLACEMENTS - 1]
                    self.computed += 1
                    mine = True
                else:
                    found.used = now
                    self._kept = [found] + [p for p in self._kept if p is not found]
                    mine = False
            if mine:
                try:
                    found.result = scheduling.schedule(pods, pools, slots, catalog, daemonsets)
                finally:
                    if found.result is None:
                        with self._lock:
                            self._kept = [p for p in self._kept if p is not found]
                    found.done.set()
            elif not found.done.wait(WAIT_SECONDS):
                return scheduling.schedule(pods, pools, slots, catalog, daemonsets)
            if found.result is not None:
                result = found.result
                return Result(dict(result.placed), list(result.claims), dict(result.unschedulable))
            # The round computing it failed (it raised there): compute it here.

    def clear(self) -> None:
        with self._lock:
            self._kept = []


PLACEMENTS = Placements()
