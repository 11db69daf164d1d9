"""machine and nodepool against moto in server mode: real RunInstances, tags,
DescribeInstances and TerminateInstances.

The Kubernetes side is worlds/fake_kube.FakeKube and the kubelet is
``worlds.machines.boot`` (no kubelet here; tests/e2e/test_machines.py runs the
same lifecycle on the real control plane). moto never runs out of capacity:
InsufficientInstanceCapacity is injected through botocore's before-call event
(worlds/cluster_gc.Faults), and a crash through its after-call event.
"""
from __future__ import annotations

import copy
import datetime as dt

import pytest
from botocore.awsrequest import AWSResponse

from hooks import machine_names
from hooks.dispatch import serve
from hooks.machines import signals
from worlds.cluster_gc import Calls, Faults
from worlds.envelope import hook_request
from worlds.machines import (T0, Crash, CrashAfter, MachineWorld, NoCapacityFor, NotShownYet, boot, default_subnet,
                           fmt, machine_instances, machine_object, machine_spec)

pytestmark = pytest.mark.moto


def _launched(world: MachineWorld) -> str:
    world.until(lambda: world.condition(machine_names.LAUNCHED) == "True")
    return world.status["instanceID"]


def test_launch_register_initialize(aws, make_ctx):
    world = MachineWorld(make_ctx, aws)
    first = world.call()
    assert "launchRequestedAt" in first["status"] and not machine_instances(world.ec2, world.uid)
    instance_id = _launched(world)
    (instance,) = machine_instances(world.ec2, world.uid)
    tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
    assert tags == {"kubernetes.io/cluster/test-cluster": "owned", machine_names.TAG_POOL: "web",
                    machine_names.TAG_MACHINE: world.name, machine_names.TAG_MACHINE_UID: world.uid, "Name": world.name}
    volumes = world.ec2.describe_volumes(Filters=[{"Name": f"tag:{machine_names.TAG_MACHINE_UID}", "Values": [world.uid]}])
    assert volumes["Volumes"], "volumes are tagged at creation too"
    world.call()
    status = world.status
    assert status["instanceType"] == "m5.large" and status["providerID"].endswith(instance_id)
    # In-flight capacity, before any Node exists.
    assert status["capacity"]["cpu"] == "2" and status["allocatable"]["pods"] == "29"
    assert world.condition(machine_names.REGISTERED) == "False"

    node = boot(world.ec2, instance_id, world.kube)
    assert {"key": machine_names.UNREGISTERED_TAINT, "value": "true", "effect": "NoExecute"} in node["spec"]["taints"]
    world.until(lambda: world.condition(machine_names.REGISTERED) == "True", calls=5)
    node = world.kube.nodes[node["metadata"]["name"]]
    assert node["metadata"]["labels"]["team"] == "web" and node["metadata"]["labels"][machine_names.POOL_LABEL] == "web"
    assert node["metadata"]["annotations"]["example.com/owner"] == "web"
    keys = {t["key"] for t in node["spec"]["taints"]}
    assert machine_names.UNREGISTERED_TAINT not in keys and {"dedicated", "example.com/agent-not-ready"} <= keys
    assert world.status["nodeName"] == node["metadata"]["name"]
    world.call()
    assert world.condition(machine_names.INITIALIZED) == "False", "the startup taint is still there"

    # Whoever owns the startup taint removes it; the node lifecycle controller has not yet taken off the
    # not-ready taint it put on the starting Node (Ready already): no pod can land yet.
    node["spec"]["taints"] = [t for t in node["spec"]["taints"] if t["key"] != "example.com/agent-not-ready"]
    node["spec"]["taints"].append({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"})
    world.call()
    assert world.condition(machine_names.INITIALIZED) == "False", "the not-ready taint is still there"
    # Only once both are gone is the Machine initialized.
    node["spec"]["taints"] = [t for t in node["spec"]["taints"] if t["key"] != "node.kubernetes.io/not-ready"]
    world.call()
    assert world.condition(machine_names.INITIALIZED) == "True"


def test_mirroring_happens_once(aws, make_ctx):
    world = MachineWorld(make_ctx, aws)
    node = boot(world.ec2, _launched(world), world.kube)
    world.until(lambda: world.condition(machine_names.REGISTERED) == "True", calls=5)
    node = world.kube.nodes[node["metadata"]["name"]]
    del node["metadata"]["labels"]["team"]  # a user removes a mirrored label
    for _ in range(3):
        world.call(after=5)
    assert "team" not in world.kube.nodes[node["metadata"]["name"]]["metadata"]["labels"]


def _launch_to_capacity(world: MachineWorld) -> None:
    world.until(lambda: world.condition(machine_names.LAUNCHED) == "True" and "capacity" in world.status, calls=20)


def _crash_after_every_call(make_ctx, aws, uid_prefix: str, prepare=lambda world: None) -> tuple[list, list]:
    """A launch with its AWS calls counted, then one launch per call that crashes right after it: each ends
    with exactly one instance. (the calls counted, the worlds of the crashed launches)."""
    from hooks.aws import instances

    instances.TYPES.clear()
    clean = MachineWorld(make_ctx, aws, name="web-clean", uid=f"{uid_prefix}-clean")
    prepare(clean)
    counting = CrashAfter(0).attach(clean.ctx.aws)
    _launch_to_capacity(clean)
    counting.detach(clean.ctx.aws)
    crashed = []
    for n, operation in enumerate(counting.operations, start=1):
        instances.TYPES.clear()
        world = MachineWorld(make_ctx, aws, name=f"web-{n}", uid=f"{uid_prefix}-{n}", kube=clean.kube)
        prepare(world)
        crash = CrashAfter(n).attach(world.ctx.aws)
        try:
            _launch_to_capacity(world)
        finally:
            crash.detach(world.ctx.aws)
        assert crash.seen >= n
        assert len(machine_instances(world.ec2, world.uid)) == 1, f"crash after call {n} ({operation})"
        crashed.append(world)
    return counting.operations, crashed


def test_a_crash_after_any_aws_call_leaves_exactly_one_instance(aws, make_ctx):
    """Every AWS call of a launch, in turn, is the last thing the hook does before dying."""
    operations, _ = _crash_after_every_call(make_ctx, aws, "uid-crash")
    assert {"DescribeInstances", "DescribeSubnets", "RunInstances", "DescribeInstanceTypes"} <= set(operations)


def test_a_crash_right_after_run_instances_is_found_by_tag(aws, make_ctx):
    world = MachineWorld(make_ctx, aws)
    world.call()  # records the launch request
    calls = Calls().attach(world.ctx.aws, services=("ec2",))
    crash = CrashAfter(1 + calls.by_operation["x"]).attach(world.ctx.aws)
    # The launch call: DescribeInstances (by tag), DescribeSubnets, then RunInstances: crash after it.
    crash.n = 3
    assert world.call(after=1) is None and crash.operations[-1] == "RunInstances"
    crash.detach(world.ctx.aws)
    assert "instanceID" not in world.status, "the crash lost the record"
    world.call(after=1)
    assert len(machine_instances(world.ec2, world.uid)) == 1
    assert world.condition(machine_names.LAUNCHED) == "True"
    assert calls.by_operation["RunInstances"] == 1


def test_subnets_and_a_subnet_selector_are_joined(aws):
    """As the CRD says (and as Karpenter's subnet selector terms add up): the named subnets first, then
    every subnet the selector finds."""
    from hooks.aws import instances

    ec2 = aws("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    named = ec2.create_subnet(VpcId=vpc, CidrBlock="10.9.1.0/24")["Subnet"]["SubnetId"]
    selected = ec2.create_subnet(VpcId=vpc, CidrBlock="10.9.2.0/24", TagSpecifications=[
        {"ResourceType": "subnet", "Tags": [{"Key": "example.com/nodes", "Value": "yes"}]}])["Subnet"]["SubnetId"]
    found = instances.subnets(ec2, [named], {"example.com/nodes": "*"})
    assert [s["id"] for s in found] == [named, selected]
    assert [s["id"] for s in instances.subnets(ec2, [selected], {"example.com/nodes": "yes"})] == [selected]


def test_instance_types_are_tried_in_order_on_insufficient_capacity(aws, make_ctx):
    world = MachineWorld(make_ctx, aws)
    Faults().add("RunInstances", "InsufficientInstanceCapacity", times=1).attach(world.ctx.aws, services=("ec2",))
    _launched(world)
    world.call()
    assert world.status["instanceType"] == "c5.large"


def test_no_capacity_anywhere_is_an_error_and_no_instance(aws, make_ctx):
    world = MachineWorld(make_ctx, aws)
    Faults().add("RunInstances", "InsufficientInstanceCapacity", times=10).attach(world.ctx.aws, services=("ec2",))
    world.call()
    world.call(after=1)
    assert "no capacity" in world.status["lastError"] and not machine_instances(world.ec2, world.uid)


# Twenty instance types of moto's, most preferred first: EC2 has capacity only for the last two.
TWENTY_TYPES = ["m5.large", "m5.xlarge", "m5.2xlarge", "m5.4xlarge", "c5.large", "c5.xlarge", "c5.2xlarge",
                "c5.4xlarge", "r5.large", "r5.xlarge", "r5.2xlarge", "r5.4xlarge", "m6i.large", "m6i.xlarge",
                "c6i.large", "c6i.xlarge", "r6i.large", "r6i.xlarge", "t3.large", "t3.xlarge"]


def _two_subnets(ec2) -> list[str]:
    by_zone = {s["AvailabilityZone"]: s["SubnetId"] for s in ec2.describe_subnets()["Subnets"]}
    return [by_zone[z] for z in sorted(by_zone)[:2]]


@pytest.fixture
def calls_never_run_out(monkeypatch):
    """The launch's time allowance on a stopped clock: only the candidates a call plans bound it (the allowance
    itself is covered by a budget of 0 below, and by tests/machines/test_launch_gate.py)."""
    from hooks.machines import launch

    gate = launch.Candidates
    monkeypatch.setattr(launch, "Candidates", lambda seconds: gate(seconds, clock=lambda: 0.0))


def _tokens(world: MachineWorld) -> dict[str, set]:
    """ClientToken -> the (launch request, instance type, subnet) it was sent for."""
    sent: dict[str, set] = {}

    def record(params=None, **_):
        launch = (world.status.get("launchRequestedAt"), params["InstanceType"], params.get("SubnetId"))
        sent.setdefault(params["ClientToken"], set()).add(launch)
    world.ctx.aws.client("ec2", "us-east-1").meta.events.register("before-parameter-build.ec2.RunInstances", record)
    return sent


def test_every_type_in_every_subnet_is_tried_until_one_launches(aws, make_ctx, calls_never_run_out):
    """20 types in 2 subnets, capacity only for the last two types (InsufficientInstanceCapacity injected
    through botocore's before-call event: moto never runs out). Each call asks for at most 8 candidates and
    records those refused; the next goes on with the rest, so the 37th candidate launches on the 6th call."""
    subnets = _two_subnets(aws("ec2"))
    world = MachineWorld(make_ctx, aws, spec=machine_spec(subnets[0], instanceTypes=TWENTY_TYPES, subnets=subnets))
    refusing = NoCapacityFor(*TWENTY_TYPES[:-2]).attach(world.ctx.aws)
    sent = _tokens(world)
    world.until(lambda: "instanceID" in world.status, calls=6)
    assert world.status["instanceType"] == "t3.large"
    (instance,) = machine_instances(world.ec2, world.uid)
    assert instance["SubnetId"] == subnets[0]
    # Every refused candidate was asked once, in order, and is on the record with its zone.
    assert sorted(refusing.refused) == sorted((t, s) for t in TWENTY_TYPES[:-2] for s in subnets)
    assert set(refusing.refused.values()) == {1}
    refusals = world.status["launchRefusals"]
    assert {(r["instanceType"], r["subnetID"]) for r in refusals} == set(refusing.refused)
    zones = {s["SubnetId"]: s["AvailabilityZone"] for s in world.ec2.describe_subnets(SubnetIds=subnets)["Subnets"]}
    assert all(r["zone"] == zones[r["subnetID"]] and r["capacityType"] == "on-demand"
               and r["code"] == "InsufficientInstanceCapacity" for r in refusals)
    assert len(sent) == 37 and all(len(launches) == 1 for launches in sent.values())


def test_a_call_past_its_time_leaves_the_rest_to_the_next_and_a_throttle_is_no_refusal(aws, make_ctx):
    """With no time to spare (NODEWARDEN_MACHINE_LAUNCH_BUDGET_SECONDS=0) each call makes one RunInstances.
    m5.large has no capacity anywhere; c5.large's first ask is throttled (RequestLimitExceeded, injected):
    not a refusal, so it is not recorded and the next call asks for it again, with the same token."""
    subnets = _two_subnets(aws("ec2"))
    world = MachineWorld(make_ctx, aws, spec=machine_spec(subnets[0], subnets=subnets),
                         env={"NODEWARDEN_MACHINE_LAUNCH_BUDGET_SECONDS": "0"})
    NoCapacityFor("m5.large").attach(world.ctx.aws)
    Faults().add("RunInstances", "RequestLimitExceeded", times=1).attach(world.ctx.aws, services=("ec2",))
    sent = _tokens(world)
    world.call()  # the launch request
    asked = []
    for _ in range(3):
        before = sum(len(v) for v in sent.values())
        world.call(after=1)
        asked.append(sum(len(v) for v in sent.values()) - before)
        assert world.condition(machine_names.LAUNCHED) != "True"
    assert asked == [1, 1, 1], "one RunInstances a call"
    refused = [(r["instanceType"], r["subnetID"]) for r in world.status["launchRefusals"]]
    assert refused == [("m5.large", subnets[0]), ("m5.large", subnets[1])], "the throttled ask is no refusal"
    assert "RequestLimitExceeded" in world.status["lastError"]
    world.call(after=1)
    assert world.status["instanceType"] == "c5.large" and len(machine_instances(world.ec2, world.uid)) == 1
    throttled_and_retried = [t for t, launches in sent.items() if ("c5.large", subnets[0]) in
                             {(i, s) for _, i, s in launches}]
    assert len(throttled_and_retried) == 1 and len(sent) == 3, "the same candidate, the same request: the same token"


def test_a_crash_after_any_aws_call_of_a_launch_that_falls_back_leaves_exactly_one_instance(aws, make_ctx):
    """m5.large refused (injected), c5.large launches: every AWS call of that launch in turn is the last thing
    the hook does before dying, a refusal included (it is then not recorded, and asked again)."""
    operations, crashed = _crash_after_every_call(make_ctx, aws, "uid-fallback-crash",
                                                  lambda world: NoCapacityFor("m5.large").attach(world.ctx.aws))
    assert operations.count("RunInstances") == 2
    assert all(world.status["instanceType"] == "c5.large" for world in crashed)


def test_refused_everywhere_is_no_capacity_asks_nothing_more_and_is_deleted_once_forgotten(aws, make_ctx):
    world = MachineWorld(make_ctx, aws)
    NoCapacityFor("m5.large", "c5.large").attach(world.ctx.aws)
    sent = _tokens(world)
    world.call()
    world.call(after=1)  # both refused
    assert len(world.status["launchRefusals"]) == 2 and world.responses[-1]["resyncAfterSeconds"] <= 0.2
    world.call(after=0.2)
    launched = next(c for c in world.status["conditions"] if c["type"] == machine_names.LAUNCHED)
    assert (launched["status"], launched["reason"]) == ("False", "InsufficientCapacity")
    assert "InsufficientCapacity" in world.kube.reasons() and "no capacity" in world.status["lastError"]
    world.call(after=60)
    world.call(after=90)
    assert len(sent) == 2 and not world.gone, "nothing is asked for again"
    world.call(after=31)  # the last refusal is three minutes old
    assert world.gone, "deleted: its pool replaces it"
    assert not machine_instances(world.ec2, world.uid)


def test_a_refusal_answers_at_once_without_botocore_retries(aws, make_ctx):
    """EC2 answers a capacity error with HTTP 500, which botocore's standard mode retries with a backoff sleep;
    a launch's RunInstances is answered at once instead (the answer is injected at before-send, so it goes
    through botocore's retry handling)."""
    world = MachineWorld(make_ctx, aws)
    sends: list[str] = []

    def no_capacity(request=None, **_):
        sends.append(request.url)
        body = (b'<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error>'
                b"<Code>InsufficientInstanceCapacity</Code><Message>We currently do not have sufficient capacity"
                b"</Message></Error></Errors><RequestID>injected</RequestID></Response>")
        return AWSResponse(request.url, 500, {}, _Raw(body))
    world.ctx.aws.client("ec2", "us-east-1").meta.events.register("before-send.ec2.RunInstances", no_capacity)
    world.call()
    world.call(after=1)
    assert len(sends) == 2, "one send per candidate"
    assert [r["instanceType"] for r in world.status["launchRefusals"]] == ["m5.large", "c5.large"]


class _Raw:
    def __init__(self, body: bytes):
        self.body = body

    def stream(self, **_):
        yield self.body


def test_user_data_that_would_not_register_is_refused_before_launch(aws, make_ctx):
    spec = machine_spec("subnet-x", userData="#!/bin/bash\necho hello\n")
    world = MachineWorld(make_ctx, aws, spec=spec)
    world.call()
    world.call(after=1)
    assert "userData" in world.status["lastError"] and not machine_instances(world.ec2, world.uid)


def test_a_node_with_our_label_but_another_instance_is_never_joined(aws, make_ctx):
    world = MachineWorld(make_ctx, aws)
    _launched(world)
    other = world.ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    world.kube.add_node({"apiVersion": "v1", "kind": "Node",
                         "metadata": {"name": "impostor", "uid": "uid-impostor",
                                      "labels": {machine_names.MACHINE_LABEL: world.name}},
                         "spec": {"providerID": f"aws:///us-east-1a/{other}"}})
    world.call()
    assert world.condition(machine_names.REGISTERED) == "False"
    assert "impostor" in world.status["lastError"]
    assert machine_names.MANAGED_KEYS not in (world.kube.nodes["impostor"]["metadata"].get("annotations") or {})
    assert "NodeProviderIDMismatch" in world.kube.reasons()


def test_not_registered_within_the_ttl_deletes_the_machine(aws, make_ctx):
    world = MachineWorld(make_ctx, aws, spec=machine_spec(default_subnet(aws("ec2")), registrationTTL="2m"))
    _launched(world)
    world.call(after=60)
    assert not world.gone
    world.call(after=61)
    assert world.gone, "deleted (its finalizer then terminates the instance)"
    assert "RegistrationTimedOut" in world.kube.reasons()


def test_a_stop_notice_outlived_by_a_start_is_retired(aws, make_ctx):
    """After a stop and start (fencing's Reboot, an operator) the instance runs: the stop notice is taken off
    the Machine, and with it the Disrupted condition; the Machine is never deleted for it."""
    world = MachineWorld(make_ctx, aws)
    instance_id = _launched(world)
    world.ec2.stop_instances(InstanceIds=[instance_id])
    world.ec2.start_instances(InstanceIds=[instance_id])
    stop = signals.Signal(signals.INSTANCE_STOPPING, world.now, None, "the-stop").encode()
    world.machine["metadata"]["annotations"][signals.INTERRUPTION_ANNOTATION] = stop
    world.call(after=1)
    assert world.condition(machine_names.DISRUPTED) == "True", "shown while EC2's answer may predate the stop"
    assert world.machine["metadata"]["annotations"][signals.INTERRUPTION_ANNOTATION] == stop

    world.call(after=120)  # well past signals.STOP_SETTLE_SECONDS: a read that cannot predate the stop

    assert not world.gone
    assert signals.INTERRUPTION_ANNOTATION not in world.machine["metadata"]["annotations"]
    assert world.machine["metadata"]["annotations"][machine_names.TEMPLATE_HASH] == "h0", "only the notice is removed"
    assert "InterruptionRetired" in world.kube.reasons()
    assert world.condition(machine_names.DISRUPTED) is None


def test_termination_cordons_drains_terminates_and_deletes_the_node(aws, make_ctx):
    world = MachineWorld(make_ctx, aws)
    instance_id = _launched(world)
    node = boot(world.ec2, instance_id, world.kube)
    node_name = node["metadata"]["name"]
    world.until(lambda: world.condition(machine_names.REGISTERED) == "True", calls=5)
    world.kube.add_pod({"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": "web-1", "namespace": "default", "uid": "uid-web-1"},
                        "spec": {"nodeName": node_name}, "status": {"phase": "Running"}})
    world.kube.volume_attachments["va-1"] = {"metadata": {"name": "va-1"}, "spec": {"nodeName": node_name},
                                             "status": {"attached": True}}
    world.delete()
    world.call()
    node = world.kube.nodes[node_name]
    assert node["spec"]["unschedulable"] is True
    assert {"key": machine_names.DISRUPTED_TAINT, "effect": "NoSchedule"} in node["spec"]["taints"]
    world.call(after=1)
    evictions = [c for c in world.kube.calls if c[0] == "create" and c[1] == "Eviction"]
    assert evictions, "the pod is evicted through the Eviction API"
    assert world.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]["State"][
        "Name"] == "running", "nothing is terminated while pods remain"
    del world.kube.pods["default/web-1"]  # the eviction went through
    world.call(after=1)
    world.call(after=1)
    assert machine_instances(world.ec2, world.uid), "VolumeAttachments still block"
    del world.kube.volume_attachments["va-1"]
    world.until(lambda: node_name not in world.kube.nodes, calls=10)
    world.until(lambda: world.gone, calls=10, step=15)  # past the window in which another launch could show
    assert not machine_instances(world.ec2, world.uid)
    assert node_name not in world.kube.nodes
    record = world.responses[-1]["status"]["termination"]
    assert {"startedAt", "cordonedAt", "drainedAt", "volumesDetachedAt", "terminateRequestedAt",
            "instanceTerminatedAt", "nodeDeletedAt", "evictions"} <= set(record)


def test_termination_of_an_already_terminated_instance_succeeds(aws, make_ctx):
    world = MachineWorld(make_ctx, aws)
    instance_id = _launched(world)
    world.call()
    world.ec2.terminate_instances(InstanceIds=[instance_id])
    world.delete()
    calls = Calls().attach(world.ctx.aws, services=("ec2",))
    world.until(lambda: world.gone, calls=10, step=15)
    assert calls.by_operation["TerminateInstances"] == 0


def test_a_machine_that_never_launched_waits_out_the_visibility_window(aws, make_ctx):
    world = MachineWorld(make_ctx, aws)
    world.call()  # launch requested, not yet made
    world.delete()
    world.call(after=1)
    assert not world.gone, "a launch may still appear"
    world.until(lambda: world.gone, calls=5, step=60)
    assert not machine_instances(world.ec2, world.uid)


def test_a_forged_machine_body_launches_nothing(aws, make_ctx):
    world = MachineWorld(make_ctx, aws)
    forged = machine_object("forged", "uid-forged", machine_spec(default_subnet(world.ec2)))
    forged["status"] = {"launchRequestedAt": fmt(T0)}
    world.ctx.clock = lambda: T0 + dt.timedelta(seconds=1)
    response = serve("machine", "sync", hook_request("machine", forged), world.ctx)
    assert "not verified" in response["status"]["lastError"]
    assert not machine_instances(world.ec2, "uid-forged")


def _state(ec2, instance_id: str) -> str:
    return ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]["State"]["Name"]


