"""The interruption controller with moto as SQS, EventBridge and EC2, and tests/fake_kube.py as the API server.

Events reach the queue the way they do in AWS: an EventBridge rule per kind
(the patterns of docs/interruptions.md) with the queue as its target, and
``put_events`` standing in for EC2 and AWS Health (AWS refuses ``aws.*``
sources from callers; moto accepts them and delivers the event to the queue
in EventBridge's envelope). Where moto lacks an AWS behaviour the test says
so: it never makes an instance's status checks impaired, so that test marks
one impaired in moto's own DescribeInstanceStatus answer with a botocore
event handler.
"""
from __future__ import annotations

import datetime as dt
import json

import pytest
from botocore.exceptions import ClientError

from devcluster import interruptions
from fake_kube import FakeKube, api_error
from gc_world import Calls
from hooks import metrics, timefmt
from hooks.aws import sqs as sqs_calls
from hooks.dispatch import serve
from hooks.machines import names, signals
from support import hook_request
from tests.fixtures import ec2_events as ev

pytestmark = pytest.mark.moto
CLUSTER = "test-cluster"
QUEUE_UID = "uid-queue-1"


def _queue(url: str, **spec) -> dict:
    return {"apiVersion": names.API_VERSION, "kind": "InterruptionQueue",
            "metadata": {"name": "default", "uid": QUEUE_UID, "generation": 1},
            "spec": {"queueURL": url, "waitSeconds": 0, **spec}}


def _machine(name: str, uid: str, instance_id: str, annotations: dict | None = None) -> dict:
    return {"apiVersion": names.API_VERSION, "kind": names.MACHINE_KIND,
            "metadata": {"name": name, "uid": uid, "resourceVersion": "7", "annotations": dict(annotations or {})},
            "spec": {}, "status": {"instanceID": instance_id}}


def _launch(ec2, *, uid: str | None, cluster: bool = True, spot: bool = True) -> str:
    tags = [{"Key": names.TAG_MACHINE_UID, "Value": uid}] if uid else []
    if cluster:
        tags.append({"Key": names.cluster_tag(CLUSTER), "Value": names.CLUSTER_TAG_VALUE})
    kwargs = {"InstanceMarketOptions": {"MarketType": "spot"}} if spot else {}
    found = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1, InstanceType="m5.large",
                              TagSpecifications=[{"ResourceType": "instance", "Tags": tags}] if tags else [],
                              **kwargs)
    return found["Instances"][0]["InstanceId"]


