"""The interruption controller's pure parts: reading EventBridge messages, the queue's spec, judging a claim,
and the one write it makes (the Machine's annotation, over none or a weaker signal only)."""
from __future__ import annotations

import datetime as dt
import json
import pathlib

import pytest
import yaml
from hypothesis import given, strategies as st

from hooks import ec2_names, timefmt
from hooks.contract import RequestError
from hooks.interruption import judge, messages, queue
from hooks.kube import interruptions
from hooks.machines import names, signals
from worlds import ec2_events as ev
from worlds.fake_kube import FakeKube

ROOT = pathlib.Path(__file__).parents[2]
IID = "i-0a1b2c3d4e5f60718"
T = "2026-11-23T12:00:00Z"
AT = dt.datetime(2026, 11, 23, 12, 0, 0, tzinfo=dt.timezone.utc)


def _parse(event, region: str = "us-east-1", now: dt.datetime = AT):
    return messages.parse("m-1", event if isinstance(event, str) else ev.body(event), region, now)


# -------------------------------------------------------------------------------- messages


@pytest.mark.parametrize("event, reason, deadline", [
    (ev.spot_warning(IID, T), signals.SPOT_INTERRUPTION, AT + dt.timedelta(seconds=120)),
    (ev.spot_warning(IID, T, action="stop"), signals.SPOT_INTERRUPTION, AT + dt.timedelta(seconds=120)),
    (ev.rebalance(IID, T), signals.REBALANCE, None),
    (ev.state_change(IID, "stopping", T), signals.INSTANCE_STOPPING, None),
    (ev.state_change(IID, "terminated", T), signals.INSTANCE_STOPPING, None),
    (ev.state_change(IID, "shutting-down", T), signals.INSTANCE_STOPPING, None),
    (ev.scheduled_change([IID], T, "Sat, 28 Nov 2026 20:00:00 GMT"), signals.SCHEDULED_CHANGE,
     dt.datetime(2026, 11, 28, 20, 0, tzinfo=dt.timezone.utc)),
    (ev.scheduled_change([IID], T, "2026-11-28T20:00:00Z"), signals.SCHEDULED_CHANGE,
     dt.datetime(2026, 11, 28, 20, 0, tzinfo=dt.timezone.utc)),
    ({**ev.scheduled_change([IID], T, "x"), "detail": {k: v for k, v in ev.scheduled_change([IID], T, "x")["detail"]
                                                       .items() if k != "startTime"}}, signals.SCHEDULED_CHANGE, None),
])
def test_every_kind_is_read(event, reason, deadline):
    claim = _parse(event)
    assert isinstance(claim, messages.Claim), claim
    assert (claim.reason, claim.instances, claim.at, claim.deadline) == (reason, (IID,), AT, deadline)
    assert claim.signal() == signals.Signal(reason, AT, deadline, "m-1")
    assert signals.parse(claim.signal().encode()) == claim.signal()


@pytest.mark.parametrize("body, outcome", [
    ("not json", messages.MALFORMED),
    ("[1, 2]", messages.MALFORMED),
    ("[" * 50 + "]" * 50, messages.MALFORMED),
    (json.dumps({"pad": "x" * (messages.MAX_BODY + 1)}), messages.MALFORMED),
    (ev.body({**ev.spot_warning(IID, T), "time": "yesterday"}), messages.MALFORMED),
    (ev.body({**ev.spot_warning(IID, T), "detail": {"instance-id": "i-../../etc"}}), messages.MALFORMED),
    (ev.body({**ev.spot_warning(IID, T), "detail": "i-0a1b2c3d4e5f60718"}), messages.MALFORMED),
    (ev.body({**ev.spot_warning(IID, T), "region": None}), messages.MALFORMED),
    (ev.body(ev.state_change(IID, "melting", T)), messages.MALFORMED),
    (ev.body(ev.scheduled_change([], T, "x")), messages.MALFORMED),
    (ev.body(ev.scheduled_change([IID], T, "whenever")), messages.MALFORMED),
    (ev.body(ev.scheduled_change([IID] * 101 + ["i-0b1b2c3d4e5f60729"], T, "x")), messages.MALFORMED),
    (ev.body(ev.spot_warning(IID, T, region="eu-west-1")), messages.FOREIGN),
    (ev.body({**ev.spot_warning(IID, T), "detail-type": "EC2 Fleet Spot Instance Request"}), messages.UNKNOWN),
    (ev.body({**ev.spot_warning(IID, T), "source": "my.app"}), messages.UNKNOWN),
    (ev.body(ev.state_change(IID, "running", T)), messages.IGNORED),
    (ev.body({**ev.scheduled_change([IID], T, "x"), "detail": {"service": "RDS",
                                                                  "eventTypeCategory": "scheduledChange"}}),
     messages.IGNORED),
])
def test_what_is_not_a_claim_is_dropped_with_its_outcome(body, outcome):
    dropped = messages.parse("m-1", body, "us-east-1", AT)
    assert isinstance(dropped, messages.Dropped) and dropped.outcome == outcome, dropped
    assert dropped.outcome in messages.OUTCOMES


