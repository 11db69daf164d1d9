"""The node-selector algebra: every operator, intersection, compatibility, and its parsers."""
from __future__ import annotations

import pytest

from hooks import provisioning_names as names
from hooks.contract import RequestError
from hooks.provisioning import requirements as rq
from hooks.provisioning.requirements import Requirements, Rule

K = "example.com/key"


@pytest.mark.parametrize("operator, values, allowed, refused", [
    ("In", ["a", "b"], ["a", "b"], [None, "c"]),
    ("NotIn", ["a"], [None, "b"], ["a"]),
    ("Exists", [], ["a", ""], [None]),
    ("DoesNotExist", [], [None], ["a"]),
    ("Gt", ["4"], ["5", "100"], [None, "4", "3", "x", "4.5"]),
    ("Lt", ["4"], ["3", "-1"], [None, "4", "x"]),
])
def test_every_operator(operator, values, allowed, refused):
    reqs = rq.of([(K, operator, tuple(values))])
    for value in allowed:
        assert reqs.allows({} if value is None else {K: value}), value
    for value in refused:
        assert not reqs.allows({} if value is None else {K: value}), value


def test_keys_without_a_rule_allow_anything():
    assert rq.of([(K, "In", ("a",))]).allows({K: "a", "other": "x"})
    assert rq.EVERYTHING.allows({"any": "thing"})


@pytest.mark.parametrize("first, second, compatible", [
    (("In", ("a", "b")), ("In", ("b", "c")), True),
    (("In", ("a",)), ("In", ("b",)), False),
    (("In", ("a",)), ("NotIn", ("a",)), False),
    (("NotIn", ("a",)), ("NotIn", ("b",)), True),
    (("Exists", ()), ("DoesNotExist", ()), False),
    (("NotIn", ("a",)), ("DoesNotExist", ()), True),
    (("In", ("a",)), ("DoesNotExist", ()), False),
    (("Gt", ("4",)), ("Lt", ("6",)), True),
    (("Gt", ("4",)), ("Lt", ("5",)), False),
    (("Gt", ("4",)), ("Lt", ("6",)), True),
    (("In", ("2", "8")), ("Gt", ("4",)), True),
    (("In", ("2", "3")), ("Gt", ("4",)), False),
    (("Gt", ("4",)), ("NotIn", ("5",)), True),
])
def test_intersection(first, second, compatible):
    a, b = rq.of([(K, *first)]), rq.of([(K, *second)])
    assert a.compatible(b) is compatible
    assert b.compatible(a) is compatible
    assert a.intersect(b).satisfiable is compatible


def test_bounds_with_every_integer_excluded_are_empty():
    rule = Rule.of("Gt", ("4",)).intersect(Rule.of("Lt", ("7",))).intersect(Rule.of("NotIn", ("5", "6")))
    assert rule.empty
    assert not Rule.of("Gt", ("4",)).intersect(Rule.of("Lt", ("7",))).intersect(Rule.of("NotIn", ("5",))).empty


def test_intersection_meets_both():
    both = rq.of([(K, "In", ("2", "8", "x"))]).intersect(rq.of([(K, "Gt", ("4",)), ("b", "Exists", ())]))
    assert both.allows({K: "8", "b": "1"})
    assert not both.allows({K: "2", "b": "1"})
    assert not both.allows({K: "8"})
    assert not both.allows({K: "x", "b": "1"})


def test_requirements_are_values():
    assert rq.of([(K, "In", ("a", "b"))]) == rq.of([(K, "In", ("b", "a"))])
    assert len({rq.of([(K, "In", ("a",))]), rq.of([(K, "In", ("a",))])}) == 1


def test_a_pools_checked_requirements():
    # hooks.machines.spec reads and checks a pool's requirements; of() builds on its triples.
    built = rq.of([(K, "In", ("a", "b")), (K, "NotIn", ("b",)), ("n", "Gt", ("3",))])
    assert built.allows({K: "a", "n": "4"})
    assert not built.allows({K: "b", "n": "4"})


