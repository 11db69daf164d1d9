"""Disruption rules: budgets (rounding, schedules, reasons), signals, repair proof and the pool's choice (pure)."""
from __future__ import annotations

import datetime as dt
import json

import pytest
from hypothesis import given, settings, strategies as st

from hooks import timefmt
from hooks.contract import RequestError
from hooks.machines import budgets, disruption, pool, repair, signals

NOW = dt.datetime(2026, 11, 23, 12, 0, tzinfo=dt.timezone.utc)  # a Monday
NS = "nodewarden-system"
HASH = "current-template"


def _pool(*items, expire=None):
    spec = {"disruption": {"budgets": list(items)}} if items else {}
    return {"spec": spec}


# --------------------------------------------------------------------------- budgets


@pytest.mark.parametrize("nodes, size, limit", [
    ("10%", 3, 1), ("10%", 10, 1), ("10%", 11, 2), ("20%", 19, 4), ("0%", 50, 0), ("0", 50, 0), ("3", 2, 3),
    ("100%", 7, 7), ("10%", 0, 0), ("1%", 1, 1),
])
def test_percentages_round_up_so_a_small_pool_goes_one_at_a_time(nodes, size, limit):
    [budget] = budgets.parse(_pool({"nodes": nodes}))
    assert budget.limit(size) == limit


def test_no_budgets_is_the_default_of_ten_percent():
    assert budgets.parse(_pool()) == budgets.DEFAULT
    assert budgets.allowed(budgets.DEFAULT, signals.DRIFTED, 30, NOW) == 3


def test_the_smallest_active_budget_for_a_reason_wins_and_others_are_not_held():
    rules = budgets.parse(_pool({"nodes": "50%"}, {"nodes": "1", "reasons": ["Drifted"]}))
    assert budgets.allowed(rules, signals.DRIFTED, 10, NOW) == 1
    assert budgets.allowed(rules, signals.EXPIRED, 10, NOW) == 5
    only = budgets.parse(_pool({"nodes": "0", "reasons": ["Drifted"]}))
    assert budgets.allowed(only, signals.REPAIR, 10, NOW) is None


def test_a_scheduled_budget_is_active_for_its_duration_after_each_time():
    rules = budgets.parse(_pool({"nodes": "0", "schedule": "0 9 * * 1-5", "duration": "8h"}))
    assert budgets.allowed(rules, signals.DRIFTED, 10, NOW.replace(hour=9)) == 0  # at the very minute
    assert budgets.allowed(rules, signals.DRIFTED, 10, NOW.replace(hour=16, minute=59)) == 0
    assert budgets.allowed(rules, signals.DRIFTED, 10, NOW.replace(hour=17)) is None
    assert budgets.allowed(rules, signals.DRIFTED, 10, NOW.replace(hour=8, minute=59)) is None
    assert budgets.allowed(rules, signals.DRIFTED, 10, NOW + dt.timedelta(days=5)) is None  # Saturday


@pytest.mark.parametrize("item, where", [
    ({"nodes": "110%"}, "nodes"), ({"nodes": "-1"}, "nodes"), ({"nodes": 3}, "nodes"), ({"nodes": "ten"}, "nodes"),
    ({"nodes": "1", "reasons": ["Whim"]}, "reasons"), ({"nodes": "1", "reasons": "Drifted"}, "reasons"),
    ({"nodes": "1", "schedule": "every day"}, "schedule"), ({"nodes": "1", "schedule": "@daily", "duration": "1h"},
                                                            "schedule"),
    ({"nodes": "1", "schedule": "0 9 * * *"}, "duration"), ({"nodes": "1", "duration": "1h"}, "duration"),
    ({"nodes": "1", "schedule": "0 9 * * *", "duration": "0s"}, "duration"),
])
def test_a_malformed_budget_is_refused_by_name(item, where):
    with pytest.raises(RequestError) as info:
        budgets.parse(_pool(item))
    assert where in info.value.field


def test_too_many_budgets_are_refused():
    with pytest.raises(RequestError):
        budgets.parse(_pool(*[{"nodes": "1"}] * (budgets.MAX_BUDGETS + 1)))


# --------------------------------------------------------------------------- signals


def test_a_signal_round_trips_and_a_malformed_one_reads_as_none():
    sig = signals.Signal(signals.SPOT_INTERRUPTION, NOW, NOW + dt.timedelta(minutes=2), "m-1")
    assert signals.parse(sig.encode()) == sig
    for bad in (None, "", "{", "[]", json.dumps({"reason": "Whim", "at": timefmt.fmt(NOW)}),
                json.dumps({"reason": "Drifted"}), json.dumps({"reason": "Drifted", "at": "yesterday"}),
                "x" * 2000):
        assert signals.parse(bad) is None
    # The interruption annotation carries EC2's notices only: a pool reason there is no signal.
    machine = {"metadata": {"annotations": {signals.INTERRUPTION_ANNOTATION: signals.Signal("Drifted", NOW).encode()}}}
    assert signals.of(machine, signals.INTERRUPTION_ANNOTATION) is None


