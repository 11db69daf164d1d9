"""The actions that ask a fenced node's owner to replace it, run as the pipeline runs them (actuators.act): each
only while its precondition, read right before it, holds. A body can name any NodeClaim, Machine or
instance: the forged ones (another uid, another node, another group) are refused, and nothing is done to
them. The API server is worlds/fake_kube.FakeKube; EC2 Auto Scaling is moto in server mode."""
from __future__ import annotations

import datetime as dt

import pytest

from hooks import actuators, timefmt
from hooks.aws import autoscaling
from hooks.kube import owner_api
from hooks.metrics import OWNER_REPLACEMENTS
from hooks.owner_names import CAPI_HEALTH_CHECK_SUCCEEDED, CAPI_OWNER_REMEDIATED, OWNER_NODECLAIM
from hooks.plan import PRECONDITION, Action, CapiMachineOf, GroupMember, NodeClaimOf
from tests.support.autoscaling_groups import lone_instance, make_group
from tests.support.owner_objects import CAPI_NAMESPACE, capi_machine, nodeclaim
from worlds.cluster_gc import Faults
from worlds.fake_kube import FakeKube

NOW = dt.datetime(2026, 11, 27, 12, 0, tzinfo=dt.timezone.utc)
PROVIDER_ID = "aws:///us-east-1a/i-0123456789abcdef0"


def _run(ctx, action: Action):
    (outcome,) = actuators.act("fencing-request", [action], ctx)
    return outcome


# -- Karpenter -------------------------------------------------------------------------------------------------

def _delete_claim(uid="u-claim", provider_id=PROVIDER_ID, node="n1") -> Action:
    return Action("kube.delete-nodeclaim", "claim-a", {"uid": uid},
                  requires=(NodeClaimOf("claim-a", uid, provider_id, node),))


def test_the_nodeclaim_that_claims_the_node_is_deleted(make_ctx):
    kube = FakeKube([nodeclaim("claim-a", "u-claim", PROVIDER_ID, "n1")])
    outcome = _run(make_ctx(kube=kube), _delete_claim())
    assert outcome.ok and outcome.result == owner_api.DELETED
    assert ("NodeClaim", "", "claim-a") not in kube.objects


@pytest.mark.parametrize("stored, why", [
    (nodeclaim("claim-a", "u-other", PROVIDER_ID, "n1"), "uid u-other"),
    (nodeclaim("claim-a", "u-claim", "aws:///us-east-1a/i-0fffffffffffffff0", "n1"), "is for"),
    (nodeclaim("claim-a", "u-claim", PROVIDER_ID, "n2"), "names node 'n2'"),
], ids=["another-uid", "another-instance", "another-node"])
def test_a_nodeclaim_that_does_not_claim_the_node_is_not_deleted(make_ctx, stored, why):
    kube = FakeKube([stored])
    outcome = _run(make_ctx(kube=kube), _delete_claim())
    assert not outcome.ok and outcome.code == PRECONDITION and why in outcome.error
    assert ("NodeClaim", "", "claim-a") in kube.objects
    assert not [c for c in kube.calls if c[0] == "delete_with_options"]


def test_a_nodeclaim_gone_already_is_gone(make_ctx):
    outcome = _run(make_ctx(kube=FakeKube()), _delete_claim())
    assert outcome.ok and outcome.result == owner_api.GONE


def test_a_nodeclaim_the_api_server_cannot_show_is_not_deleted(make_ctx):
    kube = FakeKube([nodeclaim("claim-a", "u-claim", PROVIDER_ID, "n1")])
    kube.refused.add(("get", "NodeClaim"))
    outcome = _run(make_ctx(kube=kube), _delete_claim())
    assert outcome.code == PRECONDITION and ("NodeClaim", "", "claim-a") in kube.objects


# -- Cluster API -----------------------------------------------------------------------------------------------

def _remediate(uid="u-m1", node="n1") -> Action:
    return Action("kube.remediate-capi-machine", f"{CAPI_NAMESPACE}/m1", {"uid": uid, "message": "n1 fenced"},
                  requires=(CapiMachineOf(CAPI_NAMESPACE, "m1", uid, node),))


def _conditions(kube) -> dict:
    machine = kube.objects[("Machine", CAPI_NAMESPACE, "m1")]
    return {c["type"]: c for c in machine["status"].get("conditions") or []}


def test_the_capi_machine_that_holds_the_node_is_marked_for_its_owner_now(make_ctx):
    kube = FakeKube([capi_machine("m1", "u-m1", "n1")])
    outcome = _run(make_ctx(kube=kube, now=NOW), _remediate())
    assert outcome.ok and outcome.result == owner_api.DONE
    conditions = _conditions(kube)
    assert {k: (c["status"], c["lastTransitionTime"]) for k, c in conditions.items()} == {
        CAPI_HEALTH_CHECK_SUCCEEDED: ("False", timefmt.fmt(NOW)), CAPI_OWNER_REMEDIATED: ("False", timefmt.fmt(NOW))}
    assert conditions[CAPI_HEALTH_CHECK_SUCCEEDED]["message"] == "n1 fenced"


