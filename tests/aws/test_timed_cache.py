"""TimedCache: each value kept for its own time; threads that miss together share one read."""
from __future__ import annotations

import threading

import pytest

from hooks.aws.timed_cache import FOREVER, TimedCache


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_each_value_is_kept_for_the_time_its_read_gave():
    clock = Clock()
    cache = TimedCache(clock)
    reads = []

    def read(value, seconds):
        def run():
            reads.append(value)
            return value, seconds
        return run
    assert cache.get("a", read(1, 10)) == 1
    assert cache.get("b", read(2, FOREVER)) == 2
    clock.now = 9.9
    assert cache.get("a", read(3, 10)) == 1
    clock.now = 10
    assert cache.get("a", read(3, 10)) == 3 and cache.get("b", read(4, 1)) == 2
    assert reads == [1, 2, 3]
    cache.clear()
    assert cache.get("b", read(5, 1)) == 5


def test_get_many_reads_only_the_missing_and_expired_keys():
    clock = Clock()
    cache = TimedCache(clock)
    asked = []

    def read(keys):
        asked.append(sorted(keys))
        return {key: key.upper() for key in keys}, 5
    assert cache.get_many(["a", "b", "a"], read) == {"a": "A", "b": "B"}
    clock.now = 3
    assert cache.get_many(["b", "c"], read) == {"b": "B", "c": "C"}
    clock.now = 5
    assert cache.get_many(["a", "c"], read) == {"a": "A", "c": "C"}
    assert asked == [["a", "b"], ["c"], ["a"]]


def test_a_failed_read_keeps_nothing():
    cache = TimedCache(Clock())

    def fail():
        raise RuntimeError("throttled")
    with pytest.raises(RuntimeError):
        cache.get("a", fail)
    assert cache.get("a", lambda: ("read again", 1)) == "read again"


def test_threads_that_miss_together_share_one_read():
    cache = TimedCache(Clock())
    started, release = threading.Event(), threading.Event()
    reads, answers = [], []

    def slow_read():
        reads.append(1)
        started.set()
        assert release.wait(10)
        return "value", FOREVER

    first = threading.Thread(target=lambda: answers.append(cache.get("k", slow_read)))
    first.start()
    assert started.wait(10)
    second = threading.Thread(target=lambda: answers.append(cache.get("k", slow_read)))
    second.start()
    release.set()
    first.join(10)
    second.join(10)
    assert answers == ["value", "value"] and reads == [1]
