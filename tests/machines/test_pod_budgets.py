"""Which pods a PodDisruptionBudget keeps from being evicted now, as the eviction API judges it (pure)."""
from __future__ import annotations

from hooks.machines import pod_budgets


def budget(name: str, selector, allowed: int = 0, *, namespace: str = "shop", generation: int = 1,
           observed: int | None = 1) -> dict:
    status = {"disruptionsAllowed": allowed}
    if observed is not None:
        status["observedGeneration"] = observed
    spec = {} if selector is None else {"selector": selector}
    return {"metadata": {"name": name, "namespace": namespace, "generation": generation}, "spec": spec,
            "status": status}


def pod(name: str, labels: dict, namespace: str = "shop") -> dict:
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels}}


def test_a_budget_allowing_no_disruption_keeps_the_pods_it_selects_in_its_namespace_only():
    found = pod_budgets.Budgets([budget("db", {"matchLabels": {"app": "db"}})])
    assert found.blocking(pod("db-0", {"app": "db"})) == ["db"]
    assert found.blocking(pod("web-0", {"app": "web"})) == []
    assert found.blocking(pod("db-0", {"app": "db"}, namespace="other")) == []


def test_an_empty_selector_selects_every_pod_and_a_missing_one_none():
    assert pod_budgets.Budgets([budget("all", {})]).blocking(pod("x", {})) == ["all"]
    assert pod_budgets.Budgets([budget("none", None)]).blocking(pod("x", {})) == []


def test_a_pod_two_budgets_select_cannot_be_evicted_at_all():
    found = pod_budgets.Budgets([budget("a", {"matchLabels": {"app": "db"}}, 5), budget("b", {}, 5)])
    assert found.blocking(pod("db-0", {"app": "db"})) == ["a", "b"]


def test_a_budget_not_judged_since_it_changed_allows_nothing_and_an_unreadable_selector_selects_all():
    assert pod_budgets.Budgets([budget("new", {}, 3, generation=2, observed=1)]).blocking(pod("x", {})) == ["new"]
    assert pod_budgets.Budgets([budget("new", {}, 3, observed=None)]).blocking(pod("x", {})) == ["new"]
    assert pod_budgets.Budgets([budget("ok", {}, 3)]).blocking(pod("x", {})) == []
    odd = pod_budgets.Budgets([budget("odd", {"matchExpressions": "nope"})])
    assert odd.blocking(pod("x", {"app": "web"})) == ["odd"]


def test_blocked_names_each_pod_and_the_budgets_in_its_way():
    found = pod_budgets.Budgets([budget("db", {"matchLabels": {"app": "db"}})])
    assert pod_budgets.blocked([pod("db-0", {"app": "db"}), pod("web-0", {"app": "web"})], found) == \
        {"shop/db-0": ["db"]}
