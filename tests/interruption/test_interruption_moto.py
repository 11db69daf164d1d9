"""The interruption controller with moto as SQS, EventBridge and EC2, and worlds/fake_kube.py as the API server.

Events reach the queue the way they do in AWS: an EventBridge rule per kind
(the patterns of docs/interruptions.md) with the queue as its target, and
``put_events`` standing in for EC2 and AWS Health (AWS refuses ``aws.*``
sources from callers; moto accepts them and delivers the event to the queue
in EventBridge's envelope, with its own clock's ``time``). A message that no
rule would deliver (a replay, a redrive from a dead-letter queue, a time
EventBridge would never write) is sent to the queue straight, as anyone
allowed to send to it could. Where moto lacks an AWS behaviour the test says
so: it never makes an instance's status checks impaired, nor marks a spot
request for termination, so those tests mark them in moto's own answer with
a botocore event handler.
"""
from __future__ import annotations

import datetime as dt
import email.utils
import json

import pytest
from botocore.exceptions import ClientError

from devcluster import interruptions
from hooks import ec2_names, metrics, timefmt
from hooks.aws import sqs as sqs_calls
from hooks.dispatch import serve
from hooks.interruption import judge
from hooks.machines import names, signals
from worlds import ec2_events as ev
from worlds.cluster_gc import Calls
from worlds.envelope import hook_request
from worlds.fake_kube import FakeKube, api_error

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
        tags.append({"Key": ec2_names.cluster_tag(CLUSTER), "Value": ec2_names.OWNED})
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

    def send(self, event: dict) -> None:
        """Straight onto the queue, as a replay or a redrive would put it (EventBridge would stamp its time)."""
        self.sqs.send_message(QueueUrl=self.url, MessageBody=ev.body(event))

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
    start = _now() + dt.timedelta(days=8)
    interruptions.put(world.events, ev.scheduled_change([iid], "2026-11-23T12:00:00Z", _health_time(start)))

    world.sync()

    signal = world.annotation("web-m1")
    assert signal.reason == signals.SCHEDULED_CHANGE and signal.deadline == start
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


# -------------------------------------------------------------------------------- times, confirmation, waiting


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0)


def _health_time(moment: dt.datetime) -> str:
    """A time as AWS Health writes a scheduled change's startTime."""
    return email.utils.format_datetime(moment, usegmt=True)


def _spot_request(ec2, uid: str) -> str:
    """A spot instance behind a spot request, tagged as a Machine's (EC2 keeps a request for every spot instance)."""
    made = ec2.request_spot_instances(InstanceCount=1, LaunchSpecification={"ImageId": "ami-12c6146b",
                                                                          "InstanceType": "m5.large"})
    request_id = made["SpotInstanceRequests"][0]["SpotInstanceRequestId"]
    [request] = ec2.describe_spot_instance_requests(SpotInstanceRequestIds=[request_id])["SpotInstanceRequests"]
    ec2.create_tags(Resources=[request["InstanceId"]],
                    Tags=[{"Key": names.TAG_MACHINE_UID, "Value": uid},
                          {"Key": ec2_names.cluster_tag(CLUSTER), "Value": ec2_names.OWNED}])
    return request["InstanceId"]


def test_a_time_out_of_range_is_dropped_as_malformed_and_the_rest_of_its_batch_goes_on(aws, make_ctx):
    world = World(aws, make_ctx)
    spot = _launch(world.ec2, uid="uid-m1")
    other = _launch(world.ec2, uid="uid-m2", spot=False)
    world.machine("web-m1", "uid-m1", spot)
    world.machine("web-m2", "uid-m2", other)
    before = (_count(signals.SPOT_INTERRUPTION, "malformed"), _count(signals.SCHEDULED_CHANGE, "malformed"))
    world.send(ev.spot_warning(spot, "9999-12-31T23:59:59Z"))  # its deadline, two minutes on, is past year 9999
    world.send(ev.scheduled_change([other], timefmt.fmt(_now()), "Fri, 31 Dec 9999 23:59:59 -0100"))  # so in UTC
    interruptions.put(world.events, ev.spot_warning(spot, "2026-11-23T12:00:00Z"))  # a real one, in the same batch

    response = world.sync()

    assert world.annotation("web-m1").reason == signals.SPOT_INTERRUPTION
    assert world.annotation("web-m2") is None
    counts = response["status"]["messages"]
    assert (counts["malformed"], counts["recorded"]) == (2, 1)
    assert (_count(signals.SPOT_INTERRUPTION, "malformed"), _count(signals.SCHEDULED_CHANGE, "malformed")) == \
        (before[0] + 1, before[1] + 1)
    assert world.on_queue() == 0, "dropped and deleted, not received again"
    assert "lastError" not in response["status"]


