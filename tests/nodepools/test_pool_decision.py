"""A provisioning pool's whole decision in one call: what it creates and lets go, on readings as gather
stores them (the round, the disruption pass and the children together)."""
from __future__ import annotations

import datetime as dt
import json

from hooks import machine_names, provisioning_names
from hooks.machines import signals
from tests.support.nodepool_calls import World, bound, created, pool, removed
from tests.support.provisioning import NOW, raw_pod, stamp


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


def _family(name: str) -> list[dict]:
    return [{"key": provisioning_names.INSTANCE_FAMILY_LABEL, "operator": "In", "values": [name]}]


def test_a_drift_replacement_is_planned_from_the_pool_as_it_is_now_for_the_pods_it_runs():
    """The pool's requirements move from m5 to c5 and its subnets to one zone: the drifted Machine's
    replacement is a c5 in that zone's subnet, sized for the pods the old Machine runs, not a copy of it."""
    before = pool(requirements=_family("m5"))
    world = World(before)
    world.add("web-a", ("api-1", "1", "1Gi"), ("api-2", "1", "1Gi"))
    world.obj = pool(requirements=_family("c5"))
    world.obj["spec"]["template"]["spec"]["subnets"] = ["subnet-b"]
    plan = world.call()
    [made] = created(plan, world)
    assert json.loads(made["metadata"]["annotations"][machine_names.REPLACES])["machine"] == "web-a"
    types = made["spec"]["instanceTypes"]
    assert types and all(t.startswith("c5.") for t in types), types
    assert made["spec"]["subnets"] == ["subnet-b"]
    assert "c5.large" not in types  # 2 cpu of pods do not fit its allocatable
    assert removed(plan, world) == set()  # surge-first: the old one stays until the new one is Initialized


def test_a_drifted_machine_running_only_daemonset_pods_leaves_without_a_replacement():
    world = World(pool(requirements=_family("m5")))
    found = world.add("web-a")
    world.bound.append(bound("agent", world.nodes[-1], "100m", "128Mi", owner="DaemonSet"))
    world.obj = pool(requirements=_family("c5"))
    plan = world.call()
    assert created(plan, world) == []
    assert removed(plan, world) == {found["metadata"]["name"]}
    [record] = plan.response["status"]["disruptions"]
    assert record["reason"] == signals.DRIFTED and "replacement" not in record


def _underutilized_since(world: World, *names: str, seconds: float = 3600) -> None:
    world.obj["status"]["consolidation"] = [
        {"machine": n, "uid": f"uid-{n}", "reason": signals.UNDERUTILIZED, "since": stamp(seconds)} for n in names]


def _one_leaving_one_target_one_candidate(target_pod_cpu: str) -> World:
    """web-a is being deleted (an earlier consolidation) with a pod of 1500m still on it; web-b runs a pod of
    ``target_pod_cpu``; web-c's pod of 1500m has been Underutilized for an hour."""
    world = World(pool(budgets=[{"nodes": "100%"}]))
    world.add("web-a", ("a-1", "1500m", "1Gi"), deleting=True,
              annotations={signals.DISRUPTION_ANNOTATION: signals.Signal(signals.UNDERUTILIZED, NOW).encode()})
    world.add("web-b", ("b-1", target_pod_cpu, "1Gi"))
    world.add("web-c", ("c-1", "1500m", "1Gi"))
    _underutilized_since(world, "web-c")
    return world


def test_room_the_pods_of_a_machine_already_leaving_will_need_is_not_room_for_another_removal():
    """web-b has room for one pod of 1500m: web-c's would fit there, but that room is web-a's pod's."""
    world = _one_leaving_one_target_one_candidate("2")
    plan = world.call()
    assert removed(plan, world) == set()
    assert not any(r["reason"] == signals.UNDERUTILIZED for r in plan.response["status"]["disruptions"])


def test_with_room_for_both_the_second_removal_goes():
    world = _one_leaving_one_target_one_candidate("500m")
    assert removed(world.call(), world) == {"web-c"}


def test_consolidation_never_chooses_a_machine_whose_pod_a_disruption_budget_keeps():
    """web-b's pods would fit on web-a, but a PodDisruptionBudget allows no disruption of its pod now: it is
    no candidate (a drain would stop there, or go through the budget)."""
    world = World(pool(budgets=[{"nodes": "100%"}]))
    world.add("web-a", ("a-1", "500m", "1Gi"))
    world.add("web-b", ("db-1", "500m", "1Gi"))
    world.bound[-1]["metadata"]["labels"] = {"app": "db"}
    _underutilized_since(world, "web-a", "web-b")
    world.extra["podDisruptionBudgets"] = [{
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "db", "namespace": "default", "generation": 1},
        "spec": {"selector": {"matchLabels": {"app": "db"}}},
        "status": {"observedGeneration": 1, "disruptionsAllowed": 0}}]
    world.bound[0]["metadata"]["labels"] = {"app": "a"}
    plan = world.call()
    assert "web-b" not in removed(plan, world)
    assert "web-b" not in {r["machine"] for r in plan.response["status"]["consolidation"]}


def _fenced(machine: dict, *, recovered: bool = False) -> dict:
    """Our FencingRequest that powered off exactly the Machine's instance behind its Node, confirmed."""
    status = machine["status"]
    conds = [{"type": "FencingSucceeded", "status": "True", "lastTransitionTime": stamp(60)}]
    if recovered:
        conds.append({"type": "Recovered", "status": "True", "lastTransitionTime": stamp(1)})
    return {"metadata": {"name": f"{status['nodeName']}-fence", "namespace": "nodewarden-system"},
            "spec": {"nodeRef": {"name": status["nodeName"]}, "action": "Off"},
            "status": {"phase": "Recovering", "conditions": conds,
                       "providerStatus": {"instanceID": status["instanceID"], "nodeUID": status["nodeUID"]}}}


def test_a_fenced_machine_running_no_pod_needs_no_replacement_but_stays_until_its_recovery():
    """Its pods already gone (recovery force-deleted them, and they are pending elsewhere): nothing needs a
    replacement for it, but the Machine is not let go before the FencingRequest says recovery is done."""
    world = World(pool(budgets=[{"nodes": "100%"}]))
    found = world.add("web-a")
    world.fencing_requests = [_fenced(found)]
    plan = world.call()
    assert created(plan, world) == [] and removed(plan, world) == set()
    [record] = plan.response["status"]["disruptions"]
    assert record["reason"] == signals.REPAIR
    world.fencing_requests = [_fenced(found, recovered=True)]
    world.obj["status"] = plan.response["status"]
    assert removed(world.call(), world) == {"web-a"}