def test_a_message_without_a_readable_id_or_body_is_malformed():
    assert messages.parse(messages.message_id(None), "{}", "us-east-1", AT).outcome == messages.MALFORMED
    assert messages.message_id("x" * 500) == "" and messages.message_id("a/b") == ""
    assert messages.parse("m-1", None, "us-east-1", AT).outcome == messages.MALFORMED


def test_a_health_event_names_each_instance_once_and_skips_other_entities():
    event = ev.scheduled_change([IID, IID, "vol-0123456789abcdef0", "i-0b1b2c3d4e5f60729"], T,
                                "Sat, 28 Nov 2026 20:00:00 GMT")
    assert _parse(event).instances == (IID, "i-0b1b2c3d4e5f60729")


@pytest.mark.parametrize("body", [
    ev.body(ev.spot_warning(IID, "9999-12-31T23:59:59Z")),  # its deadline is past year 9999
    ev.body(ev.spot_warning(IID, "0999-01-01T00:00:00Z")),
    ev.body(ev.spot_warning(IID, "9999-12-31T23:59:59-01:00")),  # past year 9999 in UTC
    ev.body(ev.spot_warning(IID, "0001-01-01T00:00:00+01:00")),  # before year 1 in UTC
    ev.body(ev.spot_warning(IID, timefmt.fmt(AT - dt.timedelta(days=15)))),  # older than SQS keeps a message
    ev.body(ev.spot_warning(IID, timefmt.fmt(AT + dt.timedelta(minutes=10)))),  # ahead of any clock skew
    ev.body(ev.scheduled_change([IID], T, "Fri, 31 Dec 9999 23:59:59 -0100")),
    ev.body(ev.scheduled_change([IID], T, "0999-01-01T00:00:00Z")),
    ev.body(ev.scheduled_change([IID], T, "9999-12-31T23:59:59-01:00")),
    ev.body(ev.scheduled_change([IID], T, timefmt.fmt(AT + dt.timedelta(days=400)))),
    ev.body(ev.scheduled_change([IID], "0999-01-01T00:00:00Z", "Sat, 28 Nov 2026 20:00:00 GMT")),
    ev.body(ev.state_change(IID, "stopping", "9999-12-31T23:59:59Z")),
])
def test_a_time_out_of_range_is_malformed(body):
    dropped = messages.parse("m-1", body, "us-east-1", AT)
    assert isinstance(dropped, messages.Dropped) and dropped.outcome == messages.MALFORMED, dropped
    assert "time" in dropped.why.lower()


_OFFSET = st.integers(min_value=-23 * 60 - 59, max_value=23 * 60 + 59).map(
    lambda m: dt.timezone(dt.timedelta(minutes=m)))


@given(moment=st.datetimes(min_value=dt.datetime(1, 1, 1), max_value=dt.datetime(9999, 12, 31, 23, 59, 59)),
       offset=_OFFSET)