def test_only_a_forceful_signal_supersedes_one_already_there():
    rebalance, spot = signals.Signal(signals.REBALANCE, NOW), signals.Signal(signals.SPOT_INTERRUPTION, NOW)
    assert signals.supersedes(rebalance, None)
    assert signals.supersedes(spot, rebalance)
    assert not signals.supersedes(rebalance, spot)
    assert not signals.supersedes(spot, spot)  # a redelivered message writes nothing


# --------------------------------------------------------------------------- repair


def _machine(name, *, node=True, deleting=False, created=7200.0, drifted=None, annotations=None, initialized=True):
    status = {"conditions": []}
    if initialized:
        status["conditions"].append({"type": "Initialized", "status": "True"})
    if drifted is not None:
        status["conditions"].append({"type": "Drifted", "status": "True",
                                     "lastTransitionTime": timefmt.fmt(NOW - dt.timedelta(seconds=drifted))})
    if node:
        status.update(nodeName=f"node-{name}", nodeUID=f"nuid-{name}", instanceID=f"i-{name}")
    annotations = {**(annotations or {}), "nodewarden.io/template-hash": "old" if drifted is not None else HASH}
    raw = {"metadata": {"name": name, "uid": f"uid-{name}",
                        "creationTimestamp": timefmt.fmt(NOW - dt.timedelta(seconds=created)),
                        "deletionTimestamp": timefmt.fmt(NOW) if deleting else None,
                        "annotations": annotations},
           "spec": {}, "status": status}
    return pool.machines_of([raw])[0]


def _fr(name, *, ns=NS, instance=None, node_uid=None, phase="Recovering", succeeded="True", action="Off",
        recovered=False):
    conds = [{"type": "FencingSucceeded", "status": succeeded, "lastTransitionTime": timefmt.fmt(NOW)}]
    if recovered:
        conds.append({"type": "Recovered", "status": "True"})
    return {"metadata": {"name": f"fr-{name}", "namespace": ns},
            "spec": {"nodeRef": {"name": f"node-{name}"}, "action": action},
            "status": {"phase": phase, "conditions": conds,
                       "providerStatus": {"instanceID": instance or f"i-{name}", "nodeUID": node_uid or f"nuid-{name}"}}}


def test_only_our_request_that_stopped_exactly_the_machines_instance_and_node_proves_it_fenced():
    m = _machine("a")
    assert repair.fenced(m, [_fr("a")], NS) is not None
    assert repair.fenced(m, [_fr("a", ns="tenant")], NS) is None
    assert repair.fenced(m, [_fr("a", instance="i-other")], NS) is None
    assert repair.fenced(m, [_fr("a", node_uid="nuid-older")], NS) is None  # a Node of the same name before
    assert repair.fenced(m, [_fr("a", succeeded="False")], NS) is None
    assert repair.fenced(m, [_fr("a", action="Reboot")], NS) is None
    assert repair.fenced(m, [_fr("a", phase="PoweringOff")], NS) is None
    assert repair.fenced(_machine("a", node=False), [_fr("a")], NS) is None
    assert not repair.fenced(m, [_fr("a")], NS).recovered
    assert repair.fenced(m, [_fr("a", recovered=True)], NS).recovered
    assert repair.fenced(m, [_fr("a", phase="Succeeded")], NS).recovered


# --------------------------------------------------------------------------- the pool's choice


def _decide(machines, *, rules=budgets.DEFAULT, previous=(), fenced=None, replicas=None, expire=None, now=NOW):
    replicas = len([m for m in machines if not m["metadata"]["deletionTimestamp"]]) if replicas is None else replicas
    return disruption.decide(machines, list(previous), rules, expire, fenced or {}, replicas, now, HASH)


def test_repair_comes_first_then_notices_then_expiry_then_drift():
    notice = {signals.INTERRUPTION_ANNOTATION: signals.Signal(signals.SCHEDULED_CHANGE, NOW).encode()}
    machines = [_machine("drift", drifted=9000), _machine("old", created=99999), _machine("notice", annotations=notice),
                _machine("fenced")]
    fence = {"uid-fenced": repair.Fenced("ns/fr", NOW, False)}
    order = []
    previous = []
    for _ in range(4):
        out = _decide(machines, rules=budgets.parse(_pool({"nodes": str(len(order) + 1)})), previous=previous,
                      fenced=fence, expire=3600.0)
        order += [r["machine"] for r in out.started]
        previous = out.records
    assert order == ["fenced", "notice", "old", "drift"]


def test_a_forceful_notice_is_never_the_pools_to_start_but_is_recorded_once_it_goes():
    spot = {signals.INTERRUPTION_ANNOTATION: signals.Signal(signals.SPOT_INTERRUPTION, NOW).encode()}
    live = _decide([_machine("a", annotations=spot), _machine("b")])
    assert live.started == [] and live.leaving == set()
    going = _decide([_machine("a", annotations=spot, deleting=True), _machine("b")],
                    rules=budgets.parse(_pool({"nodes": "0"})))
    assert [(r["machine"], r["reason"]) for r in going.started] == [("a", signals.SPOT_INTERRUPTION)]