@pytest.mark.parametrize("term, field", [
    ({"matchExpressions": "x"}, "t.matchExpressions"),
    ({"matchExpressions": [{"key": K, "operator": "Near", "values": ["a"]}]}, "t.matchExpressions[0].operator"),
    ({"matchExpressions": [{"key": K, "operator": "In", "values": []}]}, "t.matchExpressions[0].values"),
    ({"matchExpressions": [{"key": K, "operator": "Exists", "values": ["a"]}]}, "t.matchExpressions[0].values"),
    ({"matchExpressions": [{"key": K, "operator": "Gt", "values": ["a"]}]}, "t.matchExpressions[0].values"),
    ({"matchExpressions": [{"key": K, "operator": "Lt", "values": ["1", "2"]}]}, "t.matchExpressions[0].values"),
    ({"matchExpressions": [{"key": "", "operator": "Exists"}]}, "t.matchExpressions[0].key"),
    ({"matchExpressions": [{"key": K, "operator": "In", "values": [3]}]}, "t.matchExpressions[0].values[0]"),
    ({"matchExpressions": [{"key": K, "operator": "Exists"}] * 101}, "t.matchExpressions"),
    ({"matchFields": [{"key": "metadata.name", "operator": "Exists"}]}, "t.matchFields[0].operator"),
])
def test_a_bad_term_names_its_field(term, field):
    with pytest.raises(RequestError) as caught:
        rq.from_node_selector_term(term, "t")
    assert caught.value.field == field


def test_node_selector_term_with_match_fields_is_the_hostname():
    term = rq.from_node_selector_term({"matchExpressions": [{"key": K, "operator": "Exists"}],
                                       "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
                                      "t")
    assert term.allows({K: "x", names.HOSTNAME_LABEL: "n1"})
    assert not term.allows({K: "x", names.HOSTNAME_LABEL: "n2"})
    assert rq.from_node_selector_term({}, "t") is None
    with pytest.raises(RequestError):
        rq.from_node_selector_term({"matchFields": [{"key": "spec.x", "operator": "In", "values": ["a"]}]}, "t")


def test_label_selector():
    selector = rq.from_label_selector({"matchLabels": {"app": "web"},
                                       "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["db"]}]},
                                      "s")
    assert selector.allows({"app": "web"}) and selector.allows({"app": "web", "tier": "fe"})
    assert not selector.allows({"app": "web", "tier": "db"})
    assert rq.from_label_selector({}, "s") == rq.EVERYTHING
    assert rq.from_label_selector(None, "s") is None
    with pytest.raises(RequestError):
        rq.from_label_selector({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}, "s")


def test_describe():
    assert Requirements({K: Rule.of("In", ("b", "a"))}).describe() == f"{K} In [a, b]"
    assert Rule.of("Gt", ("3",)).describe("n") == "n Exists, n Gt 3"


def test_rules_over_labels_that_may_take_several_values():
    varying = {names.ZONE_LABEL: frozenset({"a", "b"}), names.INSTANCE_GPU_COUNT_LABEL: frozenset({"1", None})}
    labels = {names.ARCH_LABEL: "amd64"}

    def every(*items) -> bool:
        return rq.of(items).allows_every(labels, varying)

    def some(*items) -> bool:
        return rq.of(items).may_allow(labels, varying)

    assert every((names.ZONE_LABEL, "In", ("a", "b")), (names.ARCH_LABEL, "In", ("amd64",)))
    assert not every((names.ZONE_LABEL, "In", ("a",))) and some((names.ZONE_LABEL, "In", ("a",)))
    assert not every((names.ZONE_LABEL, "NotIn", ("a",))) and some((names.ZONE_LABEL, "NotIn", ("a",)))
    assert every((names.ZONE_LABEL, "NotIn", ("c",)))
    assert not every((names.INSTANCE_GPU_COUNT_LABEL, "Exists", ())), "one of them has no GPU label"
    assert not some((names.ZONE_LABEL, "In", ("c",))) and not some((names.ARCH_LABEL, "In", ("arm64",)))
