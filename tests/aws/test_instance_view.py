"""The process's view of the cluster's instances and its batched fresh reads, against moto."""
from __future__ import annotations

import threading
import time

import pytest

from hooks import machine_names
from hooks.aws import instance_view
from worlds.cluster_gc import Calls
from worlds.fake_kube import FakeKube
from worlds.machines import CrashAfter, MachineWorld, machine_instances

pytestmark = pytest.mark.moto

VIEW = {"NODEWARDEN_INSTANCE_VIEW_SECONDS": "10"}


def _launched(world: MachineWorld) -> str:
    world.until(lambda: world.condition(machine_names.LAUNCHED) == "True")
    return world.status["instanceID"]


def test_machines_with_their_instance_recorded_share_one_read_of_the_cluster(aws, make_ctx):
    kube = FakeKube()
    worlds = [MachineWorld(make_ctx, aws, name=f"web-{n}", uid=f"uid-{n}", env=VIEW, kube=kube) for n in range(12)]
    for world in worlds:
        _launched(world)
    shared = make_ctx(VIEW, kube=kube)
    shared.clock = lambda: worlds[-1].now
    calls = Calls().attach(shared.aws, services=("ec2",))
    for world in worlds:
        world.ctx = shared
        world.call()
        world.call()
    assert calls.by_operation["DescribeInstances"] == 1, calls.by_operation
    assert all(w.condition(machine_names.LAUNCHED) == "True" for w in worlds)
    assert {w.status["instanceID"] for w in worlds} == \
        {i["InstanceId"] for w in worlds for i in machine_instances(w.ec2, w.uid)}


def test_without_the_view_each_sync_reads_again(aws, make_ctx):
    """The same syncs with a view of age 0: one read per sync, so the test above measures the view."""
    kube = FakeKube()
    worlds = [MachineWorld(make_ctx, aws, name=f"web-{n}", uid=f"uid-{n}", kube=kube) for n in range(3)]
    for world in worlds:
        _launched(world)
    shared = make_ctx({"NODEWARDEN_INSTANCE_VIEW_SECONDS": "0"}, kube=kube)
    calls = Calls().attach(shared.aws, services=("ec2",))
    for world in worlds:
        world.ctx = shared
        world.call()
    assert calls.by_operation["DescribeInstances"] == 3


def test_a_launch_the_view_has_not_seen_is_found_fresh_and_never_repeated(aws, make_ctx):
    """The view was read before the launch and is still young; the record of the launch was lost (a crash
    right after RunInstances): the next call reads by the UID tag, fresh, finds the instance and records it."""
    earlier = MachineWorld(make_ctx, aws, name="web-0", uid="uid-0", env=VIEW)
    _launched(earlier)
    world = MachineWorld(make_ctx, aws, name="web-1", uid="uid-1", env=VIEW, kube=earlier.kube)
    world.ctx = earlier.ctx  # one process: the view below is this Machine's too
    world.ctx.clock = lambda: world.now
    earlier.call()  # the view is read now, before web-1's instance exists
    calls = Calls().attach(world.ctx.aws, services=("ec2",))
    world.call()  # stamps the launch request
    crash = CrashAfter(3).attach(world.ctx.aws)  # DescribeInstances by tag, DescribeSubnets, RunInstances
    assert world.call(after=1) is None and crash.operations[-1] == "RunInstances"
    crash.detach(world.ctx.aws)
    world.call(after=1)
    assert calls.by_operation["RunInstances"] == 1
    (instance,) = machine_instances(world.ec2, world.uid)
    assert world.status.get("instanceID") == instance["InstanceId"]


def test_fresh_reads_that_arrive_together_are_one_call():
    answered = []

    def read(keys):
        answered.append(list(keys))
        return {k: f"found {k}" for k in keys if k != "gone"}

    gate = threading.Event()
    batcher = instance_view.Batcher(read, window=0, sleep=lambda _: gate.wait(5))
    results: dict = {}
    threads = [threading.Thread(target=lambda k=k: results.__setitem__(k, batcher.get(k)))
               for k in ("a", "b", "gone")]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    # The first caller holds the batch open until all three have joined.
    while len(batcher._open.keys if batcher._open else []) < 3 and time.monotonic() < deadline:
        time.sleep(0.001)
    gate.set()
    for t in threads:
        t.join()
    assert answered == [["a", "b", "gone"]]
    assert results == {"a": "found a", "b": "found b", "gone": None}


def test_a_failed_batch_read_fails_each_of_its_callers_and_keeps_nothing():
    calls = []

    def read(keys):
        calls.append(keys)
        if len(calls) == 1:
            raise RuntimeError("throttled")
        return {k: k for k in keys}

    batcher = instance_view.Batcher(read, window=0, sleep=lambda _: None)
    with pytest.raises(RuntimeError):
        batcher.get("a")
    assert batcher.get("a") == "a"


def test_a_batch_holds_at_most_its_limit():
    answered = []
    gate = threading.Event()
    batcher = instance_view.Batcher(lambda keys: answered.append(keys) or {}, window=0, most=2,
                                    sleep=lambda _: gate.wait(5))
    threads = [threading.Thread(target=batcher.get, args=(k,)) for k in "abc"]
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join()
    assert sorted(len(keys) for keys in answered) == [1, 2]


def test_the_view_is_read_again_once_older_than_its_age():
    now = [0.0]
    reads = []

    def read(ec2, cluster, clock):
        reads.append(clock())
        return instance_view.Snapshot(clock())

    view = instance_view.InstanceView(10, clock=lambda: now[0], read=read)
    view.snapshot(None, "r", "c")
    now[0] = 9.9
    view.snapshot(None, "r", "c")
    now[0] = 10.0
    view.snapshot(None, "r", "c")
    assert reads == [0.0, 10.0]


def test_concurrent_callers_of_a_stale_view_wait_for_one_read():
    reads = []
    started = threading.Event()
    release = threading.Event()

    def read(ec2, cluster, clock):
        reads.append(1)
        started.set()
        release.wait(5)
        return instance_view.Snapshot(clock())

    view = instance_view.InstanceView(10, read=read)
    threads = [threading.Thread(target=view.snapshot, args=(None, "r", "c")) for _ in range(5)]
    for t in threads:
        t.start()
    started.wait(5)
    release.set()
    for t in threads:
        t.join()
    assert reads == [1]


def test_a_failed_read_is_the_error_of_every_caller_that_waited_for_it():
    """The waiting callers are answered by the read they waited for, not each by a read of its own after it:
    against a slow AWS, each would wait out the read before it and then its own."""
    reads, outcomes = [], []

    def read(ec2, cluster, clock):
        reads.append(1)
        deadline = time.monotonic() + 30
        while view.waiting("r", "c") < 4 and time.monotonic() < deadline:  # the others have joined it
            time.sleep(0.01)
        raise TimeoutError("AWS did not answer")

    view = instance_view.InstanceView(10, read=read)

    def call():
        try:
            view.snapshot(None, "r", "c")
            outcomes.append("answered")
        except TimeoutError as exc:
            outcomes.append(str(exc))

    threads = [threading.Thread(target=call) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert reads == [1]
    assert outcomes == ["AWS did not answer"] * 5
    assert view.waiting("r", "c") == 0


def test_read_by_ids_leaves_out_an_id_ec2_does_not_know(aws):
    ec2 = aws("ec2")
    iid = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    found = instance_view.read_by_ids(ec2, [iid, "i-0123456789abcdef0"])
    assert list(found) == [iid] and found[iid]["state"] == "running"
