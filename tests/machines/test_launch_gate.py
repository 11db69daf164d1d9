"""How one hook call runs a launch's candidates (hooks.machines.launch.Candidates), on the test's clock."""
from __future__ import annotations

import datetime as dt

from hooks import timefmt
from hooks.machines import launch
from hooks.plan import DEFERRED, Action, Outcome

NOW = dt.datetime(2026, 11, 23, 12, 0, tzinfo=dt.timezone.utc)


def candidate(instance_type: str, subnet: str = "subnet-a") -> Action:
    return Action(launch.LAUNCH, "web-1", {"candidate": {"instanceType": instance_type, "subnetID": subnet,
                                                           "zone": "us-east-1a"}, "capacityType": "on-demand"})


METRIC = Action("metric.machine", "web", {"event": "launched"})


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def refused(action: Action, code: str = "InsufficientInstanceCapacity") -> Outcome:
    return Outcome(action, False, f"{code}: no capacity", code=code)


def test_the_first_candidate_always_runs_and_the_next_only_while_the_time_allows():
    clock = Clock()
    gate = launch.Candidates(1.0, clock=clock)
    started = clock.now
    clock.now += 5  # the call's look-ups took all of its time
    first = candidate("m5.large")
    assert gate.hold(first, [Outcome(Action("kube.register-node", "n"), True)], started) is None
    clock.now = started + 0.5
    assert gate.hold(candidate("c5.large"), [refused(first)], started) is None
    clock.now = started + 1.0
    held = gate.hold(candidate("c5.large"), [refused(first)], started)
    assert held.code == DEFERRED


def test_nothing_is_asked_after_a_launch_and_the_metric_counts_only_a_launch():
    clock = Clock()
    gate = launch.Candidates(1.0, clock=clock)
    first = candidate("m5.large")
    launched = Outcome(first, True, result={"instanceID": "i-1"})
    assert gate.hold(candidate("c5.large"), [launched], clock.now).code == DEFERRED
    assert gate.hold(METRIC, [launched], clock.now) is None
    assert gate.hold(METRIC, [refused(first)], clock.now).code == DEFERRED


def test_a_throttled_or_failed_call_stops_the_launch_for_this_call():
    clock = Clock()
    gate = launch.Candidates(1.0, clock=clock)
    first = candidate("m5.large")
    for code in ("RequestLimitExceeded", "InternalError", "Transport"):
        held = gate.hold(candidate("c5.large"), [refused(first, code)], clock.now)
        assert held.code == DEFERRED and code in held.error
    assert gate.hold(Action("kube.delete-machine", "web-1"), [refused(first, "RequestLimitExceeded")],
                     clock.now) is None, "other actions are not the launch's"


def test_only_refusals_for_capacity_are_recorded_each_with_its_candidate():
    first, second, third = candidate("m5.large"), candidate("m5.large", "subnet-b"), candidate("c5.large")
    earlier = {"launchRefusals": [{"instanceType": "m5.large", "subnetID": "subnet-a", "zone": "us-east-1a",
                                   "capacityType": "on-demand", "code": "Unsupported",
                                   "at": timefmt.fmt(NOW - dt.timedelta(seconds=200))}]}
    status = launch.record_refusals(earlier, [refused(first), refused(second, "RequestLimitExceeded"),
                                              Outcome(third, False, "put off", code=DEFERRED)], NOW)
    assert status["launchRefusals"] == [{"instanceType": "m5.large", "subnetID": "subnet-a", "zone": "us-east-1a",
                                         "capacityType": "on-demand", "code": "InsufficientInstanceCapacity",
                                         "at": timefmt.fmt(NOW)}]
    assert launch.remembered(status, NOW + dt.timedelta(seconds=179)) and \
        not launch.remembered(status, NOW + dt.timedelta(seconds=180))
    assert launch.record_refusals(earlier, [refused(second, "Throttling")], NOW) is earlier
