"""Disruption rules: budgets (rounding, schedules, reasons), signals, repair proof and the pool's choice (pure)."""
from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import json
import zlib

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from hooks import timefmt
from hooks.contract import RequestError
from hooks.machines import budgets, pool, repair, signals, spec
from hooks.nodepools import disruption, records
from hooks.nodepools.children import desired
from worlds import pool_inputs
from tests.fixtures.make_machines import pool_obj
from worlds.pools import PoolWorld, check_converged, check_sync

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
    parsed = pool_inputs.pool_spec(replicas=replicas, rules=rules, expire=expire, template_hash=HASH)
    return disruption.run(pool_inputs.state(machines, parsed, now, fenced=fenced), list(previous))


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


def test_a_forceful_notice_given_after_the_deletion_began_is_no_disruption():
    """A spot warning for a Machine a scale-down (or a user) was already deleting is recorded on it to cut
    its drain short; the pool's deletion came first, so the pool counts no disruption for it."""
    late = {signals.INTERRUPTION_ANNOTATION:
            signals.Signal(signals.SPOT_INTERRUPTION, NOW + dt.timedelta(seconds=30)).encode()}
    going = _decide([_machine("a", annotations=late, deleting=True), _machine("b")],
                    rules=budgets.parse(_pool({"nodes": "0"})), now=NOW + dt.timedelta(seconds=40))
    assert going.started == [] and going.records == []


def test_surge_first_the_old_machine_stays_until_its_replacement_is_initialized():
    machines = [_machine("a", drifted=60), _machine("b")]
    out = _decide(machines, replicas=2)
    assert out.held == {"a"} and out.leaving == set() and [r["machine"] for r in out.needs] == ["a"]
    made_for = records.replaces(out.needs[0])
    assert records.replaces_of(_machine("new", annotations=made_for)).uid == "uid-a"
    records.assign_replacements(out.needs, ["new"])
    later = _decide(machines + [_machine("new", initialized=False, annotations=made_for)], previous=out.records,
                    replicas=2)
    assert later.leaving == set() and later.kept == {"new"} and later.needs == []
    done = _decide(machines + [_machine("new", annotations=made_for)], previous=out.records, replicas=2)
    assert done.leaving == {"a"} and [r["machine"] for r in done.ready] == ["a"]


def test_the_children_alone_prove_a_disruption_and_its_replacement():
    """No record in status: the replacement's annotation, or the pool's mark on the Machine, is the proof."""
    machines = [_machine("a", drifted=60), _machine("b")]
    [record] = _decide(machines, replicas=2).records
    new = _machine("new", initialized=False, annotations=records.replaces(record))
    rebuilt = _decide(machines + [new], replicas=2)
    assert [(r["machine"], r["reason"], r["at"], r["replacement"]) for r in rebuilt.records] == \
        [("a", "Drifted", record["at"], "new")]
    assert rebuilt.started == [] and rebuilt.leaving == set() and rebuilt.held == {"a"}
    mark = {signals.DISRUPTION_ANNOTATION: signals.Signal(signals.DRIFTED, NOW).encode()}
    marked = _decide([_machine("a", drifted=60, annotations=mark), _machine("b")], replicas=2)
    assert marked.started == [] and marked.held == {"a"} and [r["machine"] for r in marked.needs] == ["a"]


def test_a_replacement_named_only_by_its_record_is_still_waited_for():
    """A replacement made before replacements named the Machine they replace: the record's name pairs them."""
    machines = [_machine("a", drifted=60), _machine("b"), _machine("new", initialized=False)]
    record = {"machine": "a", "uid": "uid-a", "reason": "Drifted", "at": timefmt.fmt(NOW),
              "startedAt": timefmt.fmt(NOW), "replacement": "new"}
    out = _decide(machines, previous=[record], replicas=2)
    assert out.leaving == set() and out.kept == {"new"} and out.needs == []