def test_a_machine_deleted_right_after_its_launch_still_terminates_its_instance(aws, make_ctx):
    """EC2 may not show an instance for a while after RunInstances (moto always does: injected here).
    Within the launch-visibility window, not shown is not gone."""
    world = MachineWorld(make_ctx, aws)
    instance_id = _launched(world)
    hidden = NotShownYet(world.ec2, instance_id).attach(world.ctx.aws)
    world.delete()
    for _ in range(5):
        world.call(after=1)
        assert not world.gone, "finalized while its instance runs"
    assert hidden.answered, "EC2 was asked and did not show the instance"
    assert "instanceTerminatedAt" not in world.status["termination"]
    hidden.shown()
    world.until(lambda: world.gone, calls=20, step=10)
    assert _state(world.ec2, instance_id) in ("shutting-down", "terminated")


def test_a_launch_lost_in_a_crash_and_shown_late_is_terminated(aws, make_ctx):
    """Attempt 0 finds no capacity, attempt 1 launches A and the hook dies; EC2 does not show A yet, so the
    next call launches B. B is recorded; A, once EC2 shows it, is a second instance of the Machine."""
    world = MachineWorld(make_ctx, aws)
    world.call()  # the launch request
    faults = Faults().add("RunInstances", "InsufficientInstanceCapacity", times=1).attach(world.ctx.aws,
                                                                                       services=("ec2",))
    events = world.ctx.aws.client("ec2", "us-east-1").meta.events

    def crash_after_a_launch(model=None, parsed=None, **_):
        if model.name == "RunInstances" and (parsed or {}).get("Instances"):
            raise Crash("died right after RunInstances launched an instance")
    events.register("after-call", crash_after_a_launch)
    assert world.call(after=1) is None
    events.unregister("after-call", crash_after_a_launch)
    assert faults.injected[("RunInstances", "InsufficientInstanceCapacity")] == 1
    [first] = [i["InstanceId"] for i in machine_instances(world.ec2, world.uid)]
    hidden = NotShownYet(world.ec2, first).attach(world.ctx.aws)
    world.call(after=1)
    second = world.status["instanceID"]
    assert second != first and len(machine_instances(world.ec2, world.uid)) == 2
    hidden.shown()
    world.call(after=5)
    assert _state(world.ec2, first) in ("shutting-down", "terminated"), "the second instance survives"
    assert _state(world.ec2, second) == "running" and world.status["instanceID"] == second
    assert "DuplicateInstanceTerminated" in world.kube.reasons()


