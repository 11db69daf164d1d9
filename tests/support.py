"""Test helpers shared by several test modules."""
from __future__ import annotations

import copy

# One builder for hook request bodies, shared with the fixture generators: the shapes Metacontroller sends.
from tests.fixtures.envelope import controller_object, hook_request  # noqa: F401


class RecordingKube:
    """Stands in for the Kubernetes API where a test has no API server.

    Used only in moto/unit tests of AWS behaviour; the real API server is
    exercised by tests/e2e. It records what the hooks asked for and can be
    told to fail, to prove failures are reported and retried.
    """

    def __init__(self, fail: bool = False):
        self.calls: list[tuple] = []
        self.fail = fail
        self.objects: dict[tuple[str, str, str], dict] = {}  # what get() answers

    def add_object(self, obj: dict) -> None:
        """An object the API server "has", for the hooks' fresh reads."""
        meta = obj["metadata"]
        self.objects[(obj["kind"], meta.get("namespace") or "", meta["name"])] = copy.deepcopy(obj)

    def _record(self, *call):
        self.calls.append(call)
        if self.fail:
            from hooks.kube.client import KubeUnavailable

            raise KubeUnavailable("Kubernetes API unreachable (test)")

    def create(self, obj, name=None, namespace=None):
        self._record("create", getattr(obj, "kind", type(obj).__name__), name, namespace, obj)

    def merge_patch(self, res, name, patch, namespace=None):
        self._record("merge_patch", res.__name__, name, patch)

    def json_patch(self, res, name, ops, namespace=None):
        self._record("json_patch", res.__name__, name, list(ops))

    def list(self, res, namespace=None, labels=None, fields=None):
        self._record("list", res.__name__, namespace, fields)
        return []

    def get(self, res, name, namespace=None):
        self._record("get", res.__name__, name)
        key = (res.__name__, namespace or "", name)
        if key not in self.objects:
            from fencing_support import _api_error

            raise _api_error(404, f'{res.__name__} "{name}" not found')
        obj = copy.deepcopy(self.objects[key])
        return res.from_dict(obj) if hasattr(res, "from_dict") else obj  # what lightkube answers

    def events(self) -> list[str]:
        return [c[4].reason for c in self.calls if c[0] == "create" and c[1] == "Event"]


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
