"""Test helpers shared by several test modules (the fake API server is tests/fake_kube.py)."""
from __future__ import annotations

import copy

# One builder for hook request bodies, shared with the fixture generators: the shapes Metacontroller sends.
from tests.fixtures.envelope import controller_object, hook_request  # noqa: F401


def apply_decorator_response(obj: dict, response: dict) -> dict:
    """What Metacontroller does with a decorator response to the parent (labels,
    annotations merged, null removes; status replaced when not null)."""
    obj = copy.deepcopy(obj)
    meta = obj.setdefault("metadata", {})
    for key in ("labels", "annotations"):
        current = dict(meta.get(key) or {})
        for k, v in (response.get(key) or {}).items():
            if v is None:
                current.pop(k, None)
            else:
                current[k] = v
        meta[key] = current
    if response.get("status") is not None:
        obj["status"] = response["status"]
    return obj