@pytest.mark.parametrize("value", [None, "", "{", "[]", json.dumps({"uid": "u", "machine": "a", "reason": "Whim",
                                                                      "at": timefmt.fmt(NOW)}),
                                   json.dumps({"uid": "", "machine": "a", "reason": "Drifted", "at": timefmt.fmt(NOW)}),
                                   json.dumps({"uid": "u", "machine": "a" * 64, "reason": "Drifted",
                                               "at": timefmt.fmt(NOW)}),
                                   json.dumps({"uid": "u", "machine": "a", "reason": "Drifted", "at": "soon"}),
                                   "x" * 2000])
def test_a_malformed_replaces_annotation_names_nothing(value):
    annotations = {} if value is None else {"nodewarden.io/replaces": value}
    assert records.replaces_of(_machine("new", annotations=annotations)) is None


def test_a_record_closes_once_its_machine_is_gone_and_its_replacement_ready():
    record = {"machine": "a", "uid": "uid-a", "reason": "Drifted", "at": timefmt.fmt(NOW), "startedAt": timefmt.fmt(NOW),
              "replacement": "new", "replacementReadyAt": timefmt.fmt(NOW)}
    assert _decide([_machine("new")], previous=[record]).records == []
    waiting = {**record, "replacementReadyAt": None}
    waiting.pop("replacementReadyAt")
    kept = _decide([_machine("new", initialized=False)], previous=[waiting]).records
    assert [r["machine"] for r in kept] == ["a"] and kept[0]["goneAt"]
    expired = _decide([_machine("new", initialized=False)], previous=kept,
                      now=NOW + dt.timedelta(seconds=records.RECORD_KEEP_SECONDS + 1)).records
    assert expired == []


def test_malformed_records_are_dropped():
    assert records.records_of({"disruptions": [1, {"machine": "a"}, {"machine": "a", "uid": "u", "reason": "Whim",
                                                                         "at": "2026-01-01T00:00:00Z"}]}) == []
    assert records.records_of({"disruptions": "nope"}) == []


# --------------------------------------------------------------------------- provisioning pools (no replicas)


def _decide_provisioning(machines, previous=()):
    return disruption.run(pool_inputs.state(machines, pool_inputs.pool_spec(template_hash=HASH), NOW), list(previous))


def test_without_replicas_a_disrupted_machine_waits_for_its_replacement():
    """A static pool with its replicas without the Machine lets it go; a provisioning pool has no count to say so."""
    machines = [_machine("a", drifted=60), _machine("b")]
    assert _decide(machines, replicas=1).leaving == {"a"}
    out = _decide_provisioning(machines)
    assert out.leaving == set() and out.held == {"a"} and [r["machine"] for r in out.needs] == ["a"]


@pytest.mark.parametrize("reason", signals.CONSOLIDATION)
def test_a_consolidation_mark_is_recorded_and_proven_like_the_pools_other_choices(reason):
    mark = {signals.DISRUPTION_ANNOTATION: signals.Signal(reason, NOW).encode()}
    out = _decide_provisioning([_machine("a", annotations=mark), _machine("b")])
    assert [(r["machine"], r["reason"]) for r in out.records] == [("a", reason)]
    assert out.held == {"a"} and out.started == [] and out.disrupting == 1
    assert records.records_of({"disruptions": out.records}) == out.records
    new = _machine("new", initialized=False, annotations=records.replaces(out.records[0]))
    assert records.replaces_of(new).reason == reason
    again = _decide_provisioning([_machine("a", annotations=mark), _machine("b"), new], out.records)
    assert again.needs == [] and again.kept == {"new"} and again.records[0]["replacement"] == "new"
    assert records.budget_status(budgets.DEFAULT, 2, out.disrupting, NOW, {})["allowed"][reason] == 0