def test_a_client_token_is_never_sent_for_another_launch(aws, make_ctx):
    """Each (launch request, instance type, subnet) has its own token: a launch after a stale request
    never repeats the token of an earlier, different launch."""
    world = MachineWorld(make_ctx, aws)
    sent: dict[str, set] = {}

    def record(params=None, **_):
        launch = (world.status.get("launchRequestedAt"), params["InstanceType"], params.get("SubnetId"))
        sent.setdefault(params["ClientToken"], set()).add(launch)
    world.ctx.aws.client("ec2", "us-east-1").meta.events.register("before-parameter-build.ec2.RunInstances", record)
    Faults().add("RunInstances", "InsufficientInstanceCapacity", times=1).add(
        "RunInstances", "RequestLimitExceeded", times=1).attach(world.ctx.aws, services=("ec2",))
    world.call()
    world.call(after=1)  # no capacity for m5.large; c5.large throttled, so it is asked again later
    assert "no capacity" in world.status["lastError"]
    world.call(after=31)  # the request is stale: stamped again
    world.call(after=1)
    assert world.condition(machine_names.LAUNCHED) == "True" or world.call(after=1)
    assert len(sent) == 3 and all(len(launches) == 1 for launches in sent.values()), sent
    assert all(len(token) <= 64 for token in sent)


