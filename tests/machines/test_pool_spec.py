"""A NodePool's spec: static pools (replicas) as they always were, provisioning pools (no replicas) with their
weight, requirements, limits and consolidation, and the template hash of each (pure)."""
from __future__ import annotations

import copy

import pytest

from hooks import provisioning_names
from hooks.contract import RequestError
from hooks.machines import budgets, signals, spec
from tests.fixtures.make_machines import pool_obj

# The hash of make_machines.pool_obj()'s template as every release before provisioning pools computed it:
# the Machines of a static pool stay up to date across the upgrade.
STATIC_HASH = "5fc73a1438fa058f"


def _provisioning(**fields) -> dict:
    obj = pool_obj(None)
    obj["spec"].update(fields)
    return obj


def _refused(obj: dict) -> RequestError:
    with pytest.raises(RequestError) as info:
        spec.pool(obj)
    return info.value


def test_a_static_pool_reads_as_before():
    parsed = spec.pool(pool_obj(3))
    assert parsed.replicas == 3 and parsed.provisioning is None
    assert parsed.template_hash == STATIC_HASH
    assert parsed.template.instance_types == ("m5.large", "c5.large")


def test_a_static_pool_of_zero_is_still_static():
    parsed = spec.pool(pool_obj(0))
    assert parsed.replicas == 0 and parsed.provisioning is None


def test_a_static_pool_still_needs_instance_types():
    obj = pool_obj(1)
    del obj["spec"]["template"]["spec"]["instanceTypes"]
    assert _refused(obj).field == "parent.spec.template.spec.instanceTypes"


def test_a_pool_without_replicas_provisions_with_the_defaults():
    parsed = spec.pool(pool_obj(None))
    assert parsed.replicas is None
    assert parsed.provisioning == spec.ProvisioningSpec(
        weight=0, requirements=((provisioning_names.INSTANCE_TYPE_LABEL, "In", ("m5.large", "c5.large")),),
        limits=spec.PoolLimits(), consolidation_policy=spec.WHEN_EMPTY_OR_UNDERUTILIZED, consolidate_after=30.0)


def test_a_provisioning_pool_may_leave_the_instance_types_to_its_requirements():
    obj = _provisioning(requirements=[{"key": "nodewarden.io/instance-family", "operator": "In",
                                       "values": ["m7i", "c7i"]}])
    del obj["spec"]["template"]["spec"]["instanceTypes"]
    parsed = spec.pool(obj)
    assert parsed.template.instance_types == ()
    assert "instanceTypes" not in parsed.machine_spec
    assert parsed.provisioning.requirements == (("nodewarden.io/instance-family", "In", ("m7i", "c7i")),)


def test_instance_types_given_empty_are_refused_even_for_a_provisioning_pool():
    obj = pool_obj(None)
    obj["spec"]["template"]["spec"]["instanceTypes"] = []
    assert _refused(obj).field == "parent.spec.template.spec.instanceTypes"


def test_the_template_instance_types_are_an_in_requirement_before_the_written_ones():
    written = [{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]},
               {"key": "nodewarden.io/instance-cpu", "operator": "Gt", "values": ["3"]},
               {"key": "example.com/dedicated", "operator": "Exists"},
               {"key": "topology.kubernetes.io/zone", "operator": "NotIn", "values": ["us-east-1e", "us-east-1e"]}]
    parsed = spec.pool(_provisioning(requirements=written, weight=40))
    assert parsed.provisioning.weight == 40
    assert parsed.provisioning.requirements == (
        (provisioning_names.INSTANCE_TYPE_LABEL, "In", ("m5.large", "c5.large")),
        ("kubernetes.io/arch", "In", ("arm64",)),
        ("nodewarden.io/instance-cpu", "Gt", ("3",)),
        ("example.com/dedicated", "Exists", ()),
        ("topology.kubernetes.io/zone", "NotIn", ("us-east-1e",)),
    )


