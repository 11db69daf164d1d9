"""The instance types provisioning may launch, with what each offers and costs where (pure).

An offering is an instance type in one zone at one capacity type. An
on-demand offering exists wherever EC2 offers the type; its price may be
unknown (a type missing from the price list is still offered, ranked after
every priced one). A spot offering exists only where a spot price is known:
a zone without spot price history has no spot capacity to rank. A type EC2
does not sell at a capacity type (its supported usage classes) has no
offering of it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from hooks import provisioning_names
from hooks.machines import capacity
from hooks.machines.spec import ON_DEMAND, SPOT
from hooks.provisioning import resources
from hooks.provisioning.resources import Resources


@dataclass(frozen=True)
class Offering:
    zone: str
    capacity_type: str
    price: float | None  # USD per hour; None: unknown
    available: bool = True


@dataclass(frozen=True)
class InstanceOption:
    name: str
    labels: Mapping[str, str]  # provisioning_names.instance_labels: the type's, not zone or capacity type
    capacity: Resources
    allocatable: Resources
    offerings: tuple[Offering, ...]
    # How many volumes of a CSI driver a Node of the type attaches: (driver, count) pairs; a driver not here
    # has no limit.
    volume_limits: tuple[tuple[str, int], ...] = ()


def _price(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


def options(type_facts: Mapping[str, dict], zone_offerings: Mapping[str, list[str]],
            prices: Mapping[str, Mapping]) -> list[InstanceOption]:
    """One InstanceOption per type that is offered somewhere and whose size is known, by name.

    ``type_facts``: type -> hooks.aws.instances.type_facts; ``zone_offerings``: type -> the zones EC2
    offers it in; ``prices``: {"on-demand": {type: usd}, "spot": {(type, zone): usd}}.
    """
    on_demand = prices.get(ON_DEMAND) or {}
    spot = prices.get(SPOT) or {}
    found = []
    for name in sorted(type_facts):
        facts = type_facts[name] or {}
        capacity_quantities, allocatable_quantities = capacity.resources(facts)
        zones = sorted(set(zone_offerings.get(name) or ()))
        if not capacity_quantities or not zones:
            continue
        usage = facts.get("supportedUsageClasses")
        sold = set(usage) if isinstance(usage, list) and usage else {ON_DEMAND, SPOT}
        offerings = []
        for zone in zones:
            if ON_DEMAND in sold:
                offerings.append(Offering(zone, ON_DEMAND, _price(on_demand.get(name))))
            spot_price = _price(spot.get((name, zone)))
            if SPOT in sold and spot_price is not None:
                offerings.append(Offering(zone, SPOT, spot_price))
        if not offerings:
            continue
        found.append(InstanceOption(
            name=name, labels=provisioning_names.instance_labels(name, facts),
            capacity=resources.parse(capacity_quantities, f"{name}.capacity"),
            allocatable=resources.parse(allocatable_quantities, f"{name}.allocatable"),
            offerings=tuple(offerings),
            volume_limits=((provisioning_names.EBS_CSI_DRIVER, capacity.ebs_volume_limit(facts)),)))
    return found


class _Memo:
    """The last catalog built, kept while its inputs are the very same objects and the prices equal.

    Building ~1,400 types costs ~80 ms, and EC2's answers are cached per process (hooks.aws.instance_catalog)
    as the same objects for hours: every round but the first reuses the catalog. The inputs are held, so
    their identities cannot be reused by other objects while the entry lives."""

    def __init__(self):
        self._entry: tuple = (None, (), [])  # (key, inputs held, catalog): replaced whole, never in part

    def options(self, type_facts: Mapping[str, dict], zone_offerings: Mapping[str, list[str]],
                prices: Mapping[str, Mapping]) -> list[InstanceOption]:
        key = (id(type_facts), id(zone_offerings),
               tuple(sorted((kind, tuple(sorted(table.items()))) for kind, table in prices.items())))
        entry = self._entry
        if entry[0] != key:
            entry = (key, (type_facts, zone_offerings), options(type_facts, zone_offerings, prices))
            self._entry = entry
        return entry[2]


MEMO = _Memo()
