"""A small in-memory Kubernetes API for the fencing tests that run without one.

Used only in moto/unit tests (the real API server is exercised by
tests/e2e/test_fencing.py). It keeps Nodes, Pods, VolumeAttachments, claims
and Events as dicts, applies JSON patches with their ``test`` ops, honours a
delete's uid precondition, and can be told to fail.
"""
from __future__ import annotations

import copy
import itertools

import jsonpatch
from lightkube.core.exceptions import ApiError

from hooks.kube.client import KubeUnavailable

_rv = itertools.count(100)


def _api_error(code: int, message: str) -> ApiError:
    import httpx2 as httpx

    request = httpx.Request("GET", "https://fake/")
    response = httpx.Response(code, json={"kind": "Status", "apiVersion": "v1", "code": code, "message": message,
                                          "status": "Failure"}, request=request)
    return ApiError(request=request, response=response)


class _Obj(dict):
    """A dict that also answers .to_dict() and attribute reads, like lightkube models."""

    def to_dict(self):
        return copy.deepcopy(dict(self))


class FakeKube:
    def __init__(self):
        self.nodes: dict[str, dict] = {}
        self.pods: dict[str, dict] = {}  # ns/name -> pod
        self.volume_attachments: dict[str, dict] = {}
        self.claims: dict[str, dict] = {}
        self.fencing_requests: list[dict] = []
        self.events: list[tuple[str, str, str]] = []  # (kind/name, reason, message)
        self.calls: list[tuple] = []
        self.unavailable = False
        self.objects: dict[tuple[str, str, str], dict] = {}  # (kind, namespace, name) -> any other object

    def add_object(self, obj: dict) -> None:
        """Any other object (FencingRequest, NodeFencingPolicy, AWSCluster) for fresh reads."""
        meta = obj["metadata"]
        self.objects[(obj["kind"], meta.get("namespace") or "", meta["name"])] = copy.deepcopy(obj)

    # -- setup ------------------------------------------------------------
    def add_node(self, node: dict) -> None:
        node = copy.deepcopy(node)
        node["metadata"]["resourceVersion"] = str(next(_rv))
        self.nodes[node["metadata"]["name"]] = node

    def add_pod(self, pod: dict) -> None:
        meta = pod["metadata"]
        self.pods[f"{meta['namespace']}/{meta['name']}"] = copy.deepcopy(pod)

    def put_fencing_request(self, fr: dict) -> None:
        """Store (or replace, by uid) a FencingRequest as the API server would have it."""
        self.fencing_requests = [f for f in self.fencing_requests if f["metadata"]["uid"] != fr["metadata"]["uid"]]
        self.fencing_requests.append(copy.deepcopy(fr))

    def taints(self, node: str) -> list[dict]:
        return self.nodes[node].get("spec", {}).get("taints") or []

    def reasons(self) -> list[str]:
        return [r for _, r, _ in self.events]

    # -- the verbs the hooks use --------------------------------------------
    def _check(self, *call):
        self.calls.append(call)
        if self.unavailable:
            raise KubeUnavailable("Kubernetes API unreachable (test)")

    def get(self, res, name, namespace=None):
        self._check("get", res.__name__, name)
        if res.__name__ == "Node":
            from lightkube.resources.core_v1 import Node

            if name not in self.nodes:
                raise _api_error(404, f'nodes "{name}" not found')
            return Node.from_dict(copy.deepcopy(self.nodes[name]))
        if res.__name__ == "PersistentVolumeClaim":
            key = f"{namespace}/{name}"
            if key not in self.claims:
                raise _api_error(404, f'persistentvolumeclaims "{name}" not found')
            return _Obj(self.claims[key])
        if res.__name__ == "FencingRequest":
            for fr in self.fencing_requests:
                if fr["metadata"]["name"] == name and fr["metadata"].get("namespace") == namespace:
                    return _Obj(copy.deepcopy(fr))
        key = (res.__name__, namespace or "", name)
        if key in self.objects:
            return _Obj(copy.deepcopy(self.objects[key]))
        raise _api_error(404, f'{res.__name__} "{name}" not found')

    def list(self, res, namespace=None, labels=None, fields=None):
        self._check("list", res.__name__, namespace, fields)
        if res.__name__ == "Pod":
            node = (fields or {}).get("spec.nodeName")
            return [_Obj(p) for p in self.pods.values() if node is None or p["spec"].get("nodeName") == node]
        if res.__name__ == "VolumeAttachment":
            return [_Obj(v) for v in self.volume_attachments.values()]
        if res.__name__ == "FencingRequest":
            return [_Obj(f) for f in self.fencing_requests]
        return [_Obj(copy.deepcopy(o)) for (kind, _, _), o in sorted(self.objects.items()) if kind == res.__name__]

    def json_patch(self, res, name, ops, namespace=None):
        ops = list(ops)
        self._check("json_patch", res.__name__, name, ops)
        assert res.__name__ == "Node"
        node = self.nodes[name]
        try:
            patched = jsonpatch.apply_patch(node, ops)
        except jsonpatch.JsonPatchTestFailed:
            raise _api_error(422, "the server rejected our request: test failed") from None
        patched["metadata"]["resourceVersion"] = str(next(_rv))
        self.nodes[name] = patched

    def merge_patch(self, res, name, patch, namespace=None):
        self._check("merge_patch", res.__name__, name, patch)
        raise AssertionError("FakeKube.merge_patch not supported")

    def delete(self, res, name, namespace=None, grace_period=None):
        self._check("delete", res.__name__, name, namespace)
        if res.__name__ == "VolumeAttachment":
            if name not in self.volume_attachments:
                raise _api_error(404, "not found")
            del self.volume_attachments[name]
            return
        raise AssertionError(f"FakeKube.delete of {res.__name__} not supported")

    def delete_with_options(self, res, name, options, namespace=None):
        self._check("delete_with_options", res.__name__, name, namespace, options)
        assert res.__name__ == "Pod" and options.get("gracePeriodSeconds") == 0
        key = f"{namespace}/{name}"
        if key not in self.pods:
            raise _api_error(404, f'pods "{name}" not found')
        uid = (options.get("preconditions") or {}).get("uid")
        if uid and self.pods[key]["metadata"].get("uid") != uid:
            raise _api_error(409, "Precondition failed: UID in precondition does not match")
        del self.pods[key]

    def create(self, obj, name=None, namespace=None):
        self._check("create", getattr(obj, "kind", type(obj).__name__), namespace)
        if getattr(obj, "kind", None) == "Event":
            ref = obj.involvedObject
            self.events.append((f"{ref.kind}/{ref.name}", obj.reason, obj.message))
            return obj
        raise AssertionError("FakeKube.create of this kind not supported")
