"""A monotonic clock a test moves by hand: what the code under test waits for passes at once."""
from __future__ import annotations


class ManualClock:
    """Seconds as ``time.monotonic`` gives them; ``advance`` and ``sleep`` move it (``sleep`` records)."""

    def __init__(self, now: float = 1000.0):
        self.now = now
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
