"""The pods bound to Slots, indexed by namespace and label: which Slots hold the pods a selector matches (pure).

Topology spread and anti-affinity count the pods a selector matches on each
Slot. Walking every pod of every Slot for that costs as much for a pod that
matches nothing as for one that matches everything, and a large cluster
holds thousands of pods. Here the pods are grouped by namespace and labels
(a Deployment's replicas are one group), each group knows the Slots it is
on, and a selector looks only at the groups that carry a value its labels
require (``app In [web]``: the groups labelled app=web), or, when it
requires none, at those of its namespaces. Slots are told apart by name, as
the scheduler's Result names them.
"""
from __future__ import annotations

from typing import Iterable, Sequence

from hooks.provisioning.pods import PodSelector, Resident


class _Group:
    """Pods alike to every selector: one namespace, the same labels; how many on each Slot."""

    __slots__ = ("namespace", "labels", "slots")

    def __init__(self, namespace: str, labels):
        self.namespace, self.labels = namespace, labels
        self.slots: dict[str, int] = {}


class Residents:
    """The index of the pods on a set of Slots; build it with ``of``."""

    def __init__(self, groups: Sequence[_Group], anti_affinity: dict[str, tuple[PodSelector, ...]]):
        self.groups = tuple(groups)
        # Slot name -> the required anti-affinity of the pods on it (those Slots only).
        self.anti_affinity = anti_affinity
        self._by_label: dict[tuple[str, str], list[_Group]] = {}
        self._by_namespace: dict[str, list[_Group]] = {}
        for group in self.groups:
            self._by_namespace.setdefault(group.namespace, []).append(group)
            for item in group.labels.items():
                self._by_label.setdefault(item, []).append(group)
        self._found: dict[PodSelector, tuple[tuple[str, int], ...]] = {}

    @classmethod
    def of(cls, bound: Iterable[tuple[str, Sequence[Resident]]]) -> Residents:
        """The index of ``bound``: (Slot name, the pods on it) pairs."""
        groups: dict[tuple, _Group] = {}
        anti: dict[str, list[PodSelector]] = {}
        for name, residents in bound:
            for resident in residents:
                key = (resident.namespace, frozenset(resident.labels.items()))
                group = groups.get(key)
                if group is None:
                    group = groups[key] = _Group(resident.namespace, resident.labels)
                group.slots[name] = group.slots.get(name, 0) + 1
                if resident.anti_affinity:
                    found = anti.setdefault(name, [])
                    found.extend(s for s in resident.anti_affinity if s not in found)
        return cls(list(groups.values()), {name: tuple(found) for name, found in anti.items()})

    def _candidates(self, selector: PodSelector) -> Sequence[_Group]:
        """The groups that may match: those with a value the selector requires (by the key with the fewest),
        else those of its namespaces, else all."""
        best: Sequence[_Group] | None = None
        for key, rule in selector.selector.rules.items():
            if rule.complement or rule.absent:
                continue  # a pod without one of a few values may match: no narrowing by this key
            found = [g for value in rule.values for g in self._by_label.get((key, value), ())]
            if best is None or len(found) < len(best):
                best = found
        if best is None and selector.namespaces is not None:
            best = [g for namespace in selector.namespaces for g in self._by_namespace.get(namespace, ())]
        return self.groups if best is None else best

    def where(self, selector: PodSelector) -> tuple[tuple[str, int], ...]:
        """Per Slot name, how many of its pods the selector matches (Slots with none left out)."""
        found = self._found.get(selector)
        if found is None:
            counts: dict[str, int] = {}
            for group in self._candidates(selector):
                if selector.matches(group.namespace, group.labels):
                    for name, count in group.slots.items():
                        counts[name] = counts.get(name, 0) + count
            found = self._found[selector] = tuple(counts.items())
        return found