def test_every_time_written_reads_back(moment, offset):
    aware = moment.replace(tzinfo=offset)
    try:
        utc = aware.astimezone(dt.timezone.utc)
    except OverflowError:
        return  # no such moment in UTC: nothing could be written for it
    assert timefmt.parse(timefmt.fmt(aware)) == utc.replace(microsecond=0)


_TIMES = st.one_of(
    st.datetimes(min_value=dt.datetime(1, 1, 1), max_value=dt.datetime(9999, 12, 31, 23, 59, 59), timezones=st.just(
        dt.timezone.utc)).flatmap(lambda m: st.sampled_from([m.isoformat(), m.strftime("%Y-%m-%dT%H:%M:%SZ")])),
    st.datetimes(min_value=dt.datetime(1, 1, 1), max_value=dt.datetime(9999, 12, 31, 23, 59, 59)).flatmap(
        lambda m: _OFFSET.map(lambda tz: m.replace(tzinfo=tz))).flatmap(
        lambda m: st.sampled_from([m.isoformat(), m.strftime("%a, %d %b %Y %H:%M:%S %z")])),
    st.datetimes(min_value=AT.replace(tzinfo=None) - dt.timedelta(days=400),
                 max_value=AT.replace(tzinfo=None) + dt.timedelta(days=400)).map(
        lambda m: m.replace(tzinfo=dt.timezone.utc).isoformat()),
    st.text(max_size=40),
)


@given(time=_TIMES, start=_TIMES, kind=st.sampled_from(["spot", "state", "health"]))
def test_no_time_makes_reading_a_message_fail_and_every_claim_writes_back(time, start, kind):
    event = {"spot": ev.spot_warning(IID, time), "state": ev.state_change(IID, "stopping", time),
             "health": ev.scheduled_change([IID], time, start)}[kind]
    read = messages.parse("m-1", ev.body(event), "us-east-1", AT)
    if isinstance(read, messages.Claim):
        signal = read.signal()
        assert signals.parse(signal.encode(), signals.INTERRUPTIONS) == signal
    else:
        assert read.outcome == messages.MALFORMED


# -------------------------------------------------------------------------------- the queue's spec


def _queue(**spec) -> dict:
    return {"spec": {"queueURL": "https://sqs.us-east-1.amazonaws.com/123456789012/q", **spec}}


def test_the_spec_defaults_and_bounds():
    spec = queue.parse(_queue())
    assert (spec.status_checks, spec.status_check_interval, spec.wait_seconds, spec.max_messages,
            spec.poll_interval, spec.region) == (True, 30.0, 1, 10, 1.0, "")
    for bad in ({"queueURL": "file:///etc/passwd"}, {"queueURL": 7}, {"waitSeconds": 20},
                {"maxMessagesPerCall": 11}, {"statusCheckInterval": "1s"}, {"pollInterval": "0s"},
                {"region": "../us"}, {"statusChecks": "yes"}, {"waitSeconds": True}):
        with pytest.raises(RequestError):
            queue.parse(_queue(**bad))


def test_the_crd_and_the_parser_agree_on_the_bounds():
    crd = yaml.safe_load((ROOT / "kustomize/base/crds/interruptionqueues.yaml").read_text())
    props = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert props["waitSeconds"]["maximum"] == queue.MAX_WAIT_SECONDS
    assert props["maxMessagesPerCall"]["maximum"] == queue.MAX_MESSAGES
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert set(status["messages"]["properties"]) == set(messages.OUTCOMES), "a pruned counter would never count"
    assert crd["spec"]["scope"] == "Cluster"


def test_the_controller_polls_by_resync_with_no_children_and_only_a_sync_hook():
    [c] = [d for d in yaml.safe_load_all((ROOT / "metacontroller/interruption.yaml").read_text()) if d]
    assert c["kind"] == "CompositeController" and c["spec"]["generateSelector"] is True
    assert not c["spec"].get("childResources") and set(c["spec"]["hooks"]) == {"sync"}
    assert c["spec"]["hooks"]["sync"]["webhook"] == {
        "url": "https://nodewarden.nodewarden-system.svc/interruption/sync", "timeout": "10s"}


# -------------------------------------------------------------------------------- judging


