"""Replacement of an unattributed node on moto: fencing-request end to end (real StopInstances,
DescribeInstances and TerminateInstances), the Kubernetes side a FakeKube."""
from __future__ import annotations

import pytest

from hooks import fencing_names, owner_names
from worlds.fencing import T0, RequestHarness, fmt, instance_state, launch, unready_node
from worlds.fake_kube import FakeKube

pytestmark = pytest.mark.moto

ENV = {"NODEWARDEN_FENCING_COUNT_MAX_AGE_SECONDS": "86400"}  # the test's clock walks past a real count's age


def _policy(holds: bool = False) -> dict:
    guard = {"type": fencing_names.STORM_GUARD, "status": "True" if holds else "False", "reason": "x",
             "lastTransitionTime": fmt(T0)}
    return {"apiVersion": fencing_names.API_VERSION, "kind": fencing_names.POLICY_KIND,
            "metadata": {"name": "workers", "uid": "uid-policy", "generation": 1},
            "spec": {"nodeSelector": {"matchLabels": {"pool": "workers"}}},
            "status": {"observedGeneration": 1, "countedAt": fmt(T0), "conditions": [guard],
                       "observedNodes": 3, "notReadyNodes": 1}}


def _fence(aws, make_ctx, unattributed: str, holds: bool = False):
    ec2 = aws("ec2")
    instance = launch(ec2)
    kube = FakeKube([_policy(holds)])
    kube.add_node(unready_node(instance))
    h = RequestHarness(make_ctx, kube, {"replacement": {"mode": "Owner", "unattributed": unattributed}}, env=ENV)
    h.run_until(lambda: h.status.get("phase") == fencing_names.SUCCEEDED)
    return ec2, instance, kube, h


def test_an_unattributed_node_is_terminated_when_the_policy_says_so(aws, make_ctx):
    ec2, instance, kube, h = _fence(aws, make_ctx, owner_names.UNATTRIBUTED_TERMINATE)
    h.run_until(lambda: (h.condition(owner_names.OWNER_REPLACEMENT) or {}).get("status") == "True")
    assert h.condition(owner_names.OWNER_REPLACEMENT)["reason"] == owner_names.INSTANCE_TERMINATED
    assert instance_state(ec2, instance) in ("shutting-down", "terminated")
    assert "OwnerReplacementRequested" in kube.reasons()


def test_an_unattributed_node_is_kept_powered_off_by_default(aws, make_ctx):
    ec2, instance, kube, h = _fence(aws, make_ctx, owner_names.UNATTRIBUTED_KEEP)
    h.run_until(lambda: h.condition(owner_names.OWNER_REPLACEMENT) is not None)
    assert h.condition(owner_names.OWNER_REPLACEMENT)["reason"] == owner_names.UNATTRIBUTED
    assert instance_state(ec2, instance) == "stopped"
    assert "NodeUnattributed" in kube.reasons()


def test_the_storm_guard_holds_a_termination(aws, make_ctx):
    ec2, instance, kube, h = _fence(aws, make_ctx, owner_names.UNATTRIBUTED_TERMINATE, holds=True)
    h.run_until(lambda: h.condition(owner_names.OWNER_REPLACEMENT) is not None)
    h.call(after=30)
    assert h.condition(owner_names.OWNER_REPLACEMENT)["reason"] == owner_names.HELD_STORM_GUARD
    assert h.status["replacement"]["heldReason"] == owner_names.HELD_STORM_GUARD
    assert instance_state(ec2, instance) == "stopped"


def test_a_group_instance_whose_tags_cannot_be_read_is_not_taken_for_unattributed(aws, make_ctx):
    """The instance's tags are the only hint of its Auto Scaling group: while DescribeInstances is throttled on
    the call that attributes the node, the request waits (reason Error) instead of concluding Unattributed and
    terminating the group's instance behind its back; once the tags are read, the group replaces it."""
    from tests.support.autoscaling_groups import make_group
    from worlds.cluster_gc import Faults
    from worlds.fencing import CLUSTER_TAG

    ec2 = aws("ec2")
    (instance,) = make_group(aws("autoscaling"), ec2, "workers-asg", 1)
    ec2.create_tags(Resources=[instance], Tags=[CLUSTER_TAG])
    kube = FakeKube([_policy()])
    kube.add_node(unready_node(instance))
    h = RequestHarness(make_ctx, kube, {"replacement": {"mode": "Owner",
                                                        "unattributed": owner_names.UNATTRIBUTED_TERMINATE}}, env=ENV)
    h.run_until(lambda: h.status.get("phase") == fencing_names.SUCCEEDED)

    faults = Faults().add("DescribeInstances", "RequestLimitExceeded", times=float("inf")).attach(h.ctx.aws,
                                                                                                  services=("ec2",))
    for _ in range(3):
        h.call(after=30)
    held = h.condition(owner_names.OWNER_REPLACEMENT)
    assert held is not None and held["reason"] == owner_names.ERROR, held
    assert "RequestLimitExceeded" in h.status["replacement"]["lastError"]
    assert faults.injected, "the attribution's read was refused"
    assert instance_state(ec2, instance) == "stopped"
    assert "NodeUnattributed" not in kube.reasons()

    faults.rules.clear()
    h.run_until(lambda: (h.condition(owner_names.OWNER_REPLACEMENT) or {}).get("status") == "True")
    assert h.condition(owner_names.OWNER_REPLACEMENT)["reason"] == owner_names.INSTANCE_MARKED_UNHEALTHY
    assert h.status["replacement"]["owner"]["kind"] == owner_names.OWNER_ASG


