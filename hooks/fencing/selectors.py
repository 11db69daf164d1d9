"""Kubernetes label selectors (metav1.LabelSelector) matched against labels."""
from __future__ import annotations

from typing import Mapping

from hooks.contract import RequestError

_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def validate(selector, where: str) -> dict:
    """A checked copy of a LabelSelector; RequestError names what is wrong."""
    if selector is None:
        return {}
    if not isinstance(selector, Mapping):
        raise RequestError(where, f"must be a label selector object, got {type(selector).__name__}")
    labels = selector.get("matchLabels") or {}
    if not isinstance(labels, Mapping) or not all(isinstance(v, str) for v in labels.values()):
        raise RequestError(f"{where}.matchLabels", "must map label keys to string values")
    expressions = selector.get("matchExpressions") or []
    if not isinstance(expressions, list):
        raise RequestError(f"{where}.matchExpressions", "must be a list")
    checked = []
    for i, expr in enumerate(expressions):
        path = f"{where}.matchExpressions[{i}]"
        if not isinstance(expr, Mapping) or not isinstance(expr.get("key"), str):
            raise RequestError(path, "must be an object with a string key")
        op = expr.get("operator")
        if op not in _OPERATORS:
            raise RequestError(f"{path}.operator", f"must be one of {', '.join(_OPERATORS)}, got {op!r}")
        values = expr.get("values") or []
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise RequestError(f"{path}.values", "must be a list of strings")
        if op in ("In", "NotIn") and not values:
            raise RequestError(f"{path}.values", f"must not be empty for {op}")
        checked.append({"key": expr["key"], "operator": op, "values": list(values)})
    return {"matchLabels": dict(labels), "matchExpressions": checked}


def matches(selector: Mapping, labels: Mapping[str, str] | None) -> bool:
    """metav1.LabelSelector semantics: every term must hold; an empty selector matches all."""
    labels = labels or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
    return True


def to_query(selector: Mapping) -> str:
    """The selector as the API server's ``labelSelector`` parameter (an empty string selects everything).

    Label keys and values cannot hold the characters this syntax uses (``,=!()``
    and spaces), so nothing needs quoting; one that does anyway makes the API
    server refuse the list, which the caller reports.
    """
    terms = [f"{key}={value}" for key, value in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "Exists":
            terms.append(key)
        elif op == "DoesNotExist":
            terms.append(f"!{key}")
        else:
            terms.append(f"{key} {op.lower()} ({','.join(values)})")
    return ",".join(terms)