def test_surge_first_the_old_machine_stays_until_its_replacement_is_initialized():
    machines = [_machine("a", drifted=60), _machine("b")]
    out = _decide(machines, replicas=2)
    assert out.held == {"a"} and out.leaving == set()
    disruption.assign_replacements(out.records, ["new"], machines)
    later = _decide(machines + [_machine("new", initialized=False)], previous=out.records, replicas=2)
    assert later.leaving == set()
    done = _decide(machines + [_machine("new")], previous=out.records, replicas=2)
    assert done.leaving == {"a"} and [r["machine"] for r in done.ready] == ["a"]


def test_a_record_closes_once_its_machine_is_gone_and_its_replacement_ready():
    record = {"machine": "a", "uid": "uid-a", "reason": "Drifted", "at": timefmt.fmt(NOW), "startedAt": timefmt.fmt(NOW),
              "replacement": "new", "replacementReadyAt": timefmt.fmt(NOW)}
    assert _decide([_machine("new")], previous=[record]).records == []
    waiting = {**record, "replacementReadyAt": None}
    waiting.pop("replacementReadyAt")
    kept = _decide([_machine("new", initialized=False)], previous=[waiting]).records
    assert [r["machine"] for r in kept] == ["a"] and kept[0]["goneAt"]
    expired = _decide([_machine("new", initialized=False)], previous=kept,
                      now=NOW + dt.timedelta(seconds=disruption.RECORD_KEEP_SECONDS + 1)).records
    assert expired == []


def test_malformed_records_are_dropped():
    assert disruption.records_of({"disruptions": [1, {"machine": "a"}, {"machine": "a", "uid": "u", "reason": "Whim",
                                                                         "at": "2026-01-01T00:00:00Z"}]}) == []
    assert disruption.records_of({"disruptions": "nope"}) == []


_reasons = st.sampled_from(["none", "drift", "expired", "rebalance", "spot", "fenced"])


@settings(max_examples=150, deadline=None)
@given(kinds=st.lists(st.tuples(_reasons, st.booleans()), min_size=1, max_size=25),
       nodes=st.sampled_from(["0", "1", "2", "10%", "34%", "100%"]), calls=st.integers(1, 5))
def test_voluntary_disruptions_never_exceed_the_budget(kinds, nodes, calls):
    """However many Machines want to go, and over several calls, what the pool started itself never makes more
    Machines disrupting than the budget allows (forceful ones are counted but never held)."""
    machines, fenced = [], {}
    for i, (kind, deleting) in enumerate(kinds):
        annotations = {}
        if kind in ("rebalance", "spot"):
            reason = signals.REBALANCE if kind == "rebalance" else signals.SPOT_INTERRUPTION
            annotations[signals.INTERRUPTION_ANNOTATION] = signals.Signal(reason, NOW).encode()
        m = _machine(f"m{i}", drifted=60 if kind == "drift" else None, created=99999 if kind == "expired" else 60,
                     annotations=annotations, deleting=deleting and kind == "spot")
        if kind == "fenced":
            fenced[m["metadata"]["uid"]] = repair.Fenced("ns/fr", NOW, False)
        machines.append(m)
    rules = budgets.parse(_pool({"nodes": nodes}))
    size = sum(1 for m in machines if not m["metadata"]["deletionTimestamp"])
    limit = rules[0].limit(size)
    previous: list = []
    for _ in range(calls):
        out = _decide(machines, rules=rules, previous=previous, fenced=fenced, expire=3600.0)
        started_by_pool = [r for r in out.started if r["reason"] not in signals.FORCEFUL]
        forced = sum(1 for m in machines if m["metadata"]["deletionTimestamp"])
        if started_by_pool:
            assert out.disrupting <= max(limit, forced)
        assert out.disrupting - forced <= limit or not started_by_pool
        previous = out.records


def test_a_disruption_start_decided_again_is_counted_once_per_process(make_ctx):
    """A pool sync retried before its status was written decides the same start again: one count."""
    from hooks import actuators
    from hooks.metrics import MACHINES_DISRUPTED
    from hooks.plan import Action

    counter = MACHINES_DISRUPTED.labels("pool-dedupe", "Drifted")
    before = counter._value.get()
    same = Action("metric.disrupted", "pool-dedupe", {"reason": "Drifted", "record": "uid-1/Drifted/2026-11-24T10:00:00Z"})
    other = Action("metric.disrupted", "pool-dedupe", {"reason": "Drifted", "record": "uid-2/Drifted/2026-11-24T10:00:00Z"})
    actuators.act("nodepool", [same, same, other], make_ctx())
    actuators.act("nodepool", [same], make_ctx())
    assert counter._value.get() == before + 2