def test_an_instance_whose_uid_tag_was_removed_is_still_terminated_with_its_machine(aws, make_ctx):
    world = MachineWorld(make_ctx, aws)
    instance_id = _launched(world)
    world.ec2.delete_tags(Resources=[instance_id], Tags=[{"Key": machine_names.TAG_MACHINE_UID}])
    world.delete()
    world.until(lambda: world.gone, calls=12, step=10)
    assert _state(world.ec2, instance_id) in ("shutting-down", "terminated")


def test_an_instance_with_no_tag_of_ours_holds_a_deletion_only_so_long(aws, make_ctx):
    """Neither the Machine's UID tag nor the cluster's: not proven the Machine's, so not terminated; the
    deletion waits the leak grace for the tags to come back, then lets the Machine go with a Warning."""
    world = MachineWorld(make_ctx, aws, env={"NODEWARDEN_LEAKED_INSTANCE_GRACE_SECONDS": "120"})
    instance_id = _launched(world)
    world.ec2.delete_tags(Resources=[instance_id], Tags=[{"Key": machine_names.TAG_MACHINE_UID},
                                                         {"Key": "kubernetes.io/cluster/test-cluster"}])
    world.delete()
    world.call(after=60)
    assert not world.gone and "carries neither" in world.status["lastError"]
    world.until(lambda: world.gone, calls=5, step=60)
    assert _state(world.ec2, instance_id) == "running"
    assert "InstanceNotOwned" in world.kube.reasons()