@pytest.mark.parametrize("reason", signals.CONSOLIDATION)
def test_a_consolidated_machine_on_its_way_out_is_not_replaced(reason):
    """Its pods fit elsewhere, or it had none: a replacement would be as empty, and be consolidated in turn."""
    mark = {signals.DISRUPTION_ANNOTATION: signals.Signal(reason, NOW).encode()}
    chosen = _decide_provisioning([_machine("a", annotations=mark), _machine("b")])
    assert chosen.leaving == {"a"} and chosen.needs == []
    going = _decide_provisioning([_machine("a", annotations=mark, deleting=True), _machine("b")], chosen.records)
    assert [r["machine"] for r in going.records] == ["a"] and going.needs == []
    drifted = _decide_provisioning([_machine("a", drifted=60, deleting=True), _machine("b")],
                                   [{**chosen.records[0], "reason": signals.DRIFTED}])
    assert [r["machine"] for r in drifted.needs] == ["a"]  # any other reason keeps the pool's size


def test_a_pool_without_replicas_creates_and_removes_no_machine_for_a_count():
    provisioning = spec.pool(pool_obj(None))
    machines = [_machine("a"), _machine("b", initialized=False, node=False), _machine("c", deleting=True)]
    state = pool_inputs.state(machines, provisioning, NOW)
    children, created, removed = desired(state, pool_inputs.empty_pass(), [])
    assert (created, removed) == ([], []) and [c["metadata"]["name"] for c in children] == ["a", "b", "c"]
    children, created, removed = desired(state, pool_inputs.empty_pass(leaving={"a"}), [])
    assert (created, removed) == ([], ["a"]) and [c["metadata"]["name"] for c in children] == ["b", "c"]


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


# --------------------------------------------------------------------------- the pool over many calls
# worlds/pools.py: the pool's own decide on the API server's Machines, applied as Metacontroller applies it.


def _drift_started(world: PoolWorld):
    """The template changes: the pool chooses its first drifted Machine and makes its replacement."""
    world.change_template()
    step = world.sync()
    check_sync(world, step, 1)
    [record] = step.records
    [replacement] = step.created
    return record["machine"], replacement


def test_a_scale_down_never_removes_the_replacement_a_machine_waits_for():
    """The default budget (one at a time in a pool of three): the first drifted Machine waits for its
    replacement when an autoscaler scales the pool down. The scale-down leaves that replacement alone (the
    other Machines wait for the budget the drift uses), the drifted Machine leaves once its replacement is
    Initialized, and the pool ends with the new replicas, all up to date."""
    world = PoolWorld(replicas=3, budget=None)
    old, replacement = _drift_started(world)
    world.scale(2)
    step = world.sync()
    check_sync(world, step, 1)
    assert replacement not in step.let_go and old not in step.let_go
    world.initialize(replacement)
    step = world.sync()
    check_sync(world, step, 1)
    assert old in step.let_go
    world.settle(check=lambda s: check_sync(world, s, 1))
    check_converged(world)


@pytest.mark.parametrize("replicas", [0, 1])
def test_scaling_down_to_the_replacements_alone_still_converges(replicas):
    """Both Machines drifted and wait for their replacements when the pool shrinks to fewer than those."""
    world = PoolWorld(replicas=2, budget="2")
    world.change_template()
    step = world.sync()
    assert len(step.created) == 2
    world.scale(replicas)
    step = world.sync()
    check_sync(world, step, 2)
    world.settle(check=lambda s: check_sync(world, s, 2))
    check_converged(world)


def test_a_replacement_fenced_before_it_initializes_is_repaired_and_replaced_in_turn():
    """The replacement registers, then fencing powers its Node off: it can never be Initialized. It is
    repaired at once (the budget the drift already uses does not hold it), the drifted Machine gets a new
    replacement and waits for that one; the fenced Machine goes once its Node's recovery is done."""
    world = PoolWorld(replicas=3, budget=None)
    old, replacement = _drift_started(world)
    world.register(replacement)
    world.fence(replacement)
    step = world.sync()
    check_sync(world, step, 1)
    reasons = {r["machine"]: r["reason"] for r in step.records}
    assert reasons == {old: signals.DRIFTED, replacement: signals.REPAIR}
    [second] = step.created
    assert world.made_for[world.machines[second]["metadata"]["uid"]] == world.machines[old]["metadata"]["uid"]
    assert not step.let_go
    world.initialize(second)
    step = world.sync()
    check_sync(world, step, 1)
    assert step.let_go == [old]  # its new replacement is Initialized; the fenced one waits for recovery
    world.recover(replacement)
    step = world.sync()
    assert replacement in step.let_go
    world.settle(check=lambda s: check_sync(world, s, 1))
    check_converged(world)