def test_a_time_before_the_year_1000_is_dropped_and_hides_no_other_notice(aws, make_ctx):
    """A time nodewarden could not write back would never be written: the message would come back for ever,
    and a real notice for the same Machine in the batch be taken for its duplicate."""
    world = World(aws, make_ctx)
    iid = _launch(world.ec2, uid="uid-m1", spot=False)
    world.machine("web-m1", "uid-m1", iid)
    start = _now() + dt.timedelta(days=8)
    world.send(ev.scheduled_change([iid], "0999-01-01T00:00:00Z", _health_time(start)))
    world.send(ev.scheduled_change([iid], timefmt.fmt(_now()), "0999-01-01T00:00:00Z"))
    interruptions.put(world.events, ev.scheduled_change([iid], "2026-11-23T12:00:00Z", _health_time(start)))

    response = world.sync()

    signal = world.annotation("web-m1")
    assert signal is not None and signal.reason == signals.SCHEDULED_CHANGE and signal.deadline == start
    assert timefmt.parse(timefmt.fmt(signal.at)) == signal.at
    counts = response["status"]["messages"]
    assert (counts["malformed"], counts["recorded"], counts["duplicate"]) == (2, 1, 0)
    assert world.on_queue() == 0
    assert "lastError" not in response["status"] and "InterruptionActionFailed" not in events_of(world)


def test_a_spot_warning_past_its_deadline_is_recorded_only_when_ec2_says_the_instance_goes(aws, make_ctx):
    """A redrive or a replay an hour late: the instance still runs, so the warning is not an interruption,
    unless EC2 says now that it is reclaiming the instance (its spot request) or the instance has left running."""
    world = World(aws, make_ctx)
    running = _spot_request(world.ec2, "uid-m1")
    marked = _spot_request(world.ec2, "uid-m2")
    gone = _spot_request(world.ec2, "uid-m3")
    for n, iid in enumerate((running, marked, gone), 1):
        world.machine(f"web-m{n}", f"uid-m{n}", iid)
    world.ec2.terminate_instances(InstanceIds=[gone])

    def reclaim(parsed=None, **_):
        # moto never marks a spot request for termination; EC2 does from the warning until the reclaim.
        for request in parsed.get("SpotInstanceRequests") or []:
            if request.get("InstanceId") == marked:
                request["Status"]["Code"] = "marked-for-termination"

    world.ctx.aws.client("ec2").meta.events.register("after-call.ec2.DescribeSpotInstanceRequests", reclaim)
    an_hour_ago = timefmt.fmt(_now() - dt.timedelta(hours=1))
    for iid in (running, marked, gone):
        world.send(ev.spot_warning(iid, an_hour_ago))

    response = world.sync()

    assert world.annotation("web-m1") is None, "its deadline passed while EC2 says it runs"
    assert world.annotation("web-m2").reason == signals.SPOT_INTERRUPTION
    assert world.annotation("web-m3").reason == signals.SPOT_INTERRUPTION
    counts = response["status"]["messages"]
    assert (counts["unconfirmed"], counts["recorded"]) == (1, 2)
    assert world.on_queue() == 0


def test_a_notice_for_our_instance_waits_for_its_machine_to_record_it(aws, make_ctx, monkeypatch):
    """Right after RunInstances (or a crash before the status write) the instance carries the Machine's uid
    tag, and the Machine records no instance yet: the message stays on the queue until it does."""
    monkeypatch.setattr(sqs_calls, "VISIBILITY_TIMEOUT", 0)
    world = World(aws, make_ctx)
    iid = _launch(world.ec2, uid="uid-m1")
    world.machine("web-m1", "uid-m1", "")
    before = _count(signals.SPOT_INTERRUPTION, "waiting")
    interruptions.put(world.events, ev.spot_warning(iid, "2026-11-23T12:00:00Z"))

    first = world.sync()

    assert world.on_queue() == 1, "not deleted"
    assert world.machine_patches() == [] and world.annotation("web-m1") is None
    assert (first["status"]["messages"]["waiting"], first["status"]["messages"]["foreign"]) == (1, 0)
    assert _count(signals.SPOT_INTERRUPTION, "waiting") == before + 1
    assert "lastError" not in first["status"]
    world.kube.objects[(names.MACHINE_KIND, "", "web-m1")]["status"]["instanceID"] = iid  # the Machine records it

    second = world.sync()

    assert world.annotation("web-m1").reason == signals.SPOT_INTERRUPTION
    assert second["status"]["messages"]["recorded"] == 1 and world.on_queue() == 0