def _instance(iid=IID, *, uid="uid-1", cluster=True, lifecycle="spot", state="running") -> dict:
    tags = {names.TAG_MACHINE_UID: uid}
    if cluster:
        tags[ec2_names.cluster_tag("c")] = "owned"
    return {"instanceID": iid, "tags": tags, "lifecycle": lifecycle, "state": state}


def _book(*machines) -> judge.Book:
    return judge.Book([{"name": n, "uid": u, "instanceID": i, "interruption": a} for n, u, i, a in machines])


def test_a_claim_needs_the_cluster_tag_one_recording_machine_and_ec2s_agreement():
    spot = _parse(ev.spot_warning(IID, T))
    one = ("m1", "uid-1", IID, None)
    cases = [
        (_book(one), {IID: _instance()}, messages.RECORDED),
        (_book(one), {}, messages.FOREIGN),
        (_book(one), {IID: _instance(cluster=False)}, messages.FOREIGN),
        (_book(one), {IID: _instance(cluster=False, uid="uid-2")}, messages.FOREIGN),
        (_book(), {IID: _instance()}, messages.FOREIGN),
        (_book(one, ("m2", "uid-2", IID, None)), {IID: _instance()}, messages.FOREIGN),
        (_book(one), {IID: _instance(lifecycle="on-demand")}, messages.UNCONFIRMED),
        (_book(("m1", "uid-1", IID, ev.body({"x": 1}))), {IID: _instance()}, messages.RECORDED),  # garbage: none
    ]
    for book, found, outcome in cases:
        [verdict] = judge.judge(spot, book, found, "c", AT)
        assert verdict.outcome == outcome, (verdict, outcome)
    [verdict] = judge.judge(spot, _book(one), {IID: _instance()}, "", AT)
    assert verdict.outcome == messages.FOREIGN, "no cluster name, no proof of ownership"


def test_a_weaker_or_equal_signal_is_a_duplicate():
    existing = signals.Signal(signals.SPOT_INTERRUPTION, AT, None, "first").encode()
    book = _book(("m1", "uid-1", IID, existing))
    for event in (ev.spot_warning(IID, T), ev.rebalance(IID, T)):
        [verdict] = judge.judge(_parse(event), book, {IID: _instance()}, "c", AT)
        assert verdict.outcome == messages.DUPLICATE


@pytest.mark.parametrize("seconds, instance, outcome", [
    (60, {}, messages.RECORDED),  # within its two minutes: EC2 may not show the reclaim yet
    (119, {"spot_request": "fulfilled"}, messages.RECORDED),
    (120, {}, messages.UNCONFIRMED),  # its deadline, and EC2 says nothing of a reclaim
    (3600, {"spot_request": "fulfilled"}, messages.UNCONFIRMED),
    (3600, {"spot_request": "active"}, messages.UNCONFIRMED),
    (3600, {"state": "pending", "spot_request": "fulfilled"}, messages.UNCONFIRMED),
    (3600, {"spot_request": "marked-for-termination"}, messages.RECORDED),
    (3600, {"spot_request": "marked-for-stop"}, messages.RECORDED),
    (3600, {"spot_request": "marked-for-hibernation"}, messages.RECORDED),
    (3600, {"state": "shutting-down"}, messages.RECORDED),
    (3600, {"state": "terminated"}, messages.RECORDED),
    (3600, {"state": "stopped"}, messages.RECORDED),
    (3600, {"lifecycle": "on-demand", "spot_request": "marked-for-termination"}, messages.UNCONFIRMED),
])
def test_a_spot_warning_past_its_deadline_needs_ec2_to_say_the_instance_goes(seconds, instance, outcome):
    now = AT + dt.timedelta(seconds=seconds)
    claim = _parse(ev.spot_warning(IID, T), now=now)
    found = _instance(**{k: v for k, v in instance.items() if k != "spot_request"})
    if "spot_request" in instance:
        found["spotRequest"] = instance["spot_request"]
    assert judge.spot_status_needed(claim, now) is (seconds >= 120)
    [verdict] = judge.judge(claim, _book(("m1", "uid-1", IID, None)), {IID: found}, "c", now)
    assert verdict.outcome == outcome, verdict