def test_two_nodes_naming_one_instance_are_neither_joined(aws, make_ctx):
    """Any kubelet credential can register a Node with the Machine's label and its providerID."""
    world = MachineWorld(make_ctx, aws)
    instance_id = _launched(world)
    real = boot(world.ec2, instance_id, world.kube, node_name="a-real")
    twin = copy.deepcopy(real)
    twin["metadata"].update(name="b-twin", uid="uid-twin")
    world.kube.add_node(twin)
    for _ in range(3):
        world.call(after=1)
    assert world.condition(machine_names.REGISTERED) == "False"
    for node in world.kube.nodes.values():
        assert machine_names.MANAGED_KEYS not in (node["metadata"].get("annotations") or {}), node["metadata"]["name"]
    assert "nodeName" not in world.status
    assert "NodeProviderIDConflict" in world.kube.reasons()
    assert [c for c in world.status["conditions"] if c["type"] == machine_names.REGISTERED][0]["reason"] == \
        "NodeProviderIDConflict"


def test_a_node_that_lost_its_machine_label_stays_the_machines_node(aws, make_ctx):
    """The label is the kubelet's and users' to change: a registered Machine knows its Node by name and uid."""
    world = MachineWorld(make_ctx, aws, spec=machine_spec(default_subnet(aws("ec2")), registrationTTL="1m"))
    instance_id = _launched(world)
    node = boot(world.ec2, instance_id, world.kube)
    world.until(lambda: world.condition(machine_names.REGISTERED) == "True", calls=5)
    del world.kube.nodes[node["metadata"]["name"]]["metadata"]["labels"][machine_names.MACHINE_LABEL]
    for _ in range(4):
        world.call(after=60)
        assert not world.gone, "deleted: its Node was taken for gone"
    assert world.condition(machine_names.REGISTERED) == "True"
    assert _state(world.ec2, instance_id) == "running"
    # Deleting it now drains that Node, found by its name.
    world.delete()
    world.call(after=1)
    assert world.kube.nodes[node["metadata"]["name"]]["spec"]["unschedulable"] is True


