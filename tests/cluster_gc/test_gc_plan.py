"""hooks.teardown.plan: one verdict per resource, the plan's order and reasons, and finalize agreeing with it."""
from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given, settings, strategies as st

from hooks import teardown_names as names
from hooks.teardown import ownership
from hooks.teardown.plan import ASSOCIATED, UNASSOCIATED, GcPlan, plan_of, verdict
from hooks.teardown.scope import COLLECT, Scope
from hooks.teardown.targets import select_targets
from hooks.teardown.tasks import (CLASSIC_ELB, DEFAULT_TASKS, EC2_INSTANCE, EIP, ELBV2_LB, ENI, KIND_TASK, SG, TASK_ORDER,
                                  TG, VOL)

NOW = dt.datetime(2026, 11, 21, 12, 0, tzinfo=dt.timezone.utc)
OWNED = {"kubernetes.io/cluster/alpha": "owned"}
MACHINE = {**OWNED, "nodewarden.io/machine": "pool-a-x", "nodewarden.io/machine-uid": "u-1"}
CNI = {"cluster.k8s.amazonaws.com/name": "alpha", "node.k8s.amazonaws.com/instance_id": "i-1",
       "node.k8s.amazonaws.com/createdAt": "2026-11-21T10:00:00Z"}
SERVICE = {**OWNED, "kubernetes.io/service-name": "default/web"}
CAPA = {**OWNED, "sigs.k8s.io/cluster-api-provider-aws/cluster/alpha": "owned"}
EKS = {**OWNED, "aws:eks:cluster-name": "alpha"}
LBC = {"elbv2.k8s.aws/cluster": "alpha"}
SCOPE = Scope(COLLECT, "", "alpha", "us-east-1", DEFAULT_TASKS)


def res(kind, ident, tags, state=None):
    return {"kind": kind, "id": ident, "arn": "", "tags": dict(tags), "state": state}


@pytest.mark.parametrize("resource,reason", [
    (res(EC2_INSTANCE, "i-1", MACHINE, "running"), ""),
    (res(EC2_INSTANCE, "i-2", MACHINE, "stopped"), ""),
    (res(EC2_INSTANCE, "i-3", MACHINE, "shutting-down"), names.KEEP_IN_USE),
    (res(EC2_INSTANCE, "i-4", MACHINE, "terminated"), names.KEEP_GONE),
    (res(EC2_INSTANCE, "i-5", OWNED, "running"), names.KEEP_NOT_MADE_BY_CONTROLLER),
    (res(EC2_INSTANCE, "i-6", {**MACHINE, "kubernetes.io/cluster/alpha": "shared"}, "running"), names.KEEP_NOT_OWNED),
    (res(EC2_INSTANCE, "i-7", {**CAPA, "nodewarden.io/machine": "x", "nodewarden.io/machine-uid": "u"}, "running"),
     names.KEEP_CAPA),
    (res(EC2_INSTANCE, "i-8", {**EKS, "nodewarden.io/machine": "x", "nodewarden.io/machine-uid": "u"}, "running"),
     names.KEEP_EKS),
    (res(ENI, "eni-1", CNI, "available"), ""),
    (res(ENI, "eni-2", CNI, "in-use"), names.KEEP_IN_USE),
    (res(ENI, "eni-3", {**CNI, "node.k8s.amazonaws.com/createdAt": "2026-11-21T11:57:00Z"}, "available"),
     names.KEEP_RECENT),
    (res(ENI, "eni-4", {**CNI, "node.k8s.amazonaws.com/createdAt": "not a time"}, "available"), ""),
    (res(ENI, "eni-5", {**CNI, "cluster.k8s.amazonaws.com/name": "beta"}, "available"), names.KEEP_NOT_OWNED),
    (res(ENI, "eni-6", {"cluster.k8s.amazonaws.com/name": "alpha"}, "available"), names.KEEP_NOT_MADE_BY_CONTROLLER),
    (res(ENI, "eni-7", OWNED, "available"), names.KEEP_NOT_MADE_BY_CONTROLLER),
    (res(EIP, "eipalloc-1", OWNED, UNASSOCIATED), ""),
    (res(EIP, "eipalloc-2", OWNED, ASSOCIATED), names.KEEP_IN_USE),
    (res(EIP, "eipalloc-3", CAPA, UNASSOCIATED), names.KEEP_CAPA),
    (res(EIP, "eipalloc-4", EKS, UNASSOCIATED), names.KEEP_EKS),
    (res(EIP, "eipalloc-5", LBC, UNASSOCIATED), names.KEEP_LB_CONTROLLER_OFF),
    (res(EIP, "eipalloc-6", {"kubernetes.io/cluster/beta": "owned"}, UNASSOCIATED), names.KEEP_NOT_OWNED),
    (res(ELBV2_LB, "arn:lb", SERVICE), ""),
    (res(ELBV2_LB, "arn:lb-manual", OWNED), names.KEEP_NOT_MADE_BY_CONTROLLER),
    (res(TG, "arn:tg", LBC), names.KEEP_LB_CONTROLLER_OFF),
    (res(SG, "sg-1", OWNED), ""),
    (res(SG, "sg-2", CAPA), names.KEEP_CAPA),
    (res(VOL, "vol-1", {**OWNED, "CSIVolumeName": "pvc-1"}, "available"), names.KEEP_TASK_OFF),
])
def test_each_resource_gets_one_reason(resource, reason):
    assert verdict(SCOPE, resource, NOW).keep == reason