@pytest.mark.parametrize("marks_lost", [False, True], ids=["status-lost", "status-and-mark-lost"])
def test_a_lost_status_write_never_lets_the_old_machine_go_before_its_replacement_is_initialized(marks_lost):
    """Metacontroller creates the replacement, then fails to write the pool's status: the next sync has no
    record. The replacement names the Machine it replaces, so the pool still waits for it (and with the
    pool's mark lost too)."""
    world = PoolWorld(replicas=3, budget=None)
    world.change_template()
    first = world.sync(fail_status=True, fail_marks=marks_lost)
    [record] = first.records
    [replacement] = first.created
    assert world.open_records() == []
    again = world.sync()
    check_sync(world, again, 1)
    assert again.let_go == [] and replacement in {c["metadata"]["name"] for c in again.response["children"]}
    assert [(r["machine"], r.get("replacement")) for r in again.records] == [(record["machine"], replacement)]
    assert again.created == [], "no second replacement"
    world.initialize(replacement)
    step = world.sync()
    assert step.let_go == [record["machine"]]
    world.settle(check=lambda s: check_sync(world, s, 1))
    check_converged(world)


def test_a_record_lost_with_the_status_keeps_its_place_in_the_budget():
    """The status write fails after the replacement was made; before the next sync another Machine gets a
    rebalance notice, which goes before drift. The record rebuilt from the children still holds the budget:
    the notice waits, and the drifted Machine keeps waiting for its replacement."""
    world = PoolWorld(replicas=3, budget=None)
    world.change_template()
    first = world.sync(fail_status=True)
    [record] = first.records
    [replacement] = first.created
    other = next(n for n in sorted(world.machines) if n not in (record["machine"], replacement))
    world.notice(other)
    again = world.sync()
    check_sync(world, again, 1)
    assert [(r["machine"], r["startedAt"], r.get("replacement")) for r in again.records] == \
        [(record["machine"], record["startedAt"], replacement)]
    assert again.response["status"]["disruption"]["blocked"][signals.REBALANCE] == 1
    assert again.let_go == [] and again.created == []


def test_a_replacement_lost_while_its_record_exists_is_made_again():
    """The record was written but the replacement's create failed: the next sync makes it (naming the Machine
    it replaces), and the drifted Machine waits for it."""
    world = PoolWorld(replicas=3, budget=None)
    world.change_template()
    first = world.sync(fail_child=lambda name: True)
    assert first.created == [] and len(world.open_records()) == 1
    again = world.sync()
    check_sync(world, again, 1)
    [replacement] = again.created
    old = world.open_records()[0]["uid"]
    assert world.made_for[world.machines[replacement]["metadata"]["uid"]] == old
    assert again.let_go == []


@dataclasses.dataclass(frozen=True)
class Call:
    """How one sync goes: which of its writes fail, whether Metacontroller's cache is a step behind, and how
    long after the last one it comes (0: a repeated call)."""

    fail_status: bool
    fail_marks: bool
    fail_children: frozenset[int]  # by a hash of the child's name, so a create or a delete of it fails
    behind: bool
    seconds: int

    def fails(self, name: str) -> bool:
        return zlib.crc32(name.encode()) % 4 in self.fail_children


_calls = st.builds(Call, fail_status=st.booleans(), fail_marks=st.booleans(),
                   fail_children=st.frozensets(st.integers(0, 3), max_size=2), behind=st.booleans(),
                   seconds=st.sampled_from([0, 1, 30]))