def test_forged_bodies_write_no_events_look_nothing_up_and_change_no_children(aws, make_ctx):
    """Bodies naming a Machine and a NodePool the API server does not have: no Event, no AWS call, no list."""
    from worlds.fake_kube import FakeKube

    kube = FakeKube()
    ctx = make_ctx({}, kube=kube)
    calls = Calls().attach(ctx.aws, services=("ec2",))
    machine = machine_object("forged", "uid-forged", machine_spec("subnet-1"))  # would stamp LaunchRequested
    launching = dict(machine_object("forged-2", "uid-forged-2", machine_spec("subnet-1")),
                     status={"launchRequestedAt": fmt(dt.datetime.now(dt.timezone.utc))})
    pool = _pool(replicas=0)
    children = [machine_object(f"web-{n}", f"uid-web-{n}", machine_spec("subnet-1")) for n in range(2)]
    answers = [serve("machine", "sync", hook_request("machine", machine), ctx),
               serve("machine", "sync", hook_request("machine", launching), ctx),
               serve("machine", "finalize", hook_request("machine", machine, finalizing=True), ctx),
               serve("nodepool", "sync", hook_request("nodepool", pool, children=children), ctx),
               serve("nodepool", "finalize", hook_request("nodepool", pool, children=children, finalizing=True), ctx)]
    assert kube.events == [], kube.events
    assert calls.total == 0, calls.by_operation
    assert [c for c in kube.calls if c[0] != "get"] == [], "only the reads that verify"
    assert {c["metadata"]["name"] for c in answers[3]["children"]} == {"web-0", "web-1"}, "no Machine removed"
    assert {c["metadata"]["name"] for c in answers[4]["children"]} == {"web-0", "web-1"}
    assert all(a.get("finalized") in (None, False) for a in answers)


def test_hostile_user_data_is_cut_off_and_refused(aws, make_ctx):
    """A Machine the API server has, whose template would loop for hours or write gigabytes: the call that
    renders it returns (it would not for hours), refusing the template."""
    loops = ("#!/bin/bash\n{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}"
             "{{ kubelet_args }}\n")
    huge = "#!/bin/bash\n{{ kubelet_args }}\n{{ 'x' * 100000000 }}\n"
    for n, template in enumerate((loops, huge)):
        world = MachineWorld(make_ctx, aws, name=f"web-hostile-{n}", uid=f"uid-hostile-{n}",
                             spec=machine_spec(default_subnet(aws("ec2")), userData=template))
        world.call()
        world.call(after=1)
        assert "userData" in world.status["lastError"] and not machine_instances(world.ec2, world.uid)
        assert world.condition(machine_names.LAUNCHED) == "False"


def test_hostile_bodies_never_hold_the_hook_server(aws, moto_endpoint, tmp_path):
    """The real gunicorn server (2 workers x 4 threads), eight forged Machine bodies whose user data would
    loop for hours: each is answered (within the client's 30 s, which a rendered loop would outlast by hours),
    and /healthz answers throughout, while they are in flight."""
    import concurrent.futures

    import requests

    from tests.support.hook_server import HookServer

    template = ("#!/bin/bash\n{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}"
                "{{ kubelet_args }}\n")
    env = {"AWS_ENDPOINT_URL": moto_endpoint, "NODEWARDEN_WORKERS": "2", "NODEWARDEN_THREADS": "4"}
    with HookServer(tmp_path / "server", env=env) as server:
        def forge(n: int) -> int | str:
            body = machine_object(f"forged-{n}", f"uid-forged-{n}", machine_spec("subnet-1", userData=template))
            body["status"] = {"launchRequestedAt": fmt(dt.datetime.now(dt.timezone.utc))}
            try:
                return requests.post(server.url("/machine/sync", "http"), json=hook_request("machine", body),
                                     timeout=30).status_code
            except requests.RequestException as exc:
                return type(exc).__name__

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            sent = [pool.submit(forge, n) for n in range(8)]
            health = [requests.get(f"{server.metrics_url}/healthz", timeout=10).status_code]
            while not all(f.done() for f in sent):
                concurrent.futures.wait(sent, timeout=0.25)
                health.append(requests.get(f"{server.metrics_url}/healthz", timeout=10).status_code)
            answered = [f.result() for f in sent]
        assert all(isinstance(code, int) and code < 500 for code in answered), answered
        assert set(health) == {200}
        assert server.proc.poll() is None


# ------------------------------------------------------------------ nodepool leaked instances


def _tagged(ec2, **tags) -> str:
    spec = [{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}] if tags else []
    return ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1,
                             TagSpecifications=spec)["Instances"][0]["InstanceId"]


def _pool(name: str = "web", replicas: int = 0, uid: str = "uid-pool") -> dict:
    return {"apiVersion": machine_names.API_VERSION, "kind": machine_names.NODEPOOL_KIND,
            "metadata": {"name": name, "uid": uid, "generation": 1, "creationTimestamp": fmt(T0)},
            "spec": {"replicas": replicas, "template": {"spec": {"instanceTypes": ["m5.large"],
                                                                 "subnets": ["subnet-1"], "imageId": "ami-1"}}}}


