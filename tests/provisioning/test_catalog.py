"""The catalog: one option per offered type, sized by hooks.machines.capacity, with its offerings."""
from __future__ import annotations

from hooks import provisioning_names as names
from hooks.machines import capacity
from hooks.provisioning import catalog, resources
from tests.support.provisioning import facts


def test_options_carry_labels_sizes_and_offerings():
    found = catalog.options(
        {"m5.large": facts(2, 8), "c5.large": facts(2, 4), "gone.large": facts(2, 4), "odd.large": {"vcpus": None}},
        {"m5.large": ["us-east-1b", "us-east-1a"], "c5.large": ["us-east-1a"], "odd.large": ["us-east-1a"]},
        {"on-demand": {"m5.large": 0.096}, "spot": {("m5.large", "us-east-1a"): 0.03, ("c5.large", "us-east-1a"): "x"}})
    assert [o.name for o in found] == ["c5.large", "m5.large"]  # offered, with known sizes, by name
    c5, m5 = found
    assert m5.labels == names.instance_labels("m5.large", facts(2, 8))
    capacity_quantities, allocatable_quantities = capacity.resources(facts(2, 8))
    assert m5.capacity == resources.parse(capacity_quantities)
    assert m5.allocatable == resources.parse(allocatable_quantities)
    assert m5.offerings == (
        catalog.Offering("us-east-1a", "on-demand", 0.096), catalog.Offering("us-east-1a", "spot", 0.03),
        catalog.Offering("us-east-1b", "on-demand", 0.096))
    # No on-demand price: still offered, at an unknown price; an unreadable spot price: no spot offering.
    assert c5.offerings == (catalog.Offering("us-east-1a", "on-demand", None),)


def test_a_capacity_type_the_type_is_not_sold_at_is_not_offered():
    spot_only = {**facts(2, 8), "supportedUsageClasses": ["spot"]}
    on_demand_only = {**facts(2, 8), "supportedUsageClasses": ["on-demand"]}
    found = catalog.options({"a.large": spot_only, "b.large": on_demand_only, "c.large": spot_only},
                            {"a.large": ["z"], "b.large": ["z"], "c.large": ["z"]},
                            {"on-demand": {"a.large": 0.1, "b.large": 0.1}, "spot": {("a.large", "z"): 0.03,
                                                                                    ("b.large", "z"): 0.03}})
    # c.large: sold only as spot, with no spot price anywhere: nothing to offer.
    assert {o.name: o.offerings for o in found} == {
        "a.large": (catalog.Offering("z", "spot", 0.03),),
        "b.large": (catalog.Offering("z", "on-demand", 0.1),)}
