"""hooks/aws/autoscaling.py against moto in server mode: where an instance belongs, Unhealthy, Standby and back.

moto takes EnterStandby below the group's minimum size where AWS refuses it (a ValidationError naming the
sizes): the refusal read from the group's sizes is moto's, the one AWS answers is injected through
botocore's before-call event with AWS's own words.
"""
from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from hooks.aws import autoscaling
from hooks.aws.clients import error_code
from tests.support.autoscaling_groups import lone_instance, make_group
from worlds.cluster_gc import Calls, Faults

pytestmark = pytest.mark.moto


@pytest.fixture
def ctx(aws, make_ctx):
    return make_ctx()


@pytest.fixture
def asg(ctx):
    return ctx.aws.client("autoscaling")


def _state(asg, instance_id: str) -> tuple:
    found = autoscaling.describe_instance(asg, instance_id)
    return (found["group"], found["lifecycleState"], found["health"]) if found else None


def _desired(asg, group: str) -> int:
    return autoscaling.describe_group(asg, group)["desired"]


def _count(ctx) -> Calls:
    """The Auto Scaling calls made from now on."""
    return Calls().attach(ctx.aws, services=("autoscaling",))


def test_an_instance_is_described_with_its_group_or_as_in_none(aws, asg):
    (member,) = make_group(asg, aws("ec2"), "web", 1)
    assert autoscaling.describe_instance(asg, member) == {"group": "web", "lifecycleState": "InService",
                                                          "health": "Healthy", "instanceId": member}
    assert autoscaling.describe_instance(asg, lone_instance(aws("ec2"))) is None


def test_a_group_is_described_with_its_sizes_and_instances(aws, asg):
    members = make_group(asg, aws("ec2"), "web", 2, min_size=1)
    group = autoscaling.describe_group(asg, "web")
    assert {k: group[k] for k in ("name", "min", "max", "desired")} == {"name": "web", "min": 1, "max": 10,
                                                                       "desired": 2}
    assert sorted(group["instances"], key=lambda i: i["instanceId"]) == [
        {"instanceId": i, "lifecycleState": "InService", "health": "Healthy"} for i in members]
    assert autoscaling.describe_group(asg, "none") is None


def test_an_instance_marked_unhealthy_is_marked_once(aws, ctx, asg):
    first, second = make_group(asg, aws("ec2"), "web", 2)
    assert autoscaling.set_unhealthy(asg, first) == autoscaling.DONE
    assert _state(asg, first) == ("web", "InService", "Unhealthy")
    assert _state(asg, second) == ("web", "InService", "Healthy")
    calls = _count(ctx)
    assert autoscaling.set_unhealthy(asg, first) == autoscaling.DONE
    assert calls.by_operation["SetInstanceHealth"] == 0, "Unhealthy already: not asked again"


def test_an_instance_no_group_holds_is_gone_for_every_step(aws, ctx, asg):
    make_group(asg, aws("ec2"), "web", 1)
    lone = lone_instance(aws("ec2"))
    calls = _count(ctx)
    assert autoscaling.set_unhealthy(asg, lone) == autoscaling.GONE
    assert autoscaling.enter_standby(asg, "web", lone) == autoscaling.GONE
    assert autoscaling.exit_standby(asg, "web", lone) == autoscaling.GONE
    assert set(calls.by_operation) == {"DescribeAutoScalingInstances"}, "nothing asked of a group not holding it"


def test_an_instance_of_another_group_is_gone_for_this_ones_steps(aws, asg):
    ec2 = aws("ec2")
    (web,) = make_group(asg, ec2, "web", 1)
    batch = make_group(asg, ec2, "batch", 2)[0]
    assert autoscaling.enter_standby(asg, "web", batch) == autoscaling.GONE
    assert _state(asg, batch) == ("batch", "InService", "Healthy") and _desired(asg, "batch") == 2
    assert _state(asg, web) == ("web", "InService", "Healthy")


def test_standby_leaves_the_desired_capacity_and_comes_back(aws, asg):
    first, _ = make_group(asg, aws("ec2"), "web", 2, min_size=1)
    assert autoscaling.enter_standby(asg, "web", first) == autoscaling.DONE
    assert _state(asg, first) == ("web", "Standby", "Healthy") and _desired(asg, "web") == 1
    assert autoscaling.enter_standby(asg, "web", first) == autoscaling.DONE, "in Standby already"
    assert _desired(asg, "web") == 1, "not taken out twice"
    assert autoscaling.exit_standby(asg, "web", first) == autoscaling.DONE
    assert _state(asg, first) == ("web", "InService", "Healthy") and _desired(asg, "web") == 2
    assert autoscaling.exit_standby(asg, "web", first) == autoscaling.DONE, "in service already"
    assert _desired(asg, "web") == 2, "not put back twice"


def test_a_replacement_from_standby_puts_the_instance_back_and_marks_it_unhealthy(aws, asg):
    first, _ = make_group(asg, aws("ec2"), "web", 2, min_size=1)
    autoscaling.enter_standby(asg, "web", first)
    assert autoscaling.replace_from_standby(asg, "web", first) == autoscaling.DONE
    lifecycle, health = _state(asg, first)[1:]
    assert lifecycle != "Standby" and health == "Unhealthy"
    assert _desired(asg, "web") == 2, "its place in the group's capacity back, for the replacement"
    assert autoscaling.replace_from_standby(asg, "web", first) == autoscaling.DONE, "done once"
    assert autoscaling.replace_from_standby(asg, "web", lone_instance(aws("ec2"))) == autoscaling.GONE


def test_standby_at_the_groups_minimum_size_is_refused_before_asking(aws, ctx, asg):
    (only,) = make_group(asg, aws("ec2"), "web", 1, min_size=1)
    calls = _count(ctx)
    with pytest.raises(autoscaling.StandbyRefused, match="minimum size") as refused:
        autoscaling.enter_standby(asg, "web", only)
    assert error_code(refused.value) == "StandbyRefused"
    assert calls.by_operation["EnterStandby"] == 0
    assert _state(asg, only) == ("web", "InService", "Healthy") and _desired(asg, "web") == 1


def test_standby_aws_refuses_for_the_minimum_size_is_a_refusal_too(aws, ctx, asg):
    first, _ = make_group(asg, aws("ec2"), "web", 2, min_size=1)
    # AWS's answer when the sizes changed between the read and the call.
    Faults().add("EnterStandby", "ValidationError", message=(
        "AutoScalingGroup web has min-size=2, max-size=10, and desired-size=2. To place into standby 1 instances, "
        "please update the AutoScalingGroup sizes appropriately.")).attach(ctx.aws, services=("autoscaling",))
    with pytest.raises(autoscaling.StandbyRefused, match="min-size=2"):
        autoscaling.enter_standby(asg, "web", first)
    assert _state(asg, first) == ("web", "InService", "Healthy")


def test_another_failure_of_a_step_is_raised_as_it_is(aws, ctx, asg):
    first, _ = make_group(asg, aws("ec2"), "web", 2, min_size=1)
    faults = Faults().add("EnterStandby", "ResourceContention", times=float("inf"))
    faults.add("SetInstanceHealth", "ResourceContention", times=float("inf")).attach(ctx.aws, services=("autoscaling",))
    for step in (lambda: autoscaling.enter_standby(asg, "web", first), lambda: autoscaling.set_unhealthy(asg, first)):
        with pytest.raises(ClientError) as failed:
            step()
        assert error_code(failed.value) == "ResourceContention"
    assert _state(asg, first) == ("web", "InService", "Healthy")