def test_leaked_instances_are_terminated_and_nothing_else(aws, make_ctx):
    from worlds.fake_kube import FakeKube

    ec2 = aws("ec2")
    cluster = {"kubernetes.io/cluster/test-cluster": "owned"}
    leaked = _tagged(ec2, **cluster, **{machine_names.TAG_POOL: "web", machine_names.TAG_MACHINE_UID: "uid-gone"})
    owned = _tagged(ec2, **cluster, **{machine_names.TAG_POOL: "web", machine_names.TAG_MACHINE_UID: "uid-live"})
    untagged = _tagged(ec2)
    no_uid = _tagged(ec2, **cluster, **{machine_names.TAG_POOL: "web"})
    other_pool = _tagged(ec2, **cluster, **{machine_names.TAG_POOL: "db", machine_names.TAG_MACHINE_UID: "uid-gone-2"})
    other_cluster = _tagged(ec2, **{"kubernetes.io/cluster/other": "owned", machine_names.TAG_POOL: "web",
                                    machine_names.TAG_MACHINE_UID: "uid-gone-3"})
    live = machine_object("web-live", "uid-live", machine_spec("subnet-1"))
    pool = _pool(replicas=1)
    kube = FakeKube([pool, live])
    # moto stamps launch times with the real clock: judge them an hour later.
    now = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
    ctx = make_ctx({}, now=now, kube=kube)
    body = hook_request("nodepool", pool, children=[live])
    response = serve("nodepool", "sync", body, ctx)
    states = {i["InstanceId"]: i["State"]["Name"] for r in ec2.describe_instances()["Reservations"]
              for i in r["Instances"]}
    assert states[leaked] in ("shutting-down", "terminated")
    for kept in (owned, untagged, no_uid, other_pool, other_cluster):
        assert states[kept] == "running", kept
    assert response["status"]["leakedInstancesTerminated"] == 1
    assert "LeakedInstanceTerminated" in kube.reasons()


def test_a_young_leak_is_left_alone(aws, make_ctx):
    from worlds.fake_kube import FakeKube

    ec2 = aws("ec2")
    young = _tagged(ec2, **{"kubernetes.io/cluster/test-cluster": "owned", machine_names.TAG_POOL: "web",
                            machine_names.TAG_MACHINE_UID: "uid-gone"})
    pool = _pool()
    ctx = make_ctx({}, now=dt.datetime.now(dt.timezone.utc), kube=FakeKube([pool]))
    serve("nodepool", "sync", hook_request("nodepool", pool), ctx)
    assert ec2.describe_instances(InstanceIds=[young])["Reservations"][0]["Instances"][0]["State"]["Name"] == "running"


def test_a_leak_whose_machine_appears_on_the_api_server_is_kept(aws, make_ctx):
    """The request's children lag; the API server is asked again right before terminating."""
    from worlds.fake_kube import FakeKube

    ec2 = aws("ec2")
    instance = _tagged(ec2, **{"kubernetes.io/cluster/test-cluster": "owned", machine_names.TAG_POOL: "web",
                               machine_names.TAG_MACHINE_UID: "uid-new"})
    pool = _pool()
    machine = machine_object("web-new", "uid-new", machine_spec("subnet-1"))
    ctx = make_ctx({}, now=dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1), kube=FakeKube([pool, machine]))
    serve("nodepool", "sync", hook_request("nodepool", pool), ctx)  # the request shows no children
    assert ec2.describe_instances(InstanceIds=[instance])["Reservations"][0]["Instances"][0]["State"]["Name"] == "running"


def _owned(obj: dict, pool: dict) -> dict:
    """A Machine as Metacontroller creates it for the pool: with the pool as its controller, made from the
    pool's template as it is (not drifted)."""
    from hooks.machines import spec
    obj["metadata"]["annotations"][machine_names.TEMPLATE_HASH] = spec.pool(pool).template_hash
    obj["metadata"]["ownerReferences"] = [{"apiVersion": machine_names.API_VERSION, "kind": machine_names.NODEPOOL_KIND,
                                           "name": pool["metadata"]["name"], "uid": pool["metadata"]["uid"],
                                           "controller": True}]
    return obj


def test_scale_down_removes_unregistered_machines_first(make_ctx):
    from worlds.fake_kube import FakeKube

    pool = _pool(replicas=1)
    pool["spec"]["disruption"] = {"budgets": [{"nodes": "100%"}]}  # the order, not the budget, is under test
    def m(name, created, registered):
        obj = machine_object(name, f"uid-{name}", {}, created=T0 + dt.timedelta(minutes=created))
        obj["status"] = {"conditions": [{"type": machine_names.REGISTERED, "status": "True" if registered else "False"}]}
        return _owned(obj, pool)
    old, newer, launching = m("web-old", 0, True), m("web-newer", 5, True), m("web-launching", 1, False)
    ctx = make_ctx({"NODEWARDEN_CLUSTER_NAME": ""}, kube=FakeKube([pool, old, newer, launching]))
    response = serve("nodepool", "sync", hook_request("nodepool", pool, children=[old, newer, launching]), ctx)
    assert [c["metadata"]["name"] for c in response["children"]] == ["web-newer"]
    for gone in ("web-old", "web-launching"):  # Metacontroller deletes what was left out
        del ctx.kube.objects[(machine_names.MACHINE_KIND, "", gone)]
    pool["spec"]["replicas"] = 3
    ctx.kube.add_object(pool)  # the API server's pool decides, not the body's
    response = serve("nodepool", "sync", hook_request("nodepool", pool, children=[copy.deepcopy(newer)]), ctx)
    created = [c for c in response["children"] if c["metadata"]["name"] != "web-newer"]
    assert len(created) == 2 and all(c["metadata"]["labels"][machine_names.POOL_LABEL] == "web" for c in created)
    again = serve("nodepool", "sync", hook_request("nodepool", pool, children=[copy.deepcopy(newer)]), ctx)
    assert again["children"] == response["children"], "a repeated call asks for the same Machines"


