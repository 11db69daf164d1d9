"""The interruption controller's pure parts: reading EventBridge messages, the queue's spec, judging a claim,
and the one write it makes (the Machine's annotation, over none or a weaker signal only)."""
from __future__ import annotations

import datetime as dt
import json
import pathlib

import pytest
import yaml

from fake_kube import FakeKube
from hooks.contract import RequestError
from hooks.interruption import judge, messages, queue
from hooks.kube import interruptions
from hooks.machines import names, signals
from tests.fixtures import ec2_events as ev

ROOT = pathlib.Path(__file__).parents[1]
IID = "i-0a1b2c3d4e5f60718"
T = "2026-11-23T12:00:00Z"
AT = dt.datetime(2026, 11, 23, 12, 0, 0, tzinfo=dt.timezone.utc)


def _parse(event, region: str = "us-east-1"):
    return messages.parse("m-1", event if isinstance(event, str) else ev.body(event), region)


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
    (ev.scheduled_change([IID], T, "whenever"), signals.SCHEDULED_CHANGE, None),
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
    dropped = messages.parse("m-1", body, "us-east-1")
    assert isinstance(dropped, messages.Dropped) and dropped.outcome == outcome, dropped
    assert dropped.outcome in messages.OUTCOMES


def test_a_message_without_a_readable_id_or_body_is_malformed():
    assert messages.parse(messages.message_id(None), "{}", "us-east-1").outcome == messages.MALFORMED
    assert messages.message_id("x" * 500) == "" and messages.message_id("a/b") == ""
    assert messages.parse("m-1", None, "us-east-1").outcome == messages.MALFORMED


def test_a_health_event_names_each_instance_once_and_skips_other_entities():
    event = ev.scheduled_change([IID, IID, "vol-0123456789abcdef0", "i-0b1b2c3d4e5f60729"], T, "x")
    assert _parse(event).instances == (IID, "i-0b1b2c3d4e5f60729")


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
        tags[names.cluster_tag("c")] = "owned"
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
        [verdict] = judge.judge(spot, book, found, "c")
        assert verdict.outcome == outcome, (verdict, outcome)
    [verdict] = judge.judge(spot, _book(one), {IID: _instance()}, "")
    assert verdict.outcome == messages.FOREIGN, "no cluster name, no proof of ownership"


def test_a_weaker_or_equal_signal_is_a_duplicate():
    existing = signals.Signal(signals.SPOT_INTERRUPTION, AT, None, "first").encode()
    book = _book(("m1", "uid-1", IID, existing))
    for event in (ev.spot_warning(IID, T), ev.rebalance(IID, T)):
        [verdict] = judge.judge(_parse(event), book, {IID: _instance()}, "c")
        assert verdict.outcome == messages.DUPLICATE


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


@pytest.mark.skipif(not (ROOT / ".bin" / "kustomize").exists(), reason="kustomize not built yet")
def test_the_hook_server_may_do_what_the_interruption_controller_needs():
    """A Forbidden read or patch would leave every message on the queue; the controller is authenticated too."""
    from tests.test_manifests import _granted, build

    objects = build("overlays/aws")
    deploy = next(o for o in objects if o["kind"] == "Deployment")
    account = (deploy["metadata"]["namespace"], deploy["spec"]["template"]["spec"]["serviceAccountName"])
    granted = _granted(objects, account)
    for verb in ("get", "list", "patch"):
        assert ("nodewarden.io", "machines", verb) in granted
    assert ("nodewarden.io", "interruptionqueues", "get") in granted
    [controller] = [o for o in objects if o["kind"] == "CompositeController" and o["metadata"]["name"] == "interruption"]
    assert controller["spec"]["endpointConfigs"][0]["host"] == "nodewarden.nodewarden-system.svc"
