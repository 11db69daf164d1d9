"""The placement shared by the pools' rounds (hooks/provisioning/placements.py): answered for equal inputs read
apart, as schedule computes it; bounded in number and age; computed once when two rounds ask at once."""
from __future__ import annotations

import threading

import pytest

from hooks.provisioning import placements, scheduling
from tests.support.provisioning import daemonset, node_slot, options, pod, pool


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def world(pods: int = 5, zone: bool = True) -> tuple:
    """Inputs of a round as a call builds them from its own readings: new objects every time."""
    spread = [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
               "labelSelector": {"matchLabels": {"app": "web"}}}] if zone else []
    views = [pod(f"web-{i}", cpu="1", labels={"app": "web"}, topologySpreadConstraints=spread) for i in range(pods)]
    return views, [pool("general")], [node_slot("node-1", cpu="2")], options(), [daemonset("agent")]


def test_equal_inputs_read_apart_are_answered_the_placement_computed_for_the_first():
    shared = placements.Placements()
    first = shared.schedule(*world())
    again = shared.schedule(*world())
    assert shared.computed == 1
    assert first == again == scheduling.schedule(*world())
    assert again.placed is not first.placed and again.claims is not first.claims, "each round its own copy"
    other = shared.schedule(*world(pods=6))
    assert shared.computed == 2 and other == scheduling.schedule(*world(pods=6))
    assert shared.schedule(*world(zone=False)) == scheduling.schedule(*world(zone=False))
    assert shared.computed == 3, "another signature of the same pods is another placement"


def test_at_most_a_few_placements_are_kept_and_none_unasked_for_long():
    clock = Clock()
    shared = placements.Placements(clock)
    for count in range(1, placements.MAX_PLACEMENTS + 2):
        shared.schedule(*world(pods=count))
    assert shared.computed == placements.MAX_PLACEMENTS + 1
    shared.schedule(*world(pods=placements.MAX_PLACEMENTS + 1))
    assert shared.computed == placements.MAX_PLACEMENTS + 1, "the most recent are kept"
    shared.schedule(*world(pods=1))
    assert shared.computed == placements.MAX_PLACEMENTS + 2, "the least recently used went first"
    clock.now += placements.KEEP_SECONDS
    shared.schedule(*world(pods=1))
    assert shared.computed == placements.MAX_PLACEMENTS + 3, "not asked for KEEP_SECONDS: dropped"


def test_a_round_that_asks_while_the_placement_is_computed_waits_for_it(monkeypatch):
    started, release = threading.Event(), threading.Event()
    computed = []
    schedule = scheduling.schedule

    def slow(*args):
        computed.append(1)
        started.set()
        assert release.wait(10)
        return schedule(*args)
    monkeypatch.setattr(scheduling, "schedule", slow)
    shared = placements.Placements()
    answers = []
    first = threading.Thread(target=lambda: answers.append(shared.schedule(*world())))
    first.start()
    assert started.wait(10)
    second = threading.Thread(target=lambda: answers.append(shared.schedule(*world())))
    second.start()
    release.set()
    first.join(10)
    second.join(10)
    assert len(answers) == 2 and answers[0] == answers[1] and computed == [1]


def test_a_placement_that_failed_is_computed_by_the_next_round(monkeypatch):
    schedule = scheduling.schedule
    calls = []

    def failing_once(*args):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a bug")
        return schedule(*args)
    monkeypatch.setattr(scheduling, "schedule", failing_once)
    shared = placements.Placements()
    with pytest.raises(RuntimeError):
        shared.schedule(*world())
    assert shared.schedule(*world()) == schedule(*world()) and len(calls) == 2


def test_a_round_waits_for_another_rounds_placement_only_so_long(monkeypatch):
    """The round computing the placement is held (here until the end of the test): the one asking for the same
    waits WAIT_SECONDS, then computes its own, and answers the same."""
    started, release = threading.Event(), threading.Event()
    computed = []
    schedule = scheduling.schedule

    def held(*args):
        computed.append(1)
        if len(computed) == 1:
            started.set()
            assert release.wait(10)
        return schedule(*args)
    monkeypatch.setattr(scheduling, "schedule", held)
    monkeypatch.setattr(placements, "WAIT_SECONDS", 0.05)
    shared = placements.Placements()
    first = threading.Thread(target=lambda: shared.schedule(*world()))
    first.start()
    assert started.wait(10)
    assert shared.schedule(*world()) == schedule(*world())
    assert len(computed) == 2, "the second round computed its own"
    release.set()
    first.join(10)