@pytest.mark.parametrize("stored, why", [
    (capi_machine("m1", "u-m1", "n2"), "holds node 'n2'"),
    (capi_machine("m1", "u-m1", None), "holds node None"),
    (capi_machine("m1", "u-other", "n1"), "uid u-other"),
], ids=["node-ref-changed", "no-node-ref", "another-uid"])
def test_a_capi_machine_that_does_not_hold_the_node_is_not_marked(make_ctx, stored, why):
    kube = FakeKube([stored])
    outcome = _run(make_ctx(kube=kube, now=NOW), _remediate())
    assert not outcome.ok and outcome.code == PRECONDITION and why in outcome.error
    assert _conditions(kube) == {}
    assert not [c for c in kube.calls if c[0] == "json_patch"]


def test_a_capi_machine_gone_already_is_gone(make_ctx):
    outcome = _run(make_ctx(kube=FakeKube(), now=NOW), _remediate())
    assert outcome.ok and outcome.result == owner_api.GONE


# -- EC2 Auto Scaling ------------------------------------------------------------------------------------------

def _asg_action(kind: str, instance: str, group: str) -> Action:
    return Action(kind, instance, {"group": group, "region": "us-east-1"},
                  requires=(GroupMember(instance, group, "us-east-1"),))


@pytest.mark.moto
def test_the_groups_instance_is_marked_unhealthy(aws, make_ctx):
    asg = aws("autoscaling")
    first, second = make_group(asg, aws("ec2"), "web", 2)
    outcome = _run(make_ctx(), _asg_action("asg.set-unhealthy", first, "web"))
    assert outcome.ok and outcome.result == autoscaling.DONE
    assert autoscaling.describe_instance(asg, first)["health"] == "Unhealthy"
    assert autoscaling.describe_instance(asg, second)["health"] == "Healthy"


@pytest.mark.moto
@pytest.mark.parametrize("kind", ["asg.set-unhealthy", "asg.enter-standby", "asg.exit-standby"])
def test_an_instance_in_another_group_is_left_alone(aws, make_ctx, kind):
    """The group the action was decided for is not the instance's now. (moto answers the old group for an
    instance detached and attached to another, so the instance here is another group's from the start.)"""
    asg = aws("autoscaling")
    make_group(asg, aws("ec2"), "web", 2)
    moved, _ = make_group(asg, aws("ec2"), "batch", 2)
    outcome = _run(make_ctx(), _asg_action(kind, moved, "web"))
    assert not outcome.ok and outcome.code == PRECONDITION and "in Auto Scaling group batch" in outcome.error
    assert autoscaling.describe_instance(asg, moved) == {"group": "batch", "lifecycleState": "InService",
                                                         "health": "Healthy", "instanceId": moved}


@pytest.mark.moto
def test_an_instance_whose_group_auto_scaling_cannot_say_is_left_alone(aws, make_ctx):
    asg = aws("autoscaling")
    first, _ = make_group(asg, aws("ec2"), "web", 2)
    ctx = make_ctx()
    Faults().add("DescribeAutoScalingInstances", "Throttling", times=float("inf")).attach(ctx.aws, ("autoscaling",))
    outcome = _run(ctx, _asg_action("asg.set-unhealthy", first, "web"))
    assert outcome.code == PRECONDITION and "not confirmed: Throttling" in outcome.error
    assert autoscaling.describe_instance(asg, first)["health"] == "Healthy"


@pytest.mark.moto
def test_an_instance_no_group_holds_is_gone(aws, make_ctx):
    make_group(aws("autoscaling"), aws("ec2"), "web", 1)
    lone = lone_instance(aws("ec2"))
    outcome = _run(make_ctx(), _asg_action("asg.set-unhealthy", lone, "web"))
    assert outcome.ok and outcome.result == autoscaling.GONE


@pytest.mark.moto
def test_standby_around_a_reboot_and_its_refusal_at_the_minimum_size(aws, make_ctx):
    asg = aws("autoscaling")
    first, _ = make_group(asg, aws("ec2"), "web", 2, min_size=1)
    ctx = make_ctx()
    assert _run(ctx, _asg_action("asg.enter-standby", first, "web")).result == autoscaling.DONE
    assert autoscaling.describe_instance(asg, first)["lifecycleState"] == "Standby"
    assert _run(ctx, _asg_action("asg.exit-standby", first, "web")).result == autoscaling.DONE
    assert autoscaling.describe_instance(asg, first)["lifecycleState"] == "InService"
    (only,) = make_group(asg, aws("ec2"), "single", 1, min_size=1)
    refused = _run(ctx, _asg_action("asg.enter-standby", only, "single"))
    assert not refused.ok and refused.code == "StandbyRefused" and "minimum size" in refused.error
    assert autoscaling.describe_instance(asg, only)["lifecycleState"] == "InService"


# -- the count -------------------------------------------------------------------------------------------------

def test_an_outcome_is_counted_once_per_request(make_ctx):
    def count():
        return OWNER_REPLACEMENTS.labels(OWNER_NODECLAIM, "NodeClaimDeleted")._value.get()

    before = count()
    counted = Action("metric.owner-replacement", OWNER_NODECLAIM, {"outcome": "NodeClaimDeleted", "request": "u-fr1"})
    actuators.act("fencing-request", [counted, counted], make_ctx())
    assert count() == before + 1, "a sync retried before its record was written counts it once"
    actuators.act("fencing-request", [Action("metric.owner-replacement", OWNER_NODECLAIM,
                                             {"outcome": "NodeClaimDeleted", "request": "u-fr2"})], make_ctx())
    assert count() == before + 2