class PoolCalls(RuleBasedStateMachine):
    """The pool over many syncs in Metacontroller's order (children, then status; any write may fail; a sync may
    be repeated, or see Metacontroller's cache a step behind) while replicas and the template change and
    Machines come up, are fenced, recover, get a rebalance notice, delete themselves or finish deleting.
    Each change is followed by a sync, as a change of the pool or of a child makes Metacontroller sync it.
    After every sync the budget, surge-first and repair after recovery hold (check_sync); once changes stop
    the pool converges (check_converged)."""

    @initialize(replicas=st.integers(1, 4), budget=st.sampled_from([1, 2, 3]), drifting=st.booleans(), call=_calls)
    def start(self, replicas, budget, drifting, call):
        """A pool of Initialized Machines; with ``drifting``, its template has just changed: a surge is under way."""
        self.budget = budget
        self.world = PoolWorld(replicas=replicas, budget=str(budget))
        self.cache = list(copy.deepcopy(self.world.machines).values())
        if drifting:
            self.world.change_template()
            self._sync(call)

    def _pick(self, index: int, machines: list[dict]) -> str | None:
        """The newest first: small indices, which Hypothesis tries most, hit the replacements."""
        found = sorted(machines, key=lambda m: (m["metadata"]["creationTimestamp"], m["metadata"]["name"]),
                       reverse=True)
        return found[index % len(found)]["metadata"]["name"] if found else None

    def _sync(self, call: Call) -> None:
        self.world.tick(call.seconds)
        step = self.world.sync(fail_status=call.fail_status, fail_marks=call.fail_marks, fail_child=call.fails,
                               cache=self.cache if call.behind else None)
        check_sync(self.world, step, self.budget)
        self.cache = list(step.before.values())

    @rule(call=_calls)
    def repeat(self, call):
        self._sync(call)

    @rule(replicas=st.integers(0, 4), call=_calls)
    def scale(self, replicas, call):
        self.world.scale(replicas)
        self._sync(call)

    @rule(back=st.booleans(), call=_calls)
    def change_template(self, back, call):
        self.world.change_template(back=back)
        self._sync(call)

    @rule(index=st.integers(0, 7), call=_calls)
    def register(self, index, call):
        name = self._pick(index, self.world.live())
        if name:
            self.world.register(name)
        self._sync(call)

    @rule(index=st.integers(0, 7), call=_calls)
    def initialize(self, index, call):
        name = self._pick(index, self.world.live())
        if name:
            self.world.initialize(name)
        self._sync(call)

    @rule(index=st.integers(0, 7), call=_calls)
    def fence(self, index, call):
        """A Node dies and fencing powers it off; a Node that had just registered too."""
        name = self._pick(index, self.world.live())
        if name:
            self.world.register(name)
            self.world.fence(name)
        self._sync(call)

    @rule(index=st.integers(0, 7), call=_calls)
    def recover(self, index, call):
        name = self._pick(index, [m for m in self.world.machines.values() if self.world.powered_off(m)])
        if name:
            self.world.recover(name)
        self._sync(call)

    @rule(index=st.integers(0, 7), call=_calls)
    def notice(self, index, call):
        name = self._pick(index, self.world.live())
        if name:
            self.world.notice(name)
        self._sync(call)

    @rule(index=st.integers(0, 7), spot=st.booleans(), call=_calls)
    def delete_itself(self, index, spot, call):
        name = self._pick(index, self.world.live())
        if name:
            (self.world.interrupt if spot else self.world.lose)(name)
        self._sync(call)

    @rule(index=st.integers(0, 7), call=_calls)
    def finish(self, index, call):
        name = self._pick(index, self.world.deleting())
        if name:
            self.world.finish(name)
        self._sync(call)

    def teardown(self):
        if hasattr(self, "world"):
            self.world.settle(check=lambda step: check_sync(self.world, step, self.budget))
            check_converged(self.world)


PoolCalls.TestCase.settings = settings(max_examples=100, stateful_step_count=30, deadline=None, derandomize=True,
                                       database=None, suppress_health_check=[HealthCheck.too_slow])
test_the_pool_keeps_its_budget_surge_first_and_converges = PoolCalls.TestCase
