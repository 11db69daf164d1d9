"""machine and nodepool against moto in server mode: real RunInstances, tags,
DescribeInstances and TerminateInstances.

The Kubernetes side is tests/fake_kube.FakeKube and the kubelet is
``machine_world.boot`` (no kubelet here; tests/e2e/test_machines.py runs the
same lifecycle on the real control plane). moto never runs out of capacity:
InsufficientInstanceCapacity is injected through botocore's before-call event
(tests/gc_world.Faults), and a crash through its after-call event.
"""
from __future__ import annotations

import copy
import datetime as dt

import pytest

from gc_world import Calls, Faults
from hooks.dispatch import serve
from hooks.machines import names
from machine_world import (T0, CrashAfter, MachineWorld, boot, default_subnet, fmt, machine_instances,
                           machine_object, machine_spec)
from support import hook_request

pytestmark = pytest.mark.moto


def _launched(world: MachineWorld) -> str:
    world.until(lambda: world.condition(names.LAUNCHED) == "True")
    return world.status["instanceID"]


def test_launch_register_initialize(aws, make_ctx):
    world = MachineWorld(make_ctx, aws)
    first = world.call()
    assert "launchRequestedAt" in first["status"] and not machine_instances(world.ec2, world.uid)
    instance_id = _launched(world)
    (instance,) = machine_instances(world.ec2, world.uid)
    tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
    assert tags == {"kubernetes.io/cluster/test-cluster": "owned", names.TAG_POOL: "web",
                    names.TAG_MACHINE: world.name, names.TAG_MACHINE_UID: world.uid, "Name": world.name}
    volumes = world.ec2.describe_volumes(Filters=[{"Name": f"tag:{names.TAG_MACHINE_UID}", "Values": [world.uid]}])
    assert volumes["Volumes"], "volumes are tagged at creation too"
    world.call()
    status = world.status
    assert status["instanceType"] == "m5.large" and status["providerID"].endswith(instance_id)
    # In-flight capacity, before any Node exists.
    assert status["capacity"]["cpu"] == "2" and status["allocatable"]["pods"] == "29"
    assert world.condition(names.REGISTERED) == "False"

    node = boot(world.ec2, instance_id, world.kube)
    assert {"key": names.UNREGISTERED_TAINT, "value": "true", "effect": "NoExecute"} in node["spec"]["taints"]
    world.until(lambda: world.condition(names.REGISTERED) == "True", calls=5)
    node = world.kube.nodes[node["metadata"]["name"]]
    assert node["metadata"]["labels"]["team"] == "web" and node["metadata"]["labels"][names.POOL_LABEL] == "web"
    assert node["metadata"]["annotations"]["example.com/owner"] == "web"
    keys = {t["key"] for t in node["spec"]["taints"]}
    assert names.UNREGISTERED_TAINT not in keys and {"dedicated", "example.com/agent-not-ready"} <= keys
    assert world.status["nodeName"] == node["metadata"]["name"]
    world.call()
    assert world.condition(names.INITIALIZED) == "False", "the startup taint is still there"

    # Whoever owns the startup taint removes it; only then is the Machine initialized.
    node["spec"]["taints"] = [t for t in node["spec"]["taints"] if t["key"] != "example.com/agent-not-ready"]
    world.call()
    assert world.condition(names.INITIALIZED) == "True"


def test_mirroring_happens_once(aws, make_ctx):
    world = MachineWorld(make_ctx, aws)
    node = boot(world.ec2, _launched(world), world.kube)
    world.until(lambda: world.condition(names.REGISTERED) == "True", calls=5)
    node = world.kube.nodes[node["metadata"]["name"]]
    del node["metadata"]["labels"]["team"]  # a user removes a mirrored label
    for _ in range(3):
        world.call(after=5)
    assert "team" not in world.kube.nodes[node["metadata"]["name"]]["metadata"]["labels"]


def _launch_to_capacity(world: MachineWorld) -> None:
    world.until(lambda: world.condition(names.LAUNCHED) == "True" and "capacity" in world.status, calls=20)


