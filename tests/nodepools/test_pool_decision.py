"""A provisioning pool's whole decision in one call: what it creates and lets go, on readings as gather
stores them (the round, the disruption pass and the children together)."""
from __future__ import annotations

import datetime as dt
import json

from hooks import machine_names, provisioning_names
from hooks.machines import signals
from tests.support.nodepool_calls import World, created, pool, removed
from tests.support.provisioning import NOW, raw_pod


def _spot_warned(seconds_ago: float) -> dict:
    at = NOW - dt.timedelta(seconds=seconds_ago)
    notice = signals.Signal(signals.SPOT_INTERRUPTION, at, at + dt.timedelta(seconds=120))
    return {signals.INTERRUPTION_ANNOTATION: notice.encode()}


def test_a_forceful_replacement_and_a_new_machine_count_once_against_the_limits():
    """limits.machines 2: one Machine runs full, the other is going on a spot warning. Its replacement is
    made in this call, and pending pods want a Machine too: the replacement takes the last place, so the
    call creates it alone (never 3 Machines against a limit of 2); the pods wait for room."""
    world = World(pool(limits={"machines": 2}))
    world.add("web-a", ("big-1", "3500m", "12Gi"))
    world.add("web-b", ("big-2", "3500m", "12Gi"), deleting=True, annotations=_spot_warned(30))
    world.pending = [raw_pod(f"api-{i}", cpu="1", memory="1Gi") for i in range(2)]
    plan = world.call()
    made = created(plan, world)
    assert len(made) == 1, [m["metadata"]["name"] for m in made]
    replaces = json.loads(made[0]["metadata"]["annotations"][machine_names.REPLACES])
    assert replaces["machine"] == "web-b"
    live = [m for m in world.machines if not m["metadata"].get("deletionTimestamp")]
    assert len(live) + len(made) <= 2
    assert plan.response["status"]["provisioning"]["pendingPods"] == 0


def test_without_a_limit_the_replacement_and_the_new_machine_are_both_made():
    world = World(pool())
    world.add("web-a", ("big-1", "3500m", "12Gi"))
    world.add("web-b", ("big-2", "3500m", "12Gi"), deleting=True, annotations=_spot_warned(30))
    world.pending = [raw_pod(f"api-{i}", cpu="1", memory="1Gi") for i in range(2)]
    made = created(world.call(), world)
    assert len(made) == 2
    assert sum(1 for m in made if machine_names.REPLACES in m["metadata"]["annotations"]) == 1
    assert sum(1 for m in made if provisioning_names.PROVISIONED_FOR in m["metadata"]["annotations"]) == 1
