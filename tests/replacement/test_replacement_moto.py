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