def test_a_crash_after_any_aws_call_leaves_exactly_one_instance(aws, make_ctx):
    """Every AWS call of a launch, in turn, is the last thing the hook does before dying."""
    from hooks.aws import instances

    instances.TYPES.clear()
    clean = MachineWorld(make_ctx, aws, name="web-clean", uid="uid-clean")
    counting = CrashAfter(0).attach(clean.ctx.aws)
    _launch_to_capacity(clean)
    counting.detach(clean.ctx.aws)
    operations = counting.operations
    assert {"DescribeInstances", "DescribeSubnets", "RunInstances", "DescribeInstanceTypes"} <= set(operations)
    for n, operation in enumerate(operations, start=1):
        instances.TYPES.clear()
        world = MachineWorld(make_ctx, aws, name=f"web-{n}", uid=f"uid-crash-{n}", kube=clean.kube)
        crash = CrashAfter(n).attach(world.ctx.aws)
        try:
            _launch_to_capacity(world)
        finally:
            crash.detach(world.ctx.aws)
        assert crash.seen >= n
        assert len(machine_instances(world.ec2, world.uid)) == 1, f"crash after call {n} ({operation})"


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
    assert world.condition(names.LAUNCHED) == "True"
    assert calls.by_operation["RunInstances"] == 1


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
                                      "labels": {names.MACHINE_LABEL: world.name}},
                         "spec": {"providerID": f"aws:///us-east-1a/{other}"}})
    world.call()
    assert world.condition(names.REGISTERED) == "False"
    assert "impostor" in world.status["lastError"]
    assert names.MANAGED_KEYS not in (world.kube.nodes["impostor"]["metadata"].get("annotations") or {})
    assert "NodeProviderIDMismatch" in world.kube.reasons()


def test_not_registered_within_the_ttl_deletes_the_machine(aws, make_ctx):
    world = MachineWorld(make_ctx, aws, spec=machine_spec(default_subnet(aws("ec2")), registrationTTL="2m"))
    _launched(world)
    world.call(after=60)
    assert not world.gone
    world.call(after=61)
    assert world.gone, "deleted (its finalizer then terminates the instance)"
    assert "RegistrationTimedOut" in world.kube.reasons()


def test_termination_cordons_drains_terminates_and_deletes_the_node(aws, make_ctx):
    world = MachineWorld(make_ctx, aws)
    instance_id = _launched(world)
    node = boot(world.ec2, instance_id, world.kube)
    node_name = node["metadata"]["name"]
    world.until(lambda: world.condition(names.REGISTERED) == "True", calls=5)
    world.kube.add_pod({"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": "web-1", "namespace": "default", "uid": "uid-web-1"},
                        "spec": {"nodeName": node_name}, "status": {"phase": "Running"}})
    world.kube.volume_attachments["va-1"] = {"metadata": {"name": "va-1"}, "spec": {"nodeName": node_name},
                                             "status": {"attached": True}}
    world.delete()
    world.call()
    node = world.kube.nodes[node_name]
    assert node["spec"]["unschedulable"] is True
    assert {"key": names.DISRUPTED_TAINT, "effect": "NoSchedule"} in node["spec"]["taints"]
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
    world.until(lambda: world.gone, calls=10)
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
    world.until(lambda: world.gone, calls=10)
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


# ------------------------------------------------------------------ nodepool leaked instances


def _tagged(ec2, **tags) -> str:
    spec = [{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}] if tags else []
    return ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1,
                             TagSpecifications=spec)["Instances"][0]["InstanceId"]


def _pool(name: str = "web", replicas: int = 0, uid: str = "uid-pool") -> dict:
    return {"apiVersion": names.API_VERSION, "kind": names.NODEPOOL_KIND,
            "metadata": {"name": name, "uid": uid, "generation": 1, "creationTimestamp": fmt(T0)},
            "spec": {"replicas": replicas, "template": {"spec": {"instanceTypes": ["m5.large"],
                                                                 "subnets": ["subnet-1"], "imageId": "ami-1"}}}}