def test_the_lb_controllers_resources_are_collected_when_included():
    scope = Scope(COLLECT, "", "alpha", "us-east-1", DEFAULT_TASKS, include_lb_controller=True)
    for kind in (ELBV2_LB, TG, SG, EIP):
        judged = verdict(scope, res(kind, "x", LBC, UNASSOCIATED), NOW)
        assert (judged.keep, judged.made_by) == ("", ownership.LB_CONTROLLER)


def test_a_task_turned_off_is_said_after_who_made_it():
    scope = Scope(COLLECT, "", "alpha", "us-east-1", ("load-balancer",))
    assert verdict(scope, res(EC2_INSTANCE, "i-1", MACHINE, "running"), NOW).keep == names.KEEP_TASK_OFF
    # Not ours whatever the tasks: that is the reason given.
    assert verdict(scope, res(EIP, "e", CAPA, UNASSOCIATED), NOW).keep == names.KEEP_CAPA


def test_the_plan_deletes_in_task_order_then_kind_then_id_and_keeps_the_rest_with_reasons():
    resources = [
        res(SG, "sg-2", OWNED), res(SG, "sg-1", OWNED),
        res(EIP, "eipalloc-1", OWNED, UNASSOCIATED), res(EIP, "eipalloc-c", CAPA, UNASSOCIATED),
        res(ENI, "eni-1", CNI, "available"), res(ENI, "eni-2", CNI, "in-use"),
        res(TG, "arn:tg", SERVICE),
        res(CLASSIC_ELB, "web", SERVICE), res(ELBV2_LB, "arn:lb", SERVICE),
        res(EC2_INSTANCE, "i-1", MACHINE, "running"), res(EC2_INSTANCE, "i-u", OWNED, "running"),
        res(VOL, "vol-1", {**OWNED, "CSIVolumeName": "pvc-1"}, "available"),
    ]
    plan = plan_of(SCOPE, resources, NOW)
    assert isinstance(plan, GcPlan)
    assert [(r["kind"], r["id"]) for r in plan.delete] == [
        (EC2_INSTANCE, "i-1"), (CLASSIC_ELB, "web"), (ELBV2_LB, "arn:lb"), (TG, "arn:tg"), (ENI, "eni-1"),
        (EIP, "eipalloc-1"), (SG, "sg-1"), (SG, "sg-2")]
    assert [(r["id"], reason) for r, reason in plan.keep] == [
        ("i-u", names.KEEP_NOT_MADE_BY_CONTROLLER), ("eni-2", names.KEEP_IN_USE), ("eipalloc-c", names.KEEP_CAPA),
        ("vol-1", names.KEEP_TASK_OFF)]
    assert all(reason in names.KEEP_REASONS for _, reason in plan.keep)