def test_the_leak_collector_keeps_an_instance_a_machine_records_whose_uid_tag_was_edited(aws, make_ctx):
    from worlds.fake_kube import FakeKube

    ec2 = aws("ec2")
    instance = _tagged(ec2, **{"kubernetes.io/cluster/test-cluster": "owned", machine_names.TAG_POOL: "web",
                               machine_names.TAG_MACHINE_UID: "edited-by-a-user"})
    pool = _pool(replicas=1)
    live = _owned(machine_object("web-live", "uid-live", machine_spec("subnet-1")), pool)
    live["status"] = {"instanceID": instance}
    ctx = make_ctx({}, now=dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1), kube=FakeKube([pool, live]))
    serve("nodepool", "sync", hook_request("nodepool", pool, children=[live]), ctx)
    assert _state(ec2, instance) == "running"
    # Asked straight, the precondition says the same: a Machine records it.
    from hooks import actuators
    from hooks.plan import Orphaned

    assert "records" in actuators._precondition_failure(ctx, Orphaned(instance, "test-cluster", "web", 0.0))


def test_a_scale_down_removes_exactly_the_difference_when_the_cache_is_a_step_behind(make_ctx):
    """3 -> 2: the first call removes the Machine not yet Registered. Metacontroller deletes it (its
    finalizer holds it), but the next call's children still show it live, and Registered by now: counted
    from the API server, nothing more goes."""
    from worlds.fake_kube import FakeKube

    pool = _pool(replicas=2)
    def m(name, created, registered):
        obj = machine_object(name, f"uid-{name}", {}, created=T0 + dt.timedelta(minutes=created))
        obj["status"] = {"conditions": [{"type": machine_names.REGISTERED, "status": "True" if registered else "False"}]}
        return _owned(obj, pool)
    machines = [m("web-old", 0, True), m("web-newer", 5, True), m("web-launching", 10, False)]
    kube = FakeKube([pool, *machines])
    ctx = make_ctx({"NODEWARDEN_CLUSTER_NAME": ""}, kube=kube)
    first = serve("nodepool", "sync", hook_request("nodepool", pool, children=copy.deepcopy(machines)), ctx)
    removed = {m["metadata"]["name"] for m in machines} - {c["metadata"]["name"] for c in first["children"]}
    assert removed == {"web-launching"}
    kube.objects[(machine_names.MACHINE_KIND, "", "web-launching")]["metadata"]["deletionTimestamp"] = fmt(T0)
    stale = copy.deepcopy(machines)
    stale[2]["status"] = {"conditions": [{"type": machine_names.REGISTERED, "status": "True"}]}  # its phase moved on
    second = serve("nodepool", "sync", hook_request("nodepool", pool, children=stale), ctx)
    assert {c["metadata"]["name"] for c in second["children"]} == {"web-old", "web-newer", "web-launching"}
    assert kube.reasons().count("MachineRemoved") == 1


def _fenced_pool_world(make_ctx, request_namespace: str):
    """A pool of two Initialized Machines, and a FencingRequest that powered off web-b's instance (confirmed)."""
    from worlds.fake_kube import FakeKube

    pool = _pool(replicas=2)
    machines = []
    for name in ("web-a", "web-b"):
        obj = _owned(machine_object(name, f"uid-{name}", machine_spec("subnet-1")), pool)
        obj["status"] = {"nodeName": f"node-{name}", "nodeUID": f"nuid-{name}", "instanceID": f"i-{name}",
                         "conditions": [{"type": machine_names.INITIALIZED, "status": "True"}]}
        machines.append(obj)
    fence = {"apiVersion": machine_names.API_VERSION, "kind": "FencingRequest",
             "metadata": {"name": "node-web-b", "namespace": request_namespace, "uid": "fr-1"},
             "spec": {"nodeRef": {"name": "node-web-b"}, "action": "Off"},
             "status": {"phase": "Recovering", "providerStatus": {"instanceID": "i-web-b", "nodeUID": "nuid-web-b"},
                        "conditions": [{"type": "FencingSucceeded", "status": "True",
                                        "lastTransitionTime": fmt(T0)}]}}
    kube = FakeKube([pool] + machines)
    kube.add_object(fence)
    ctx = make_ctx({"NODEWARDEN_CLUSTER_NAME": ""}, kube=kube)
    return pool, machines, ctx


def test_a_machine_fenced_by_our_request_gets_its_replacement_at_once_and_is_marked(make_ctx):
    pool, machines, ctx = _fenced_pool_world(make_ctx, "nodewarden-system")
    response = serve("nodepool", "sync", hook_request("nodepool", pool, children=copy.deepcopy(machines)), ctx)
    children = [c["metadata"]["name"] for c in response["children"]]
    assert "web-b" in children and len(children) == 3, children  # the replacement, and web-b until recovered
    [record] = response["status"]["disruptions"]
    assert (record["machine"], record["reason"]) == ("web-b", "Repair") and record["replacement"] in children
    marked = ctx.kube.objects[(machine_names.MACHINE_KIND, "", "web-b")]["metadata"]["annotations"]
    assert '"reason":"Repair"' in marked["nodewarden.io/disruption"]
    untouched = ctx.kube.objects[(machine_names.MACHINE_KIND, "", "web-a")]["metadata"]["annotations"]
    assert "nodewarden.io/disruption" not in untouched


def test_a_fencing_request_in_a_tenants_namespace_repairs_nothing(make_ctx):
    pool, machines, ctx = _fenced_pool_world(make_ctx, "tenant")
    response = serve("nodepool", "sync", hook_request("nodepool", pool, children=copy.deepcopy(machines)), ctx)
    assert [c["metadata"]["name"] for c in response["children"]] == ["web-a", "web-b"]
    assert response["status"]["disruptions"] == []


def test_the_pool_relates_our_fencing_requests_so_a_confirmed_fence_syncs_it(make_ctx):
    """Relating them is what makes Metacontroller sync the pool when a power-off is confirmed; the sync itself
    lists them from the API server."""
    ctx = make_ctx({"NODEWARDEN_NAMESPACE": "fencing-ops"})
    answer = serve("nodepool", "customize", {"controller": {}, "parent": _pool()}, ctx)
    assert answer == {"relatedResources": [{"apiVersion": "nodewarden.io/v1alpha1", "resource": "fencingrequests",
                                            "namespace": "fencing-ops"}]}