class World:
    """A queue fed by EventBridge rules, the InterruptionQueue on the API server, and a hook context."""

    def __init__(self, aws, make_ctx, name: str = "interruptions", kube: FakeKube | None = None, **spec):
        self.sqs, self.events, self.ec2 = aws("sqs"), aws("events"), aws("ec2")
        self.url = interruptions.create_queue(self.sqs, self.events, name)
        self.parent = _queue(self.url, **spec)
        self.kube = kube or FakeKube()
        self.kube.add_object(self.parent)
        self.ctx = make_ctx({}, kube=self.kube)

    def machine(self, name: str, uid: str, instance_id: str, annotations: dict | None = None) -> None:
        self.kube.add_object(_machine(name, uid, instance_id, annotations))

    def annotation(self, name: str) -> signals.Signal | None:
        obj = self.kube.objects[(names.MACHINE_KIND, "", name)]
        return signals.of(obj, signals.INTERRUPTION_ANNOTATION)

    def sync(self, parent: dict | None = None) -> dict:
        response = serve("interruption", "sync", hook_request("interruption", parent or self.parent), self.ctx)
        if parent is None:  # Metacontroller writes the status the hook answered
            self.parent["status"] = response["status"]
            self.kube.add_object(self.parent)
        return response

    def on_queue(self) -> int:
        """Messages on the queue, visible or not (deleted ones are neither)."""
        attrs = self.sqs.get_queue_attributes(QueueUrl=self.url, AttributeNames=[
            "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
        return int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"])

    def machine_patches(self) -> list:
        return [c for c in self.kube.calls if c[0] == "json_patch" and c[1] == names.MACHINE_KIND]


def _count(kind: str, outcome: str) -> float:
    return metrics.INTERRUPTION_MESSAGES.labels(kind, outcome)._value.get()


def test_a_spot_warning_through_eventbridge_is_recorded_on_its_machine_then_deleted(aws, make_ctx):
    world = World(aws, make_ctx)
    iid = _launch(world.ec2, uid="uid-m1")
    world.machine("web-m1", "uid-m1", iid)
    world.machine("web-m2", "uid-m2", _launch(world.ec2, uid="uid-m2"))
    before = _count(signals.SPOT_INTERRUPTION, "recorded")
    interruptions.put(world.events, ev.spot_warning(iid, "2026-11-23T12:00:00Z"))
    assert world.on_queue() == 1

    response = world.sync()

    signal = world.annotation("web-m1")
    assert signal is not None and signal.reason == signals.SPOT_INTERRUPTION
    assert signal.deadline - signal.at == dt.timedelta(seconds=signals.SPOT_NOTICE_SECONDS)
    assert world.annotation("web-m2") is None, "only the Machine recording the instance"
    assert world.on_queue() == 0, "deleted once recorded"
    assert response["status"]["messages"]["recorded"] == 1
    assert response["resyncAfterSeconds"] <= 1.0
    assert _count(signals.SPOT_INTERRUPTION, "recorded") == before + 1
    assert events_of(world) == ["InterruptionRecorded"]


def events_of(world: World) -> list[str]:
    return world.kube.reasons()


def test_a_scheduled_retirement_records_its_start_as_the_deadline(aws, make_ctx):
    world = World(aws, make_ctx)
    iid = _launch(world.ec2, uid="uid-m1", spot=False)
    world.machine("web-m1", "uid-m1", iid)
    interruptions.put(world.events,
                      ev.scheduled_change([iid], "2026-11-23T12:00:00Z", "Sat, 28 Nov 2026 20:00:00 GMT"))

    world.sync()

    signal = world.annotation("web-m1")
    assert signal.reason == signals.SCHEDULED_CHANGE and timefmt.fmt(signal.deadline) == "2026-11-28T20:00:00Z"
    assert world.on_queue() == 0


def test_a_state_change_is_recorded_only_while_ec2_says_the_instance_is_leaving(aws, make_ctx):
    world = World(aws, make_ctx)
    running = _launch(world.ec2, uid="uid-m1", spot=False)
    stopped = _launch(world.ec2, uid="uid-m2", spot=False)
    world.machine("web-m1", "uid-m1", running)
    world.machine("web-m2", "uid-m2", stopped)
    world.ec2.stop_instances(InstanceIds=[stopped])
    for iid in (running, stopped):
        interruptions.put(world.events, ev.state_change(iid, "stopping", "2026-11-23T12:00:00Z"))

    response = world.sync()

    assert world.annotation("web-m1") is None, "EC2 says running: the message is not confirmed"
    assert world.annotation("web-m2").reason == signals.INSTANCE_STOPPING
    assert response["status"]["messages"]["unconfirmed"] == 1 and response["status"]["messages"]["recorded"] == 1
    assert world.on_queue() == 0


def test_foreign_instances_are_dropped_deleted_and_counted(aws, make_ctx):
    world = World(aws, make_ctx)
    untagged = _launch(world.ec2, uid="uid-m1", cluster=False)  # recorded by a Machine, not tagged for us
    unrecorded = _launch(world.ec2, uid="uid-gone")  # tagged for us, recorded by no Machine
    world.machine("web-m1", "uid-m1", untagged)
    before = _count(signals.SPOT_INTERRUPTION, "foreign")
    for iid in (untagged, unrecorded, "i-0123456789abcdef0"):  # the last: EC2 does not know it
        interruptions.put(world.events, ev.spot_warning(iid, "2026-11-23T12:00:00Z"))

    response = world.sync()

    assert world.machine_patches() == [] and world.annotation("web-m1") is None
    assert world.on_queue() == 0, "dropped messages are deleted"
    assert response["status"]["messages"]["foreign"] == 3
    assert _count(signals.SPOT_INTERRUPTION, "foreign") == before + 3
    assert events_of(world) == []


def test_a_spot_warning_for_an_on_demand_instance_is_dropped(aws, make_ctx):
    world = World(aws, make_ctx)
    iid = _launch(world.ec2, uid="uid-m1", spot=False)
    world.machine("web-m1", "uid-m1", iid)
    for event in (ev.spot_warning(iid, "2026-11-23T12:00:00Z"), ev.rebalance(iid, "2026-11-23T12:00:00Z")):
        interruptions.put(world.events, event)

    response = world.sync()

    assert world.annotation("web-m1") is None and world.machine_patches() == []
    assert response["status"]["messages"]["unconfirmed"] == 2
    assert world.on_queue() == 0


def test_unknown_and_malformed_messages_are_dropped_with_a_metric(aws, make_ctx):
    world = World(aws, make_ctx)
    before = (_count("unknown", "unknown"), _count("unknown", "malformed"))
    world.sqs.send_message(QueueUrl=world.url, MessageBody=json.dumps({"source": "aws.s3", "detail-type": "x"}))
    world.sqs.send_message(QueueUrl=world.url, MessageBody="{" * 5000)

    response = world.sync()

    assert response["status"]["messages"]["unknown"] == 1 and response["status"]["messages"]["malformed"] == 1
    assert (_count("unknown", "unknown"), _count("unknown", "malformed")) == (before[0] + 1, before[1] + 1)
    assert world.on_queue() == 0


def _fail_deletes(world: World, times: int) -> list:
    failed = []

    def refuse(**_):
        if len(failed) < times:
            failed.append(1)
            raise ClientError({"Error": {"Code": "InternalError", "Message": "injected"}}, "DeleteMessage")

    world.ctx.aws.client("sqs").meta.events.register("before-call.sqs.DeleteMessage", refuse)
    return failed


def test_a_redelivered_message_writes_nothing_twice(aws, make_ctx, monkeypatch):
    # Visible again at once, so the redelivery SQS makes after the timeout happens on the next call.
    monkeypatch.setattr(sqs_calls, "VISIBILITY_TIMEOUT", 0)
    world = World(aws, make_ctx)
    iid = _launch(world.ec2, uid="uid-m1")
    world.machine("web-m1", "uid-m1", iid)
    interruptions.put(world.events, ev.spot_warning(iid, "2026-11-23T12:00:00Z"))
    _fail_deletes(world, 1)

    first = world.sync()
    written = world.annotation("web-m1")
    assert written is not None and world.on_queue() == 1, "recorded, but the delete failed: the message stays"
    assert "InternalError" in first["status"]["lastError"]

    second = world.sync()

    assert len(world.machine_patches()) == 1, "the redelivered message found its signal there"
    assert world.annotation("web-m1") == written
    assert second["status"]["messages"]["duplicate"] == 1
    assert world.on_queue() == 0


class _RefusingMachinePatches(FakeKube):
    def __init__(self, refusals: int):
        super().__init__()
        self.refusals = refusals

    def json_patch(self, res, name, ops, namespace=None):
        if self.refusals and getattr(getattr(res, "_api_info", None), "resource", None) is not None \
                and res._api_info.resource.kind == names.MACHINE_KIND:
            self.refusals -= 1
            self.calls.append(("json_patch", names.MACHINE_KIND, name, list(ops)))
            raise api_error(500, "etcdserver: request timed out")
        return super().json_patch(res, name, ops, namespace)


def test_a_message_whose_recording_failed_stays_on_the_queue(aws, make_ctx, monkeypatch):
    monkeypatch.setattr(sqs_calls, "VISIBILITY_TIMEOUT", 0)
    world = World(aws, make_ctx, kube=_RefusingMachinePatches(1))
    iid = _launch(world.ec2, uid="uid-m1")
    world.machine("web-m1", "uid-m1", iid)
    calls = Calls().attach(world.ctx.aws, services=("sqs",))
    interruptions.put(world.events, ev.spot_warning(iid, "2026-11-23T12:00:00Z"))

    first = world.sync()

    assert world.annotation("web-m1") is None
    assert calls.by_operation["DeleteMessage"] == 0, "never deleted before what it caused is recorded"
    assert world.on_queue() == 1
    assert first["status"]["messages"]["recorded"] == 0 and "etcdserver" in first["status"]["lastError"]
    assert "InterruptionActionFailed" in events_of(world)

    world.sync()  # the message comes back; the write goes through this time

    assert world.annotation("web-m1").reason == signals.SPOT_INTERRUPTION
    assert world.on_queue() == 0


def test_a_body_alone_receives_nothing(aws, make_ctx):
    """A body naming a queue the API server does not have: no ReceiveMessage, no list, no write, no Event."""
    world = World(aws, make_ctx)
    iid = _launch(world.ec2, uid="uid-m1")
    world.machine("web-m1", "uid-m1", iid)
    interruptions.put(world.events, ev.spot_warning(iid, "2026-11-23T12:00:00Z"))
    calls = Calls().attach(world.ctx.aws, services=("sqs", "ec2"))
    forged = dict(world.parent, metadata={**world.parent["metadata"], "uid": "uid-forged"})

    response = world.sync(forged)

    assert "not verified" in response["status"]["lastError"]
    assert calls.total == 0, calls.by_operation
    assert [c for c in world.kube.calls if c[0] != "get"] == [], "only the read that verifies"
    assert world.on_queue() == 1 and world.annotation("web-m1") is None and events_of(world) == []


def test_an_idle_poll_lists_no_machines(aws, make_ctx):
    world = World(aws, make_ctx, statusChecks=False)
    response = world.sync()
    assert [c for c in world.kube.calls if c[0] == "list"] == []
    assert response["status"]["conditions"][0]["status"] == "True" and response["resyncAfterSeconds"] == 1.0


def test_impaired_status_checks_are_recorded_every_interval(aws, make_ctx):
    world = World(aws, make_ctx, statusCheckInterval="30s")
    sick = _launch(world.ec2, uid="uid-m1", spot=False)
    well = _launch(world.ec2, uid="uid-m2", spot=False)
    world.machine("web-m1", "uid-m1", sick)
    world.machine("web-m2", "uid-m2", well)

    def impair(parsed=None, **_):
        # moto reports every running instance's checks as ok: mark one impaired in its answer.
        for status in parsed.get("InstanceStatuses") or []:
            if status["InstanceId"] == sick:
                status["InstanceStatus"] = {"Status": "impaired", "Details": [{"Name": "reachability",
                                                                              "Status": "failed"}]}

    ec2 = world.ctx.aws.client("ec2")
    ec2.meta.events.register("after-call.ec2.DescribeInstanceStatus", impair)
    calls = Calls().attach(world.ctx.aws, services=("ec2",))
    t0 = dt.datetime(2026, 11, 23, 12, 0, 0, tzinfo=dt.timezone.utc)
    world.ctx.clock = lambda: t0

    first = world.sync()

    assert world.annotation("web-m1").reason == signals.STATUS_IMPAIRED
    assert world.annotation("web-m2") is None
    assert first["status"]["statusImpaired"] == 1 and first["status"]["lastStatusCheck"] == timefmt.fmt(t0)
    world.ctx.clock = lambda: t0 + dt.timedelta(seconds=10)
    world.sync()
    assert calls.by_operation["DescribeInstanceStatus"] == 1, "not again within statusCheckInterval"
    world.ctx.clock = lambda: t0 + dt.timedelta(seconds=31)
    world.sync()
    assert calls.by_operation["DescribeInstanceStatus"] == 2
    assert len(world.machine_patches()) == 1, "a Machine already impaired is not written again"