def test_only_a_spot_warning_has_a_deadline_ec2_must_confirm_once_passed():
    later = AT + dt.timedelta(hours=1)
    for event in (ev.rebalance(IID, T), ev.scheduled_change([IID], T, "2026-11-23T12:30:00Z")):
        claim = _parse(event, now=later)
        assert not judge.spot_status_needed(claim, later)
        [verdict] = judge.judge(claim, _book(("m1", "uid-1", IID, None)), {IID: _instance()}, "c", later)
        assert verdict.outcome == messages.RECORDED


def _machine(name, uid, instance_id, interruption=None, deleting=False) -> dict:
    return {"name": name, "uid": uid, "instanceID": instance_id, "interruption": interruption, "deleting": deleting}


def test_a_notice_for_an_instance_our_tags_give_a_machine_not_recording_it_yet_waits():
    spot = _parse(ev.spot_warning(IID, T))
    unrecorded = _machine("m1", "uid-1", "")
    cases = [
        ([unrecorded], {}, AT, messages.WAITING),
        ([unrecorded], {"cluster": False}, AT, messages.FOREIGN),  # only this cluster's tag makes it ours
        ([unrecorded], {"uid": "uid-unknown"}, AT, messages.FOREIGN),  # a uid no Machine has proves nothing
        ([_machine("m1", "uid-1", "i-0b1b2c3d4e5f60729")], {}, AT, messages.FOREIGN),  # a second launch of m1
        ([_machine("m1", "uid-1", "", deleting=True)], {}, AT, messages.IGNORED),  # its finalizer terminates it
        ([unrecorded], {"lifecycle": "on-demand"}, AT, messages.UNCONFIRMED),  # EC2 says no now: no wait
        ([unrecorded], {}, AT + dt.timedelta(seconds=judge.RECORD_WAIT_SECONDS + 1), messages.UNCONFIRMED),
    ]
    for machines, instance, now, outcome in cases:
        [verdict] = judge.judge(spot, judge.Book(machines), {IID: _instance(**instance)}, "c", now)
        assert verdict.outcome == outcome, (machines, instance, verdict)
    health = _parse(ev.scheduled_change([IID], T, "2026-11-28T20:00:00Z"))
    late = AT + dt.timedelta(seconds=judge.RECORD_WAIT_SECONDS + 1)
    [verdict] = judge.judge(health, judge.Book([unrecorded]), {IID: _instance(lifecycle="on-demand")}, "c", late)
    assert verdict.outcome == messages.FOREIGN and "within" in verdict.why, "the wait ends"


def test_a_message_one_of_whose_instances_waits_writes_and_carries_nothing():
    other = "i-0b1b2c3d4e5f60729"
    book = judge.Book([_machine("m1", "uid-1", IID), _machine("m2", "uid-2", "")])
    found = {IID: _instance(lifecycle="on-demand"), other: _instance(other, uid="uid-2", lifecycle="on-demand")}
    health = _parse(ev.scheduled_change([IID, other], T, "2026-11-28T20:00:00Z"))
    verdicts = judge.judge(health, book, found, "c", AT)
    assert [v.outcome for v in verdicts] == [messages.WAITING, messages.WAITING]
    assert book.carried("uid-1") is None, "a later message for m1 is not judged against what was not written"
    [later] = judge.judge(_parse(ev.rebalance(IID, T)), book, {IID: _instance()}, "c", AT)
    assert later.outcome == messages.RECORDED