class _GroupReboot:
    """A Reboot of an Auto Scaling group's instance, whose first EnterStandby ends in a transport error: a read
    timeout after it landed (``landed``), or a connection that never reached AWS."""

    def __init__(self, aws, make_ctx, landed: bool):
        from botocore.exceptions import EndpointConnectionError, ReadTimeoutError

        from tests.support.autoscaling_groups import make_group
        from worlds.fencing import CLUSTER_TAG

        ec2, self.autoscaling = aws("ec2"), aws("autoscaling")
        (self.instance, _) = make_group(self.autoscaling, ec2, "workers-asg", 2)
        ec2.create_tags(Resources=[self.instance], Tags=[CLUSTER_TAG])
        self.kube = FakeKube([_policy()])
        self.kube.add_node(unready_node(self.instance))
        self.h = RequestHarness(make_ctx, self.kube, {"action": "Reboot", "replacement": {"mode": "Owner"}}, env=ENV)
        self.lost: list[str] = []
        endpoint = "https://autoscaling.us-east-1.amazonaws.com"

        def before(**_):
            if not landed and not self.lost:
                self.lost.append("never sent")
                raise EndpointConnectionError(endpoint_url=endpoint)

        def after(**_):
            if landed and not self.lost:
                self.lost.append("answer lost")
                raise ReadTimeoutError(endpoint_url=endpoint)

        client = self.h.ctx.aws.client("autoscaling", "us-east-1")
        client.meta.events.register("before-call.auto-scaling.EnterStandby", before)
        client.meta.events.register("after-call.auto-scaling.EnterStandby", after)

    def lifecycle(self) -> str:
        return self.autoscaling.describe_auto_scaling_instances(InstanceIds=[self.instance])[
            "AutoScalingInstances"][0]["LifecycleState"]


@pytest.mark.parametrize("landed", [True, False], ids=["answer lost", "never sent"])
def test_an_enter_standby_that_never_answered_is_not_taken_for_a_refusal(aws, make_ctx, landed):
    """A transport error on EnterStandby is "not now", never Auto Scaling's refusal: the instance is not powered
    off while InService for the group to destroy. The next call finds its own Standby, or asks again, and the
    reboot goes on with the instance in Standby."""
    from hooks import events

    reboot = _GroupReboot(aws, make_ctx, landed)
    h = reboot.h
    h.run_until(lambda: reboot.lost and (h.status.get("replacement") or {}).get("standby") ==
                owner_names.STANDBY_ENTERED)
    assert reboot.lifecycle() == "Standby"
    assert events.STANDBY_REFUSED not in reboot.kube.reasons()


def test_a_request_deleted_after_its_enter_standby_went_unanswered_leaves_the_standby(aws, make_ctx):
    """EnterStandby landed, its answer was lost, and the FencingRequest is deleted before the next sync records
    it: finalize reads the membership and takes the instance out of Standby before the finalizer goes."""
    reboot = _GroupReboot(aws, make_ctx, landed=True)
    h = reboot.h
    h.run_until(lambda: reboot.lost)
    assert reboot.lifecycle() == "Standby"
    assert (h.status.get("replacement") or {}).get("standbyGroup") == "workers-asg"
    assert not h.status["replacement"].get("standby"), "the answer was lost: nothing recorded"
    for _ in range(5):
        if h.call("finalize", after=5).get("finalized"):
            break
    assert h.responses[-1].get("finalized") is True
    assert reboot.lifecycle() == "InService"
    assert "InstanceStandbyExited" in reboot.kube.reasons()


def test_a_deleted_requests_unanswered_standby_that_cannot_be_read_holds_the_finalizer_until_the_timeout(
        aws, make_ctx):
    from worlds.cluster_gc import Faults

    reboot = _GroupReboot(aws, make_ctx, landed=True)
    h = reboot.h
    h.run_until(lambda: reboot.lost)
    Faults().add("DescribeAutoScalingInstances", "Throttling", times=float("inf")).attach(h.ctx.aws,
                                                                                         services=("autoscaling",))
    first = h.call("finalize", after=5)
    assert first.get("finalized") is False
    assert "could not be read" in h.status["replacement"]["lastError"]
    timeout = h.ctx.settings.replacement_timeout_seconds
    last = h.call("finalize", after=timeout + 1)
    assert last.get("finalized") is True, "every wait has its deadline"
    assert "OwnerReplacementAbandoned" in reboot.kube.reasons()
    assert reboot.lifecycle() == "Standby", "left where it is, and said so"