def test_the_plan_changes_nothing_it_is_given():
    resources = [res(ENI, "eni-1", CNI, "available"), res(SG, "sg-1", OWNED)]
    before = [dict(r) for r in resources]
    plan_of(SCOPE, resources, NOW)
    assert resources == before


def test_cni_cooldown_counts_from_created_at():
    recent = {**CNI, "node.k8s.amazonaws.com/createdAt": "2026-11-21T11:55:01Z"}
    assert ownership.cni_recent(recent, NOW)
    assert not ownership.cni_recent({**CNI, "node.k8s.amazonaws.com/createdAt": "2026-11-21T11:55:00Z"}, NOW)
    assert not ownership.cni_recent({"cluster.k8s.amazonaws.com/name": "alpha"}, NOW)
    assert not ownership.cni_recent({**CNI, "node.k8s.amazonaws.com/createdAt": "2099-01-01T00:00:00Z"}, NOW)


def test_tagged_for_any_key_of_the_clusters_makers():
    for tags in (OWNED, {"kubernetes.io/cluster/alpha": "shared"}, LBC, {"cluster.k8s.amazonaws.com/name": "alpha"},
                 {"sigs.k8s.io/cluster-api-provider-aws/cluster/alpha": "owned"}, {"aws:eks:cluster-name": "alpha"}):
        assert ownership.tagged_for(tags, "alpha"), tags
    for tags in ({"kubernetes.io/cluster/beta": "owned"}, {"elbv2.k8s.aws/cluster": "beta"},
                 {"cluster.k8s.amazonaws.com/name": "alpha-2"}, {"team": "payments"}):
        assert not ownership.tagged_for(tags, "alpha"), tags


# ----------------------------------------------------- finalize and the plan never disagree

TAG_SETS = [OWNED, MACHINE, CNI, SERVICE, CAPA, EKS, LBC, {"kubernetes.io/cluster/alpha": "shared"},
            {**OWNED, "CSIVolumeName": "pvc"}, {**CNI, "node.k8s.amazonaws.com/createdAt": "2026-11-21T11:58:00Z"},
            {"kubernetes.io/cluster/beta": "owned"}]
STATES = [None, "available", "in-use", ASSOCIATED, UNASSOCIATED, "running", "shutting-down", "terminated"]

resources_strategy = st.lists(
    st.builds(lambda kind, i, tags, state: res(kind, f"{kind}-{i}", tags, state),
              st.sampled_from(sorted(KIND_TASK)), st.integers(0, 5), st.sampled_from(TAG_SETS),
              st.sampled_from(STATES)),
    max_size=12, unique_by=lambda r: r["id"])


@settings(max_examples=200, deadline=None)
@given(resources_strategy, st.sets(st.sampled_from(TASK_ORDER), min_size=1), st.booleans())
def test_finalize_targets_what_the_plan_deletes_or_waits_for(resources, tasks, include_lb_controller):
    scope = Scope(COLLECT, "", "alpha", "us-east-1", tuple(t for t in TASK_ORDER if t in tasks),
                  include_lb_controller)
    plan = plan_of(scope, resources, NOW)
    targets = select_targets(scope, {"resources": resources}, NOW)
    waited = [r for r, reason in plan.keep if reason in names.WAITED_FOR]
    assert [(t.kind, t.id) for t in targets if t.deletable] == [(r["kind"], r["id"]) for r in plan.delete]
    assert sorted((t.kind, t.id) for t in targets if not t.deletable) == sorted((r["kind"], r["id"]) for r in waited)
    assert len(plan.delete) + len(plan.keep) == len(resources)