@pytest.mark.parametrize("requirement, where, why", [
    ({"key": "kubernetes.io/arch", "operator": "Within", "values": ["amd64"]}, "operator", "one of In, NotIn"),
    ({"key": "kubernetes.io/arch", "operator": "In"}, "values", "at least one value"),
    ({"key": "kubernetes.io/arch", "operator": "NotIn", "values": []}, "values", "at least one value"),
    ({"key": "example.com/gpu", "operator": "Exists", "values": ["yes"]}, "values", "takes no values"),
    ({"key": "example.com/gpu", "operator": "DoesNotExist", "values": ["yes"]}, "values", "takes no values"),
    ({"key": "nodewarden.io/instance-cpu", "operator": "Gt", "values": ["3", "4"]}, "values", "exactly one"),
    ({"key": "nodewarden.io/instance-cpu", "operator": "Lt", "values": ["four"]}, "values", "exactly one"),
    ({"key": "nodewarden.io/instance-cpu", "operator": "Lt"}, "values", "exactly one"),
    ({"key": "nodewarden.io/nodepool", "operator": "In", "values": ["other"]}, "key", "nodewarden.io/ domain"),
    ({"key": "nodewarden.io/machine", "operator": "Exists"}, "key", "nodewarden.io/capacity-type"),
    ({"key": "", "operator": "Exists"}, "key", "label key"),
    ({"key": "bad key!", "operator": "Exists"}, "key", "label key"),
    ({"key": "a/" + "b" * 316, "operator": "Exists"}, "key", "label key"),
    ({"operator": "Exists"}, "key", "label key"),
    ({"key": "kubernetes.io/arch", "operator": "In", "values": "amd64"}, "values", "list"),
    ({"key": "kubernetes.io/arch", "operator": "In", "values": ["x" * 64]}, "values[0]", "label value"),
    ({"key": "kubernetes.io/arch", "operator": "In", "values": [3]}, "values[0]", "label value"),
    ({"key": "kubernetes.io/arch", "operator": "In", "values": ["v"] * 101}, "values", "at most 100"),
    ({"key": "nodewarden.io/capacity-type", "operator": "In", "values": ["reserved"]}, "values", "on-demand, spot"),
])
def test_a_malformed_requirement_is_refused_by_name(requirement, where, why):
    error = _refused(_provisioning(requirements=[{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                                                 requirement]))
    assert error.field == f"parent.spec.requirements[1].{where}", error
    assert why in error.problem, error


def test_every_well_known_key_may_be_required_and_no_other_of_nodewardens():
    keys = [{"key": key, "operator": "Exists"} for key in provisioning_names.WELL_KNOWN]
    assert len(spec.pool(_provisioning(requirements=keys)).provisioning.requirements) == 1 + len(keys)


def test_more_requirements_than_the_bound_are_refused():
    many = [{"key": f"example.com/k{i}", "operator": "Exists"} for i in range(spec.MAX_REQUIREMENTS + 1)]
    assert _refused(_provisioning(requirements=many)).field == "parent.spec.requirements"
    assert _refused(_provisioning(requirements="all")).field == "parent.spec.requirements"


def test_limits_are_quantities_and_a_count():
    parsed = spec.pool(_provisioning(limits={"cpu": 1000, "memory": "4000Gi", "machines": 50}))
    assert parsed.provisioning.limits == spec.PoolLimits(cpu="1000", memory="4000Gi", machines=50)
    assert spec.pool(_provisioning(limits={"memory": "1.5Ti"})).provisioning.limits == spec.PoolLimits(memory="1.5Ti")


@pytest.mark.parametrize("limits, where", [
    ({"cpu": "lots"}, "cpu"), ({"cpu": "-4"}, "cpu"), ({"memory": True}, "memory"), ({"memory": 1.5}, "memory"),
    ({"memory": "1" * 65}, "memory"), ({"machines": -1}, "machines"), ({"machines": "5"}, "machines"),
    ({"machines": spec.MAX_POOL_MACHINES + 1}, "machines"),
])
def test_a_malformed_limit_is_refused_by_name(limits, where):
    assert _refused(_provisioning(limits=limits)).field == f"parent.spec.limits.{where}"


@pytest.mark.parametrize("weight", [-1, 101, "high", 1.5, True])
def test_a_weight_outside_0_to_100_is_refused(weight):
    assert _refused(_provisioning(weight=weight)).field == "parent.spec.weight"


@pytest.mark.parametrize("disruption, policy, after", [
    ({}, spec.WHEN_EMPTY_OR_UNDERUTILIZED, 30.0),
    ({"consolidationPolicy": "WhenEmpty", "consolidateAfter": "5m"}, spec.WHEN_EMPTY, 300.0),
    ({"consolidateAfter": "Never"}, spec.WHEN_EMPTY_OR_UNDERUTILIZED, None),
    ({"consolidateAfter": "0s"}, spec.WHEN_EMPTY_OR_UNDERUTILIZED, 0.0),
])
def test_consolidation_reads_its_policy_and_delay(disruption, policy, after):
    parsed = spec.pool(_provisioning(disruption=disruption)).provisioning
    assert (parsed.consolidation_policy, parsed.consolidate_after) == (policy, after)


@pytest.mark.parametrize("disruption, where", [
    ({"consolidationPolicy": "WhenIdle"}, "consolidationPolicy"),
    ({"consolidateAfter": "soon"}, "consolidateAfter"),
    ({"consolidateAfter": "-5m"}, "consolidateAfter"),
])
def test_a_malformed_consolidation_is_refused_by_name(disruption, where):
    assert _refused(_provisioning(disruption=disruption)).field == f"parent.spec.disruption.{where}"


def test_a_static_pool_reads_none_of_the_provisioning_fields():
    """They take effect once replicas is removed; until then nothing of them counts, not even a wrong value."""
    obj = pool_obj(2)
    obj["spec"].update(weight=7, requirements=[{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}],
                       limits={"machines": 3})
    parsed = spec.pool(obj)
    assert parsed.provisioning is None and parsed.template_hash == STATIC_HASH


def test_the_hash_covers_requirements_but_not_weight_limits_or_consolidation():
    base = spec.pool(_provisioning()).template_hash
    # None written: a static pool's hash, so turning one kind into the other drifts no Machine.
    assert base == STATIC_HASH
    arm = [{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]},
           {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1a", "us-east-1b"]}]
    with_arm = spec.pool(_provisioning(requirements=arm)).template_hash
    assert with_arm != base
    reordered = [dict(arm[1], values=["us-east-1b", "us-east-1a"]), arm[0]]
    assert spec.pool(_provisioning(requirements=reordered)).template_hash == with_arm
    others = _provisioning(requirements=copy.deepcopy(arm), weight=90, limits={"cpu": "8"},
                           disruption={"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"})
    assert spec.pool(others).template_hash == with_arm
    amd = [dict(arm[0], values=["amd64"]), arm[1]]
    assert spec.pool(_provisioning(requirements=amd)).template_hash != with_arm


def test_budgets_name_the_consolidation_reasons():
    rules = budgets.parse({"spec": {"disruption": {"budgets": [
        {"nodes": "0", "reasons": [signals.EMPTY, signals.UNDERUTILIZED]}]}}})
    assert rules[0].reasons == (signals.EMPTY, signals.UNDERUTILIZED)
    assert signals.EMPTY in signals.BUDGETED and signals.UNDERUTILIZED in signals.REASONS