def test_a_notice_waits_for_its_machine_only_so_long(aws, make_ctx):
    world = World(aws, make_ctx)
    iid = _launch(world.ec2, uid="uid-m1", spot=False)
    world.machine("web-m1", "uid-m1", "")
    late = _now() - dt.timedelta(seconds=judge.RECORD_WAIT_SECONDS + 60)
    world.send(ev.scheduled_change([iid], timefmt.fmt(late), _health_time(_now() + dt.timedelta(days=8))))

    response = world.sync()

    assert response["status"]["messages"]["foreign"] == 1 and response["status"]["messages"]["waiting"] == 0
    assert world.on_queue() == 0 and world.annotation("web-m1") is None


def test_a_stop_ec2_no_longer_agrees_with_gives_way_to_a_later_notice(aws, make_ctx):
    world = World(aws, make_ctx)
    iid = _launch(world.ec2, uid="uid-m1", spot=False)
    world.ec2.stop_instances(InstanceIds=[iid])
    world.ec2.start_instances(InstanceIds=[iid])  # fencing's Reboot, or an operator
    stop = signals.Signal(signals.INSTANCE_STOPPING, _now() - dt.timedelta(minutes=5), None, "the-stop").encode()
    world.machine("web-m1", "uid-m1", iid, {signals.INTERRUPTION_ANNOTATION: stop})
    start = _now() + dt.timedelta(days=8)
    interruptions.put(world.events, ev.scheduled_change([iid], "2026-11-23T12:00:00Z", _health_time(start)))

    response = world.sync()

    signal = world.annotation("web-m1")
    assert signal.reason == signals.SCHEDULED_CHANGE and signal.deadline == start
    assert response["status"]["messages"]["recorded"] == 1 and world.on_queue() == 0


def test_our_own_termination_is_not_an_ec2_disruption(aws, make_ctx):
    """A Machine being deleted (a scale-down, a delete, a registration timeout) terminates its instance
    itself: EC2's state changes for it record nothing, and its pool counts no disruption."""
    from worlds.machines import MachineWorld

    machines = MachineWorld(make_ctx, aws)
    world = World(aws, make_ctx, kube=machines.kube)
    machines.until(lambda: machines.condition(names.LAUNCHED) == "True")
    iid = machines.status["instanceID"]
    machines.delete()  # what Metacontroller does with a Machine its pool left out
    machines.until(lambda: _state(world.ec2, iid) == "terminated")
    assert not machines.gone
    for state in ("shutting-down", "terminated"):
        interruptions.put(world.events, ev.state_change(iid, state, "2026-11-23T12:00:00Z"))

    response = world.sync()

    assert world.annotation(machines.name) is None and world.machine_patches() == []
    assert response["status"]["messages"]["ignored"] == 2 and world.on_queue() == 0
    pool = {"apiVersion": names.API_VERSION, "kind": names.NODEPOOL_KIND,
            "metadata": {"name": "web", "uid": "uid-pool", "generation": 1, "creationTimestamp": "2026-11-23T10:00:00Z"},
            "spec": {"replicas": 1, "template": {"spec": {"instanceTypes": ["m5.large"], "subnets": ["subnet-1"],
                                                          "imageId": "ami-1"}}}}
    machines.machine["metadata"]["ownerReferences"] = [{"apiVersion": names.API_VERSION, "kind": names.NODEPOOL_KIND,
                                                         "name": "web", "uid": "uid-pool", "controller": True}]
    machines.kube.add_object(pool)
    counted = metrics.MACHINES_DISRUPTED.labels("web", signals.INSTANCE_STOPPING)._value.get()

    answer = serve("nodepool", "sync", hook_request("nodepool", pool, children=[machines.machine]), machines.ctx)

    assert answer["status"]["disruptions"] == []
    assert "DisruptionStarted" not in machines.kube.reasons()
    assert metrics.MACHINES_DISRUPTED.labels("web", signals.INSTANCE_STOPPING)._value.get() == counted


def _state(ec2, instance_id: str) -> str:
    return ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]["State"]["Name"]
