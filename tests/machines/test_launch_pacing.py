"""A wave of launches within the process's share of RunInstances' bucket: paced, never lost, never doubled.

The process's limiter runs on the code's clock (a test never waits for a
refill); moto answers every call that is sent.
"""
from __future__ import annotations

import datetime as dt

import pytest

from hooks import events, machine_names
from hooks.aws import rate_limits
from hooks.aws.clients import AwsClients
from worlds.cluster_gc import Calls
from worlds.fake_kube import FakeKube
from worlds.machines import MachineWorld, machine_instances
from worlds.clock import ManualClock

pytestmark = pytest.mark.moto


def test_a_wave_of_launches_is_paced_by_the_share_and_each_machine_gets_exactly_one_instance(aws, make_ctx):
    kube = FakeKube()
    worlds = [MachineWorld(make_ctx, aws, name=f"web-{n}", uid=f"uid-{n}", kube=kube) for n in range(12)]
    clock = ManualClock(0.0)
    # RunInstances' bucket is 5 with 2 a second: a fifth of it is 1 token and 0.4 a second.
    limiter = rate_limits.Limiter(1.0, {"ec2-run-instances": 0.2}, clock=clock, sleep=clock.sleep)
    shared = make_ctx({"NODEWARDEN_AWS_RATE_WAIT_SECONDS": "0"}, kube=kube)
    shared._aws = AwsClients(shared.settings, limiter=limiter)
    calls = Calls().attach(shared.aws, services=("ec2",))
    now = [worlds[0].now]
    shared.clock = lambda: now[0]
    for world in worlds:
        world.ctx = shared
    rounds = 0
    while not all(w.condition(machine_names.LAUNCHED) == "True" for w in worlds) and rounds < 60:
        rounds += 1
        clock.now += 1.0
        now[0] += dt.timedelta(seconds=1)
        for world in worlds:
            world.now = now[0]
            world.call()
    assert all(w.condition(machine_names.LAUNCHED) == "True" for w in worlds), [w.status for w in worlds]
    for world in worlds:
        assert len(machine_instances(world.ec2, world.uid)) == 1, world.name
        assert not world.status.get("launchRefusals"), "a call held back by the limit is no capacity refusal"
    # The share allows 1 at once and 0.4 a second after: 12 launches need about 28 s of the code's clock.
    assert calls.by_operation["RunInstances"] == 12
    assert clock.now >= (12 - 1) / 0.4
    assert events.INSUFFICIENT_CAPACITY not in kube.reasons()
