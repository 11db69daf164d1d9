"""What Metacontroller v4 accepts as a hook response under `version: v2`, written out as a checker.

v4 decodes a v2 response with sigs.k8s.io/json's UnmarshalStrict into its
response types (read in its source, pkg/controller/*/api/v2/hooks.go and
pkg/apis/metacontroller/v1alpha1/types.go, release v4.17.2): an unknown or
duplicated field, a field in another letter case, or a value of the wrong
JSON type is an error and the whole response is rejected. Free-form parts
(status, the objects in children/attachments) are maps and only need to be
objects; an object in a list must name its ``kind`` (unstructured decoding
refuses one without).

    errors = check_response("decorator", "sync", reply_text)   # [] when v4 would accept it
"""
from __future__ import annotations

import json
from typing import Any

NUMBER, BOOL, STRING, OBJECT = "number", "boolean", "string", "object"

# Field -> expected JSON type, per response type (null is accepted for every field, as Go does).
DECORATOR = {"labels": "string-map", "annotations": "string-map", "status": OBJECT, "attachments": "objects",
             "resyncAfterSeconds": NUMBER, "finalized": BOOL}
COMPOSITE = {"status": OBJECT, "children": "objects", "resyncAfterSeconds": NUMBER, "finalized": BOOL}
CUSTOMIZE = {"relatedResources": "rules"}
RULE = {"apiVersion": STRING, "resource": STRING, "labelSelector": "selector", "namespaceSelector": "selector",
        "namespace": STRING, "names": "strings"}
SELECTOR = {"matchLabels": "plain-string-map", "matchExpressions": "expressions"}
EXPRESSION = {"key": STRING, "operator": STRING, "values": "strings"}


def _no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    duplicated = sorted({k for k in keys if keys.count(k) > 1})
    if duplicated:
        raise ValueError(f"duplicate field(s) {duplicated}")
    return dict(pairs)


def _type_ok(value: Any, expected: str) -> bool:
    return {NUMBER: isinstance(value, (int, float)) and not isinstance(value, bool),
            BOOL: isinstance(value, bool), STRING: isinstance(value, str), OBJECT: isinstance(value, dict)}[expected]


def _check(value: Any, expected: str | dict, path: str, errors: list[str]) -> None:
    if value is None:
        return
    if isinstance(expected, dict):
        if not isinstance(value, dict):
            errors.append(f"{path}: want an object, got {type(value).__name__}")
            return
        for key, item in value.items():
            if key not in expected:
                errors.append(f"{path}.{key}: unknown field")
            else:
                _check(item, expected[key], f"{path}.{key}", errors)
        return
    if expected in ("string-map", "plain-string-map"):
        if not isinstance(value, dict):
            errors.append(f"{path}: want an object of strings")
            return
        for key, item in value.items():
            if not isinstance(item, str) and not (item is None and expected == "string-map"):
                errors.append(f"{path}.{key}: want a string{' or null' if expected == 'string-map' else ''}")
        return
    if expected in ("objects", "rules", "strings", "expressions"):
        if not isinstance(value, list):
            errors.append(f"{path}: want a list, got {type(value).__name__}")
            return
        for i, item in enumerate(value):
            where = f"{path}[{i}]"
            if expected == "objects":
                if not isinstance(item, dict) or not isinstance(item.get("kind"), str) or not item["kind"]:
                    errors.append(f"{where}: an object must name its kind")
            elif expected == "strings":
                if not isinstance(item, str):
                    errors.append(f"{where}: want a string")
            else:
                _check(item, RULE if expected == "rules" else EXPRESSION, where, errors)
        return
    if expected == "selector":
        _check(value, SELECTOR, path, errors)
        return
    if not _type_ok(value, expected):
        errors.append(f"{path}: want a {expected}, got {type(value).__name__}")


def check_response(controller_kind: str, hook: str, text: str | bytes) -> list[str]:
    """Every reason v4's strict decoder would reject this response body; [] when it accepts it."""
    try:
        body = json.loads(text, object_pairs_hook=_no_duplicates)
    except ValueError as exc:
        return [f"not JSON v4 can decode: {exc}"]
    fields = CUSTOMIZE if hook == "customize" else {"decorator": DECORATOR, "composite": COMPOSITE}[controller_kind]
    errors: list[str] = []
    _check(body, fields, "response", errors)
    if not isinstance(body, dict):
        return errors or ["response: want an object"]
    return errors
