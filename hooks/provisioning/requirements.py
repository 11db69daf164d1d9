"""Node-selector requirements as an algebra: per label key the values a Node may have (pure).

A label is either missing or has a value. ``Rule`` is what one key allows:
a set of values or its complement, optional integer bounds (Gt/Lt), and
whether the label may be missing. Every operator maps onto a Rule, and the
intersection of two Rules is again a Rule, so a pool's requirements, a
pod's node selector and one of its node-affinity terms combine into one
``Requirements`` whose emptiness says they cannot all hold. A pod label
selector (matchLabels, matchExpressions) is the same algebra over pod labels.
A pool's requirements come checked from hooks.machines.spec; a pod's terms
and selectors are checked here as they are read.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from hooks import provisioning_names
from hooks.contract import RequestError
from hooks.provisioning_names import DOES_NOT_EXIST, EXISTS, GT, IN, LT, NOT_IN, OPERATORS

SELECTOR_OPERATORS = (IN, NOT_IN, EXISTS, DOES_NOT_EXIST)
MAX_EXPRESSIONS = 100
MAX_VALUES = 1000
MAX_KEY_LENGTH = 317
MAX_VALUE_LENGTH = 63
# matchFields may name only this field: the Node's name, which its hostname label carries.
NODE_NAME_FIELD = "metadata.name"
_INT64 = 2 ** 63
# One requirement as written: (label key, operator, values), as hooks.machines.spec reads a pool's.
Requirement = tuple[str, str, tuple[str, ...]]


def _integer(value: str) -> int | None:
    try:
        number = int(value, 10)
    except (TypeError, ValueError):
        return None
    return number if -_INT64 <= number < _INT64 else None


@dataclass(frozen=True)
class Rule:
    """What one label key allows: the label missing (``absent``), or a value that is in ``values``
    (``complement`` False) or not in them (True), and when bounded an integer strictly between
    ``greater_than`` and ``less_than``."""

    values: frozenset = frozenset()
    complement: bool = True
    absent: bool = True
    greater_than: int | None = None
    less_than: int | None = None

    @staticmethod
    def of(operator: str, values: Iterable[str] = ()) -> Rule:
        values = frozenset(values)
        if operator == IN:
            return Rule(values, complement=False, absent=False)
        if operator == NOT_IN:
            return Rule(values, complement=True, absent=True)
        if operator == EXISTS:
            return Rule(complement=True, absent=False)
        if operator == DOES_NOT_EXIST:
            return Rule(complement=False, absent=True)
        bound = _integer(next(iter(values))) if len(values) == 1 else None
        if bound is None or operator not in (GT, LT):
            raise ValueError(f"not a requirement: {operator} {sorted(values)}")
        if operator == GT:
            return Rule(complement=True, absent=False, greater_than=bound)
        return Rule(complement=True, absent=False, less_than=bound)

    def _in_bounds(self, value: str) -> bool:
        number = _integer(value)
        if number is None:
            return False
        return ((self.greater_than is None or number > self.greater_than)
                and (self.less_than is None or number < self.less_than))

    def allows(self, value: str | None) -> bool:
        """Whether a Node whose label has ``value`` (None: missing) meets the rule."""
        if value is None:
            return self.absent
        if (value in self.values) == self.complement:
            return False
        return (self.greater_than is None and self.less_than is None) or self._in_bounds(value)

    def allows_some_value(self) -> bool:
        if not self.complement:
            return bool(self.values)  # bounds are folded into the values of a plain set
        if self.greater_than is None or self.less_than is None:
            return True
        between = self.less_than - self.greater_than - 1
        excluded = sum(1 for v in self.values if self._in_bounds(v))
        return between - excluded > 0

    @property
    def empty(self) -> bool:
        """Nothing meets it: not even a missing label."""
        return not self.absent and not self.allows_some_value()

    def intersect(self, other: Rule) -> Rule:
        if self == other:
            return self
        if not self.complement and not other.complement:
            values, complement = self.values & other.values, False
        elif not self.complement:
            values, complement = self.values - other.values, False
        elif not other.complement:
            values, complement = other.values - self.values, False
        else:
            values, complement = self.values | other.values, True
        greater = max((b for b in (self.greater_than, other.greater_than) if b is not None), default=None)
        less = min((b for b in (self.less_than, other.less_than) if b is not None), default=None)
        rule = Rule(values, complement, self.absent and other.absent, greater, less)
        if not complement and (greater is not None or less is not None):
            rule = Rule(frozenset(v for v in values if rule._in_bounds(v)), False, rule.absent)
        return rule

    def describe(self, key: str) -> str:
        """The rule in the words of the operators, for messages."""
        parts = []
        if not self.complement:
            parts.append(f"{key} In [{', '.join(sorted(self.values))}]" if self.values else f"{key} DoesNotExist")
            if self.values and self.absent:
                parts.append("or missing")
            return " ".join(parts)
        if not self.absent:
            parts.append(f"{key} Exists")
        if self.values:
            parts.append(f"{key} NotIn [{', '.join(sorted(self.values))}]")
        if self.greater_than is not None:
            parts.append(f"{key} Gt {self.greater_than}")
        if self.less_than is not None:
            parts.append(f"{key} Lt {self.less_than}")
        return ", ".join(parts) or f"{key} any"


ANY = Rule()
MISSING = Rule.of(DOES_NOT_EXIST)


class Requirements:
    """Rules by label key; a key without a rule allows anything. Immutable and hashable."""

    __slots__ = ("rules", "_hash")

    def __init__(self, rules: Mapping[str, Rule] | None = None):
        self.rules: dict[str, Rule] = dict(sorted((rules or {}).items()))
        self._hash = hash(tuple(self.rules.items()))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Requirements) and self._hash == other._hash and self.rules == other.rules

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"Requirements({self.describe()})"

    def __bool__(self) -> bool:
        return bool(self.rules)

    def get(self, key: str) -> Rule | None:
        return self.rules.get(key)

    @property
    def satisfiable(self) -> bool:
        """Whether some set of labels meets every rule."""
        return not any(rule.empty for rule in self.rules.values())

    def intersect(self, other: Requirements) -> Requirements:
        """Both at once."""
        if not other.rules or other is self:
            return self
        if not self.rules:
            return other
        rules = dict(self.rules)
        for key, rule in other.rules.items():
            mine = rules.get(key)
            rules[key] = rule if mine is None else mine.intersect(rule)
        return Requirements(rules)

    def compatible(self, other: Requirements) -> bool:
        """Whether some Node could meet both."""
        small, large = (self, other) if len(self.rules) <= len(other.rules) else (other, self)
        for key, rule in small.rules.items():
            theirs = large.rules.get(key)
            if theirs is not None and rule.intersect(theirs).empty:
                return False
        return self.satisfiable and other.satisfiable

    def allows(self, labels: Mapping[str, str]) -> bool:
        """Whether a Node (or pod) with exactly these labels meets every rule."""
        for key, rule in self.rules.items():
            if not rule.allows(labels.get(key)):
                return False
        return True

    def allows_every(self, labels: Mapping[str, str], varying: Mapping[str, frozenset]) -> bool:
        """Whether every Node that has ``labels`` and, for each key of ``varying``, any of its values (None:
        the label missing) meets every rule: each rule must hold for each value its key may take."""
        return self._allows_over(labels, varying, all)

    def may_allow(self, labels: Mapping[str, str], varying: Mapping[str, frozenset]) -> bool:
        """Whether one of those Nodes may meet every rule: each rule holds for some value its key may take
        (each key on its own, so it may answer yes where no single Node does)."""
        return self._allows_over(labels, varying, any)

    def _allows_over(self, labels: Mapping[str, str], varying: Mapping[str, frozenset], quantifier) -> bool:
        for key, rule in self.rules.items():
            values = varying.get(key)
            if not (rule.allows(labels.get(key)) if values is None else quantifier(rule.allows(v) for v in values)):
                return False
        return True

    def only(self, keys: Iterable[str]) -> Requirements:
        """The rules on ``keys`` alone."""
        keys = set(keys)
        return Requirements({k: r for k, r in self.rules.items() if k in keys})

    def without(self, keys: Iterable[str]) -> Requirements:
        keys = set(keys)
        return Requirements({k: r for k, r in self.rules.items() if k not in keys})

    def describe(self) -> str:
        return "; ".join(rule.describe(key) for key, rule in self.rules.items())


EVERYTHING = Requirements()


def of(requirements: Iterable[Requirement]) -> Requirements:
    """Requirements from (key, operator, values) items already checked (hooks.machines.spec checks a pool's)."""
    rules: dict[str, Rule] = {}
    for key, operator, values in requirements:
        rule = Rule.of(operator, values)
        rules[key] = rules[key].intersect(rule) if key in rules else rule
    return Requirements(rules)


def _string(value: Any, where: str, maximum: int, *, empty: bool = False) -> str:
    if not isinstance(value, str) or (not value and not empty) or len(value) > maximum:
        raise RequestError(where, f"must be a {'' if empty else 'non-empty '}string of at most {maximum} characters")
    return value


def _expression(raw: Any, where: str, operators: tuple[str, ...]) -> Requirement:
    if not isinstance(raw, dict):
        raise RequestError(where, f"must be an object, got {type(raw).__name__}")
    key = _string(raw.get("key"), f"{where}.key", MAX_KEY_LENGTH)
    operator = raw.get("operator")
    if operator not in operators:
        raise RequestError(f"{where}.operator", f"must be one of {', '.join(operators)}, got {str(operator)[:40]!r}")
    values = raw.get("values")
    if values is None:
        values = []
    if not isinstance(values, list) or len(values) > MAX_VALUES:
        raise RequestError(f"{where}.values", f"must be a list of at most {MAX_VALUES} strings")
    values = tuple(_string(v, f"{where}.values[{i}]", MAX_VALUE_LENGTH, empty=True) for i, v in enumerate(values))
    if operator in (IN, NOT_IN) and not values:
        raise RequestError(f"{where}.values", f"must not be empty for {operator}")
    if operator in (EXISTS, DOES_NOT_EXIST) and values:
        raise RequestError(f"{where}.values", f"must be empty for {operator}")
    if operator in (GT, LT) and (len(values) != 1 or _integer(values[0]) is None):
        raise RequestError(f"{where}.values", f"must be exactly one integer for {operator}")
    return key, operator, values


def _expressions(raw: Any, where: str, operators: tuple[str, ...]) -> list[Requirement]:
    if raw is None:
        return []
    if not isinstance(raw, list) or len(raw) > MAX_EXPRESSIONS:
        raise RequestError(where, f"must be a list of at most {MAX_EXPRESSIONS} requirements")
    return [_expression(item, f"{where}[{i}]", operators) for i, item in enumerate(raw)]


def from_node_selector(selector: Any, where: str = "spec.nodeSelector") -> Requirements:
    """A pod's nodeSelector: each key In its one value."""
    if selector is None:
        return EVERYTHING
    if not isinstance(selector, dict) or len(selector) > MAX_EXPRESSIONS:
        raise RequestError(where, f"must be an object of at most {MAX_EXPRESSIONS} labels")
    return of((_string(k, where, MAX_KEY_LENGTH), IN, (_string(v, f"{where}.{k}", MAX_VALUE_LENGTH, empty=True),))
              for k, v in selector.items())


def from_node_selector_term(term: Any, where: str) -> Requirements | None:
    """One nodeSelectorTerm (its expressions ANDed); None for an empty term, which matches no Node."""
    if not isinstance(term, dict):
        raise RequestError(where, f"must be an object, got {type(term).__name__}")
    found = _expressions(term.get("matchExpressions"), f"{where}.matchExpressions", OPERATORS)
    for key, operator, values in _expressions(term.get("matchFields"), f"{where}.matchFields", (IN, NOT_IN)):
        if key != NODE_NAME_FIELD:
            raise RequestError(f"{where}.matchFields", f"may name only {NODE_NAME_FIELD}, got {key[:60]!r}")
        found.append((provisioning_names.HOSTNAME_LABEL, operator, values))
    return of(found) if found else None


def from_label_selector(selector: Any, where: str) -> Requirements | None:
    """A label selector over pod labels; None for a missing (null) selector, which selects nothing."""
    if selector is None:
        return None
    if not isinstance(selector, dict):
        raise RequestError(where, f"must be an object, got {type(selector).__name__}")
    labels = selector.get("matchLabels")
    found = list(from_node_selector(labels, f"{where}.matchLabels").rules.items()) if labels is not None else []
    rules: dict[str, Rule] = {}
    for key, rule in found:
        rules[key] = rule
    for key, operator, values in _expressions(selector.get("matchExpressions"), f"{where}.matchExpressions",
                                              SELECTOR_OPERATORS):
        rule = Rule.of(operator, values)
        rules[key] = rules[key].intersect(rule) if key in rules else rule
    return Requirements(rules)
