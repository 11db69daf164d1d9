"""PodDisruptionBudgets: which pods an eviction would be refused for now (pure).

The eviction API refuses to evict a pod while a PodDisruptionBudget that
selects it (same namespace, its selector; an empty selector selects every
pod of the namespace, a missing one none) allows no disruption now
(``status.disruptionsAllowed`` below 1), or while its controller has not
judged its current generation yet (``status.observedGeneration`` behind
``metadata.generation``), and refuses outright a pod that more than one
budget selects.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from hooks.contract import RequestError
from hooks.fencing import selectors


def _mapping(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


class Budgets:
    """The budgets of a cluster, indexed by namespace; build once per call, ask per pod."""

    def __init__(self, budgets: Iterable[Any]):
        self._by_namespace: dict[str, list[tuple[str, dict, int]]] = {}
        for raw in budgets:
            meta, spec, status = (_mapping(_mapping(raw).get(k)) for k in ("metadata", "spec", "status"))
            namespace, name = meta.get("namespace"), meta.get("name")
            if not isinstance(namespace, str) or not isinstance(name, str):
                continue
            if spec.get("selector") is None:
                continue  # a missing selector selects no pod
            try:
                selector = selectors.validate(spec["selector"], "spec.selector")
            except RequestError:
                selector = {}  # unreadable: taken to select every pod, never none
            allowed, observed = status.get("disruptionsAllowed"), status.get("observedGeneration")
            generation = meta.get("generation") if isinstance(meta.get("generation"), int) else 0
            judged = isinstance(observed, int) and observed >= generation
            allowed = allowed if judged and isinstance(allowed, int) and not isinstance(allowed, bool) else 0
            self._by_namespace.setdefault(namespace, []).append((name, selector, allowed))

    def blocking(self, pod: Any) -> list[str]:
        """The budgets that keep ``pod`` from being evicted now, by name; empty when it may be."""
        meta = _mapping(_mapping(pod).get("metadata"))
        labels = {k: v for k, v in _mapping(meta.get("labels")).items() if isinstance(v, str)}
        namespace = meta.get("namespace") if isinstance(meta.get("namespace"), str) else "default"
        matching = [(name, allowed) for name, selector, allowed in self._by_namespace.get(namespace, ())
                    if selectors.matches(selector, labels)]
        if len(matching) > 1:
            return sorted(name for name, _ in matching)
        return [name for name, allowed in matching if allowed < 1]


def blocked(pods: Iterable[Mapping], budgets: Budgets) -> dict[str, list[str]]:
    """Each of ``pods`` an eviction would be refused for now ("namespace/name") -> the budgets in the way."""
    found = {}
    for pod in pods:
        names = budgets.blocking(pod)
        if names:
            meta = _mapping(pod.get("metadata"))
            found[f"{meta.get('namespace') or 'default'}/{meta.get('name')}"] = names
    return found