def test_leaked_instances_are_terminated_and_nothing_else(aws, make_ctx):
    from fake_kube import FakeKube

    ec2 = aws("ec2")
    cluster = {"kubernetes.io/cluster/test-cluster": "owned"}
    leaked = _tagged(ec2, **cluster, **{names.TAG_POOL: "web", names.TAG_MACHINE_UID: "uid-gone"})
    owned = _tagged(ec2, **cluster, **{names.TAG_POOL: "web", names.TAG_MACHINE_UID: "uid-live"})
    untagged = _tagged(ec2)
    no_uid = _tagged(ec2, **cluster, **{names.TAG_POOL: "web"})
    other_pool = _tagged(ec2, **cluster, **{names.TAG_POOL: "db", names.TAG_MACHINE_UID: "uid-gone-2"})
    other_cluster = _tagged(ec2, **{"kubernetes.io/cluster/other": "owned", names.TAG_POOL: "web",
                                    names.TAG_MACHINE_UID: "uid-gone-3"})
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
    from fake_kube import FakeKube

    ec2 = aws("ec2")
    young = _tagged(ec2, **{"kubernetes.io/cluster/test-cluster": "owned", names.TAG_POOL: "web",
                            names.TAG_MACHINE_UID: "uid-gone"})
    pool = _pool()
    ctx = make_ctx({}, now=dt.datetime.now(dt.timezone.utc), kube=FakeKube([pool]))
    serve("nodepool", "sync", hook_request("nodepool", pool), ctx)
    assert ec2.describe_instances(InstanceIds=[young])["Reservations"][0]["Instances"][0]["State"]["Name"] == "running"


def test_a_leak_whose_machine_appears_on_the_api_server_is_kept(aws, make_ctx):
    """The request's children lag; the API server is asked again right before terminating."""
    from fake_kube import FakeKube

    ec2 = aws("ec2")
    instance = _tagged(ec2, **{"kubernetes.io/cluster/test-cluster": "owned", names.TAG_POOL: "web",
                               names.TAG_MACHINE_UID: "uid-new"})
    pool = _pool()
    machine = machine_object("web-new", "uid-new", machine_spec("subnet-1"))
    ctx = make_ctx({}, now=dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1), kube=FakeKube([pool, machine]))
    serve("nodepool", "sync", hook_request("nodepool", pool), ctx)  # the request shows no children
    assert ec2.describe_instances(InstanceIds=[instance])["Reservations"][0]["Instances"][0]["State"]["Name"] == "running"


def test_scale_down_removes_unregistered_machines_first(make_ctx):
    from fake_kube import FakeKube

    pool = _pool(replicas=1)
    def m(name, created, registered):
        obj = machine_object(name, f"uid-{name}", {}, created=T0 + dt.timedelta(minutes=created))
        obj["status"] = {"conditions": [{"type": names.REGISTERED, "status": "True" if registered else "False"}]}
        return obj
    old, newer, launching = m("web-old", 0, True), m("web-newer", 5, True), m("web-launching", 1, False)
    ctx = make_ctx({"NODEWARDEN_CLUSTER_NAME": ""}, kube=FakeKube([pool]))
    response = serve("nodepool", "sync", hook_request("nodepool", pool, children=[old, newer, launching]), ctx)
    assert [c["metadata"]["name"] for c in response["children"]] == ["web-newer"]
    pool["spec"]["replicas"] = 3
    ctx.kube.add_object(pool)  # the API server's pool decides, not the body's
    response = serve("nodepool", "sync", hook_request("nodepool", pool, children=[copy.deepcopy(newer)]), ctx)
    created = [c for c in response["children"] if c["metadata"]["name"] != "web-newer"]
    assert len(created) == 2 and all(c["metadata"]["labels"][names.POOL_LABEL] == "web" for c in created)
    again = serve("nodepool", "sync", hook_request("nodepool", pool, children=[copy.deepcopy(newer)]), ctx)
    assert again["children"] == response["children"], "a repeated call asks for the same Machines"
