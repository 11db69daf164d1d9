"""The index of the pods on Slots: a selector finds, per Slot, exactly the pods it matches."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hooks import provisioning_names as names
from hooks.provisioning import pods, requirements
from hooks.provisioning.pods import PodSelector, Resident
from hooks.provisioning.residents import Residents
from hooks.provisioning.scheduling import residents_of, schedule
from tests.support.provisioning import node_slot, options, pod, pool

CATALOG = options()
APPS = ("web", "db", "cache")
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def _selector(labels: dict | None = None, expressions: list | None = None,
              namespaces: frozenset | None = frozenset(("default",))) -> PodSelector:
    raw = {"matchLabels": labels or {}, "matchExpressions": expressions or []}
    return PodSelector(requirements.from_label_selector(raw, "selector"), namespaces)


def test_pods_are_counted_per_slot_by_namespace_and_labels():
    index = Residents.of([
        ("n1", (Resident("default", {"app": "web"}),) * 2 + (Resident("other", {"app": "web"}),)),
        ("n2", (Resident("default", {"app": "web", "tier": "front"}), Resident("default", {"app": "db"}))),
    ])
    assert dict(index.where(_selector({"app": "web"}))) == {"n1": 2, "n2": 1}
    assert dict(index.where(_selector({"app": "web"}, namespaces=None))) == {"n1": 3, "n2": 1}
    assert dict(index.where(_selector({"app": "web"}, namespaces=frozenset(("other",))))) == {"n1": 1}
    assert dict(index.where(_selector(expressions=[{"key": "tier", "operator": "DoesNotExist"}]))) == {
        "n1": 2, "n2": 1}
    assert index.where(_selector({"app": "queue"})) == ()


def test_the_anti_affinity_of_the_pods_on_each_slot():
    keep_web = _selector({"app": "web"})
    index = Residents.of([("n1", (Resident("default", {"app": "db"}, (keep_web,)),) * 2),
                          ("n2", (Resident("default", {"app": "web"}),))])
    assert index.anti_affinity == {"n1": (keep_web,)}


def test_a_pod_in_another_namespace_is_not_counted_for_spread_or_anti_affinity():
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": names.HOSTNAME_LABEL, "labelSelector": {"matchLabels": {"app": "web"}}}]}}
    elsewhere = node_slot("n1", cpu="8", memory="32Gi", residents=(Resident("other", {"app": "web"}),))
    here = node_slot("n2", cpu="8", memory="32Gi", residents=(Resident("default", {"app": "web"}),))
    result = schedule([pod("web-1", labels={"app": "web"}, affinity=anti)], [pool()], [here, elsewhere], CATALOG)
    assert result.placed == {"default/web-1": "n1"}


def test_an_index_of_more_slots_than_a_call_counts_only_the_slots_given():
    """Consolidation indexes the pool's Nodes once and leaves the checked Machine's out of each call."""
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": names.HOSTNAME_LABEL, "labelSelector": {"matchLabels": {"app": "web"}}}]}}
    leaving = node_slot("n1", residents=(Resident("default", {"app": "web"}),))
    staying = node_slot("n2", cpu="8", memory="32Gi")
    index = residents_of([leaving, staying])
    moving = pod("web-1", labels={"app": "web"}, affinity=anti)
    assert schedule([moving], [], [staying], (), residents=index).placed == {"default/web-1": "n2"}


# --- against counting every pod


@st.composite
def _bound(draw) -> list[tuple[str, tuple[Resident, ...]]]:
    found = []
    for index in range(draw(st.integers(0, 4))):
        residents = []
        for _ in range(draw(st.integers(0, 5))):
            labels = {"app": draw(st.sampled_from(APPS))}
            if draw(st.booleans()):
                labels["tier"] = draw(st.sampled_from(("front", "back")))
            residents.append(Resident(draw(st.sampled_from(("default", "other"))), labels))
        found.append((f"n{index}", tuple(residents)))
    return found


@st.composite
def _selectors(draw) -> PodSelector:
    labels = {"app": draw(st.sampled_from(APPS))} if draw(st.booleans()) else {}
    expressions = []
    for _ in range(draw(st.integers(0, 2))):
        key, operator = draw(st.sampled_from(("app", "tier"))), draw(st.sampled_from(OPERATORS))
        values = draw(st.lists(st.sampled_from(APPS + ("front", "back")), min_size=1, max_size=2)) \
            if operator in ("In", "NotIn") else []
        expressions.append({"key": key, "operator": operator, "values": values})
    namespaces = draw(st.sampled_from((None, frozenset(("default",)), frozenset(("default", "other")))))
    return _selector(labels, expressions, namespaces)


@settings(max_examples=300, deadline=None)
@given(_bound(), st.lists(_selectors(), min_size=1, max_size=4))
def test_the_index_counts_what_matching_every_pod_counts(bound, selectors):
    index = Residents.of(bound)
    for selector in selectors:
        expected = {}
        for name, residents in bound:
            count = sum(1 for r in residents if selector.matches(r.namespace, r.labels))
            if count:
                expected[name] = count
        assert dict(index.where(selector)) == expected


def test_a_resident_read_from_a_pod_keeps_its_anti_affinity():
    raw = {"metadata": {"name": "db-0", "namespace": "default", "labels": {"app": "db"}},
           "spec": {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
               {"topologyKey": names.HOSTNAME_LABEL, "labelSelector": {"matchLabels": {"app": "db"}}}]}}}}
    index = Residents.of([("n1", (pods.resident(raw),))])
    assert index.anti_affinity["n1"][0].matches("default", {"app": "db"})
    assert dict(index.where(index.anti_affinity["n1"][0])) == {"n1": 1}