def test_our_own_termination_is_no_disruption():
    deleting = judge.Book([_machine("m1", "uid-1", IID, deleting=True)])
    for state in ("stopping", "shutting-down", "terminated"):
        [verdict] = judge.judge(_parse(ev.state_change(IID, state, T)), deleting,
                                {IID: _instance(state=state, lifecycle="on-demand")}, "c", AT)
        assert verdict.outcome == messages.IGNORED, verdict
    [rebalance] = judge.judge(_parse(ev.rebalance(IID, T)), deleting, {IID: _instance()}, "c", AT)
    assert rebalance.outcome == messages.IGNORED
    [spot] = judge.judge(_parse(ev.spot_warning(IID, T)), deleting, {IID: _instance()}, "c", AT)
    assert spot.outcome == messages.RECORDED, "a spot warning still cuts the drain of a Machine being deleted short"
    being_deleted = {"metadata": {"name": "m1", "uid": "uid-1", "deletionTimestamp": T}, "status": {"instanceID": IID}}
    terminating = {"metadata": {"name": "m1", "uid": "uid-1"},
                   "status": {"instanceID": IID, "termination": {"startedAt": T}}}
    live = {"metadata": {"name": "m1", "uid": "uid-1"}, "status": {"instanceID": IID}}
    assert [judge.machine_summary(m)["deleting"] for m in (being_deleted, terminating, live)] == [True, True, False]


def test_a_stop_ec2_no_longer_agrees_with_gives_way_to_any_later_notice():
    def stop(seconds_ago):
        return signals.Signal(signals.INSTANCE_STOPPING, AT - dt.timedelta(seconds=seconds_ago), None, "s").encode()

    health = _parse(ev.scheduled_change([IID], T, "2026-11-28T20:00:00Z"))
    cases = [
        (stop(600), "running", messages.RECORDED),
        (stop(signals.STOP_SETTLE_SECONDS), "running", messages.RECORDED),
        (stop(10), "running", messages.DUPLICATE),  # EC2's answer may predate the stop
        (stop(600), "stopped", messages.DUPLICATE),  # EC2 still agrees
        (stop(600), "pending", messages.DUPLICATE),
    ]
    for carried, state, outcome in cases:
        book = _book(("m1", "uid-1", IID, carried))
        [verdict] = judge.judge(health, book, {IID: _instance(state=state, lifecycle="on-demand")}, "c", AT)
        assert verdict.outcome == outcome, (carried, state, verdict)
        assert verdict.replaces == (carried if outcome == messages.RECORDED else None)


def test_a_stop_is_outlived_only_by_a_running_instance_read_well_after_it():
    stop = signals.Signal(signals.INSTANCE_STOPPING, AT, None, "s")
    later = AT + dt.timedelta(seconds=signals.STOP_SETTLE_SECONDS)
    assert signals.outlived(stop, "running", later)
    assert not signals.outlived(stop, "running", later - dt.timedelta(seconds=1))
    for state in ("pending", "stopping", "stopped", "shutting-down", "terminated", None):
        assert not signals.outlived(stop, state, later)
    for reason in (signals.SPOT_INTERRUPTION, signals.SCHEDULED_CHANGE, signals.STATUS_IMPAIRED, signals.REBALANCE):
        assert not signals.outlived(signals.Signal(reason, AT), "running", later)
    assert not signals.outlived(None, "running", later)


# -------------------------------------------------------------------------------- the write


def _kube_with(annotations: dict | None) -> FakeKube:
    meta = {"name": "m1", "uid": "uid-1", "resourceVersion": "5"}
    if annotations is not None:
        meta["annotations"] = annotations
    return FakeKube([{"apiVersion": names.API_VERSION, "kind": names.MACHINE_KIND, "metadata": meta}])


def _stored(kube: FakeKube) -> dict:
    return kube.objects[(names.MACHINE_KIND, "", "m1")]["metadata"]


SPOT = signals.Signal(signals.SPOT_INTERRUPTION, AT, AT + dt.timedelta(seconds=120), "a").encode()
REBALANCE = signals.Signal(signals.REBALANCE, AT, None, "b").encode()


def test_the_write_sets_the_annotation_once_and_never_over_a_stronger_signal():
    kube = _kube_with(None)
    assert interruptions.record(kube, "m1", "uid-1", REBALANCE) is True
    assert _stored(kube)["annotations"] == {signals.INTERRUPTION_ANNOTATION: REBALANCE}
    assert interruptions.record(kube, "m1", "uid-1", REBALANCE) is False
    assert interruptions.record(kube, "m1", "uid-1", SPOT) is True
    assert interruptions.record(kube, "m1", "uid-1", REBALANCE) is False
    assert _stored(kube)["annotations"][signals.INTERRUPTION_ANNOTATION] == SPOT
    assert len([c for c in kube.calls if c[0] == "json_patch"]) == 2


