"""TimedCache: each value kept for its own time; threads that miss together share one read. Refreshed: the
last value answered while one read runs on a thread of its own (started by the test here)."""
from __future__ import annotations

import threading

import pytest
from botocore.exceptions import ClientError

from hooks.aws.timed_cache import FOREVER, Refreshed, TimedCache
from hooks.metrics import BACKGROUND_READS


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


class Jobs:
    """Background reads started and not run yet: the test runs them when it says."""

    def __init__(self):
        self.waiting: list = []

    def __call__(self, name, job):
        self.waiting.append(job)

    def run(self) -> None:
        waiting, self.waiting = self.waiting, []
        for job in waiting:
            job()


def test_refreshed_answers_the_last_value_while_one_read_runs():
    clock, jobs = Clock(), Jobs()
    cache = Refreshed("test-read", retry_seconds=30, clock=clock, start=jobs)
    reads = []

    def read():
        reads.append(clock.now)
        return f"read at {clock.now}", 10
    assert cache.get("k", read) is None and len(jobs.waiting) == 1
    assert cache.get("k", read) is None and len(jobs.waiting) == 1, "one read at a time"
    jobs.run()
    assert cache.get("k", read) == "read at 0.0" and not jobs.waiting
    clock.now = 10
    assert cache.get("k", read) == "read at 0.0", "past its lifetime: answered while read again"
    assert cache.get("k", read) == "read at 0.0" and len(jobs.waiting) == 1
    jobs.run()
    assert cache.get("k", read) == "read at 10" and reads == [0.0, 10]


def test_refreshed_keeps_the_last_value_when_a_read_fails_and_waits_before_the_next():
    clock, jobs = Clock(), Jobs()
    cache = Refreshed("test-read", retry_seconds=30, clock=clock, start=jobs)
    failing = [True]

    def read():
        if failing[0]:
            raise ClientError({"Error": {"Code": "Throttling", "Message": "slow down"}}, "DescribeThings")
        return "value", 5
    before = BACKGROUND_READS.labels("test-read", "Throttling")._value.get()
    cache.get("k", read)
    jobs.run()
    assert cache.get("k", read) is None and not jobs.waiting, "not tried again at once"
    assert cache.failure("k").startswith("Throttling: ")
    assert BACKGROUND_READS.labels("test-read", "Throttling")._value.get() == before + 1
    clock.now = 30
    failing[0] = False
    cache.get("k", read)
    jobs.run()
    assert cache.get("k", read) == "value" and cache.failure("k") is None
    clock.now = 40
    failing[0] = True
    assert cache.get("k", read) == "value"
    jobs.run()
    assert cache.get("k", read) == "value", "a failed read keeps the last value"
    assert cache.failure("k").startswith("Throttling")


def test_refreshed_waits_for_a_first_read_only_when_asked():
    release = threading.Event()
    cache = Refreshed("test-read", retry_seconds=30)

    def read():
        assert release.wait(10)
        return "value", FOREVER
    assert cache.get("k", read) is None, "no wait: answered at once"
    release.set()
    assert cache.get("k", read, wait=10) == "value"
    assert cache.join("k", 10)
