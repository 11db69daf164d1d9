"""Every EC2 call refused for a while in the middle of a scale-out and a termination: nothing is decided on a
guess, nothing is lost or done twice, and everything converges once AWS answers again.

moto answers through the tests' throttling AWS (devcluster/throttling.py), whose faults refuse calls as AWS
does: RequestLimitExceeded, or an InternalError with HTTP 500.
"""
from __future__ import annotations

import pytest

from hooks import events, machine_names
from worlds.fake_kube import FakeKube
from worlds.machines import MachineWorld, machine_instances

pytestmark = pytest.mark.moto


def _sync(worlds, rounds: int, every: float = 2) -> None:
    for _ in range(rounds):
        for world in worlds:
            if not world.gone:
                world.call(after=every)


@pytest.mark.parametrize("kind, limits", [("throttle", {}), ("error", {"status": 500})])
def test_a_scale_out_and_a_termination_through_an_aws_that_refuses_everything(aws, make_ctx, throttling_aws,
                                                                             retries_at_once, kind, limits):
    throttling_aws.disable()  # only the fault refuses: the buckets would also slow the test's own calls
    kube = FakeKube()
    leaving = MachineWorld(make_ctx, aws, name="web-old", uid="uid-old", kube=kube)
    leaving.until(lambda: leaving.condition(machine_names.LAUNCHED) == "True")
    (old_instance,) = machine_instances(leaving.ec2, leaving.uid)
    worlds = [MachineWorld(make_ctx, aws, name=f"web-{n}", uid=f"uid-{n}", kube=kube) for n in range(3)]
    _sync(worlds, 1)  # their launches are requested

    throttling_aws.add_fault("ec2", kind, **limits)
    leaving.delete()
    _sync([leaving, *worlds], 8)
    assert not leaving.gone, "its instance's termination was never confirmed: the finalizer holds"
    for world in worlds:
        assert world.condition(machine_names.LAUNCHED) != "True"
        assert not world.status.get("launchRefusals"), "a refused call is no capacity refusal"
        assert not world.gone
    assert events.INSUFFICIENT_CAPACITY not in kube.reasons()

    throttling_aws.clear_faults()
    # The finalizer also waits out the window in which EC2 may still show a late launch.
    _sync([leaving, *worlds], 12, every=10)
    assert leaving.gone, leaving.status
    state = leaving.ec2.describe_instances(InstanceIds=[old_instance["InstanceId"]])
    assert state["Reservations"][0]["Instances"][0]["State"]["Name"] in ("shutting-down", "terminated")
    for world in worlds:
        assert world.condition(machine_names.LAUNCHED) == "True", world.status
        (instance,) = machine_instances(world.ec2, world.uid)
        assert world.status["instanceID"] == instance["InstanceId"]
