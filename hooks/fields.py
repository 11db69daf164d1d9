"""Typed reads from Kubernetes objects that name the field when it is wrong.

Controllers read the request only through these, so a request of the wrong
shape becomes a 400 naming the field, never a 500.
"""
from __future__ import annotations

from typing import Any, Mapping

from hooks.contract import RequestError

_MISSING = object()


def _walk(obj: Mapping, path: tuple[str, ...], where: str) -> Any:
    current: Any = obj
    walked = where
    for key in path:
        if current is None:
            return None
        if not isinstance(current, dict):
            raise RequestError(walked, f"must be an object, got {type(current).__name__}")
        current = current.get(key)
        walked = f"{walked}.{key}"
    return current


def _typed(obj: Mapping, path: tuple[str, ...], where: str, kind: type, label: str, default: Any) -> Any:
    value = _walk(obj, path, where)
    if value is None:
        return default
    if not isinstance(value, kind):
        raise RequestError(".".join((where,) + path), f"must be {label}, got {type(value).__name__}")
    return value


def string(obj: Mapping, *path: str, where: str = "parent", default: str | None = None) -> str | None:
    return _typed(obj, path, where, str, "a string", default)


def boolean(obj: Mapping, *path: str, where: str = "parent", default: bool = False) -> bool:
    return _typed(obj, path, where, bool, "a boolean", default)


def mapping(obj: Mapping, *path: str, where: str = "parent") -> dict:
    return dict(_typed(obj, path, where, dict, "an object", {}))


def objects(obj: Mapping, *path: str, where: str = "parent") -> list[dict]:
    """A list whose items must all be objects (taints, conditions, targets)."""
    items = _typed(obj, path, where, list, "a list", [])
    full = ".".join((where,) + path)
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise RequestError(f"{full}[{i}]", f"must be an object, got {type(item).__name__}")
    return items


def item_string(item: Mapping, key: str, where: str, default: str | None = None) -> str | None:
    value = item.get(key, default)
    if value is not None and not isinstance(value, str):
        raise RequestError(f"{where}.{key}", f"must be a string, got {type(value).__name__}")
    return value