def test_the_write_keeps_other_annotations_and_checks_the_uid():
    kube = _kube_with({"team": "web"})
    interruptions.record(kube, "m1", "uid-1", SPOT)
    assert _stored(kube)["annotations"] == {"team": "web", signals.INTERRUPTION_ANNOTATION: SPOT}
    with pytest.raises(interruptions.MachineReplaced):
        interruptions.record(_kube_with({}), "m1", "uid-other", SPOT)
    with pytest.raises(ValueError):
        interruptions.record(_kube_with({}), "m1", "uid-1", "garbage")


def test_the_write_reads_again_when_another_writer_came_first():
    kube = _kube_with({})
    original = kube.json_patch

    def racing(res, name, ops, namespace=None):
        if not racing.done:  # someone records a spot warning between our read and our patch
            racing.done = True
            kube.objects[(names.MACHINE_KIND, "", "m1")]["metadata"].update(
                resourceVersion="6", annotations={signals.INTERRUPTION_ANNOTATION: SPOT})
        return original(res, name, ops, namespace)

    racing.done = False
    kube.json_patch = racing
    assert interruptions.record(kube, "m1", "uid-1", REBALANCE) is False, "read again: the stronger signal stays"
    assert _stored(kube)["annotations"][signals.INTERRUPTION_ANNOTATION] == SPOT


def test_the_write_replaces_only_the_stop_it_was_told_of():
    stop = signals.Signal(signals.INSTANCE_STOPPING, AT, None, "s").encode()
    kube = _kube_with({signals.INTERRUPTION_ANNOTATION: stop})
    assert interruptions.record(kube, "m1", "uid-1", REBALANCE) is False, "a stop stands over a weaker signal"
    assert interruptions.record(kube, "m1", "uid-1", REBALANCE, replaces=SPOT) is False, "not the one there"
    assert interruptions.record(kube, "m1", "uid-1", REBALANCE, replaces=stop) is True
    assert _stored(kube)["annotations"][signals.INTERRUPTION_ANNOTATION] == REBALANCE


def test_a_notice_is_retired_only_while_it_is_the_one_judged():
    stop = signals.Signal(signals.INSTANCE_STOPPING, AT, None, "s").encode()
    kube = _kube_with({"team": "web", signals.INTERRUPTION_ANNOTATION: SPOT})  # written since the stop was judged
    assert interruptions.retire(kube, "m1", "uid-1", stop) is False
    assert interruptions.retire(kube, "m1", "uid-other", SPOT) is False
    assert _stored(kube)["annotations"][signals.INTERRUPTION_ANNOTATION] == SPOT
    assert interruptions.retire(kube, "m1", "uid-1", SPOT) is True
    assert _stored(kube)["annotations"] == {"team": "web"}
    assert interruptions.retire(kube, "m1", "uid-1", SPOT) is False, "gone already: nothing to do"


@pytest.mark.skipif(not (ROOT / ".bin" / "kustomize").exists(), reason="kustomize not built yet")
def test_the_hook_server_may_do_what_the_interruption_controller_needs():
    """A Forbidden read or patch would leave every message on the queue; the controller is authenticated too."""
    from tests.deploy.test_manifests import _granted, build

    objects = build("overlays/aws")
    deploy = next(o for o in objects if o["kind"] == "Deployment")
    account = (deploy["metadata"]["namespace"], deploy["spec"]["template"]["spec"]["serviceAccountName"])
    granted = _granted(objects, account)
    for verb in ("get", "list", "patch"):
        assert ("nodewarden.io", "machines", verb) in granted
    assert ("nodewarden.io", "interruptionqueues", "get") in granted
    [controller] = [o for o in objects if o["kind"] == "CompositeController" and o["metadata"]["name"] == "interruption"]
    assert controller["spec"]["endpointConfigs"][0]["host"] == "nodewarden.nodewarden-system.svc"
