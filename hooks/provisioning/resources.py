"""Resources: an immutable vector of resource amounts in whole units (pure).

CPU is counted in millicores and every other resource in whole units
(bytes, pods, devices), each rounded up from the quantity, so sums and
comparisons are exact integer arithmetic. ``fits`` is the scheduler's
innermost test: plain integer comparisons, the extended resources only when
there are any.
"""
from __future__ import annotations

import decimal
import functools
import math
from typing import Any, Mapping, NamedTuple, Sequence

from lightkube.utils.quantity import parse_quantity

from hooks.contract import RequestError

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"
STANDARD = (CPU, MEMORY, EPHEMERAL_STORAGE, PODS)
MAX_QUANTITY_LENGTH = 64
MAX_RESOURCES = 64
_BINARY_SUFFIXES = (("Ei", 2 ** 60), ("Pi", 2 ** 50), ("Ti", 2 ** 40), ("Gi", 2 ** 30), ("Mi", 2 ** 20), ("Ki", 2 ** 10))


class Resources(NamedTuple):
    """Amounts: cpu in millicores, memory and ephemeral storage in bytes, pods, and the extended resources
    (``nvidia.com/gpu``, ``hugepages-2Mi``, ...) as sorted (name, amount) pairs without zeros."""

    cpu: int = 0
    memory: int = 0
    ephemeral_storage: int = 0
    pods: int = 0
    extended: tuple[tuple[str, int], ...] = ()

    def __add__(self, other: Resources) -> Resources:  # type: ignore[override]
        return Resources(self.cpu + other.cpu, self.memory + other.memory,
                         self.ephemeral_storage + other.ephemeral_storage, self.pods + other.pods,
                         _combine(self.extended, other.extended, 1) if other.extended else self.extended)

    def __sub__(self, other: Resources) -> Resources:
        return Resources(self.cpu - other.cpu, self.memory - other.memory,
                         self.ephemeral_storage - other.ephemeral_storage, self.pods - other.pods,
                         _combine(self.extended, other.extended, -1) if other.extended else self.extended)

    def times(self, count: int) -> Resources:
        return Resources(self.cpu * count, self.memory * count, self.ephemeral_storage * count, self.pods * count,
                         tuple((name, amount * count) for name, amount in self.extended) if count else ())

    def maximum(self, other: Resources) -> Resources:
        """Per resource, the larger amount."""
        extended = dict(self.extended)
        for name, amount in other.extended:
            extended[name] = max(extended.get(name, 0), amount)
        return Resources(max(self.cpu, other.cpu), max(self.memory, other.memory),
                         max(self.ephemeral_storage, other.ephemeral_storage), max(self.pods, other.pods),
                         tuple(sorted((n, a) for n, a in extended.items() if a)))

    def minimum(self, other: Resources) -> Resources:
        """Per resource, the smaller amount (an extended resource only one side has is absent)."""
        theirs = dict(other.extended)
        return Resources(min(self.cpu, other.cpu), min(self.memory, other.memory),
                         min(self.ephemeral_storage, other.ephemeral_storage), min(self.pods, other.pods),
                         tuple((n, min(a, theirs[n])) for n, a in self.extended if n in theirs and min(a, theirs[n])))

    def with_extended_of(self, other: Resources) -> Resources:
        """These amounts, with each extended resource they lack (or have none of) at ``other``'s amount."""
        mine = dict(self.extended)
        missing = [(n, a) for n, a in other.extended if n not in mine]
        if not missing:
            return self
        return self._replace(extended=tuple(sorted(self.extended + tuple(missing))))

    def fits(self, room: Resources) -> bool:
        """Whether these amounts fit in ``room``: no resource asks for more than room has."""
        if (self.cpu > room.cpu or self.memory > room.memory or self.pods > room.pods
                or self.ephemeral_storage > room.ephemeral_storage):
            return False
        if self.extended:
            have = dict(room.extended)
            for name, amount in self.extended:
                if amount > have.get(name, 0):
                    return False
        return True

    def copies_in(self, room: Resources) -> int | float:
        """How many copies of these amounts fit in ``room`` together (math.inf when they ask for nothing)."""
        count: int | float = math.inf
        for need, have in ((self.cpu, room.cpu), (self.memory, room.memory), (self.pods, room.pods),
                           (self.ephemeral_storage, room.ephemeral_storage)):
            if need > 0:
                count = min(count, max(0, have) // need)
        if self.extended:
            available = dict(room.extended)
            for name, amount in self.extended:
                count = min(count, max(0, available.get(name, 0)) // amount)
        return count

    def get(self, name: str) -> int:
        """The amount of a resource by its Kubernetes name."""
        if name == CPU:
            return self.cpu
        if name == MEMORY:
            return self.memory
        if name == EPHEMERAL_STORAGE:
            return self.ephemeral_storage
        if name == PODS:
            return self.pods
        return dict(self.extended).get(name, 0)

    def to_quantities(self) -> dict[str, str]:
        """Kubernetes quantities: cpu and memory always, the others when not zero."""
        out = {CPU: _cpu_quantity(self.cpu), MEMORY: _byte_quantity(self.memory)}
        if self.ephemeral_storage:
            out[EPHEMERAL_STORAGE] = _byte_quantity(self.ephemeral_storage)
        if self.pods:
            out[PODS] = str(self.pods)
        for name, amount in self.extended:
            out[name] = _byte_quantity(amount) if name.startswith("hugepages-") else str(amount)
        return out


ZERO = Resources()
ONE_POD = Resources(pods=1)


def least(amounts: Sequence[Resources]) -> Resources:
    """Per resource the smallest of ``amounts`` (``minimum`` of them all; an extended resource one lacks is
    absent), ZERO for none: what fits in it fits in every one of them."""
    if not amounts:
        return ZERO
    extended: tuple = ()
    if all(a.extended for a in amounts):
        extended = functools.reduce(Resources.minimum, amounts).extended
    return Resources(min(a.cpu for a in amounts), min(a.memory for a in amounts),
                     min(a.ephemeral_storage for a in amounts), min(a.pods for a in amounts), extended)


def _combine(mine: tuple, theirs: tuple, sign: int) -> tuple:
    amounts = dict(mine)
    for name, amount in theirs:
        amounts[name] = amounts.get(name, 0) + sign * amount
    return tuple(sorted((n, a) for n, a in amounts.items() if a))


def _cpu_quantity(millicores: int) -> str:
    return str(millicores // 1000) if millicores % 1000 == 0 else f"{millicores}m"


def _byte_quantity(amount: int) -> str:
    for suffix, size in _BINARY_SUFFIXES:
        if amount and amount % size == 0:
            return f"{amount // size}{suffix}"
    return str(amount)


def quantity(value: Any, where: str, *, milli: bool = False) -> int:
    """One quantity in whole units (millicores when ``milli``), rounded up; RequestError when it is not one."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise RequestError(where, f"must be a quantity, got {type(value).__name__}")
    text = value if isinstance(value, str) else str(value)
    if len(text) > MAX_QUANTITY_LENGTH:
        raise RequestError(where, f"is not a quantity: {len(text)} characters long")
    try:
        whole = _whole(text, milli)
    except (ValueError, ArithmeticError, decimal.DecimalException) as exc:
        raise RequestError(where, f"is not a quantity ({exc})") from None
    if whole < 0:
        raise RequestError(where, f"must not be negative, got {text!r}")
    return whole


@functools.lru_cache(maxsize=4096)
def _whole(text: str, milli: bool) -> int:
    """The quantity rounded up to whole units. Remembered: a cluster's pods repeat a few quantities thousands
    of times, and parsing one is most of what reading a pod costs."""
    amount = parse_quantity(text)
    if amount is None or not amount.is_finite():
        raise ValueError(f"not a finite quantity: {text!r}")
    return math.ceil(amount * 1000) if milli else math.ceil(amount)


def parse(mapping: Mapping | None, where: str = "resources") -> Resources:
    """A resource mapping (``{"cpu": "500m", "memory": "1Gi"}``) as Resources; RequestError names a bad entry."""
    if mapping is None:
        return ZERO
    if not isinstance(mapping, dict) and not isinstance(mapping, Mapping):  # dict first: the common case, cheap
        raise RequestError(where, f"must be an object, got {type(mapping).__name__}")
    if len(mapping) > MAX_RESOURCES:
        raise RequestError(where, f"has more than {MAX_RESOURCES} resources")
    standard = dict.fromkeys(STANDARD, 0)
    extended = {}
    for name, value in mapping.items():
        if not isinstance(name, str) or not name or len(name) > 317:
            raise RequestError(where, f"has a resource name that is not a string of 1 to 317 characters: {name!r:.60}")
        amount = quantity(value, f"{where}.{name}", milli=name == CPU)
        if name in standard:
            standard[name] = amount
        elif amount:
            extended[name] = amount
    return Resources(standard[CPU], standard[MEMORY], standard[EPHEMERAL_STORAGE], standard[PODS],
                     tuple(sorted(extended.items())))
