"""The one in-memory Kubernetes API for the tests and benchmarks that run without an API server.

Used only in unit and moto tests and benchmarks; the real API server is exercised by
tests/e2e. It keeps Nodes, Pods, VolumeAttachments, claims, FencingRequests
and any other object as dicts, applies JSON patches with their ``test`` ops
(one of the status subresource writes status alone, and is recorded as
``Kind/status``) and merge patches, honours a delete's uid precondition, answers 404 like an
API server (a plain-text one for a resource type it does not serve), records
every call and every Event report, and can be told to be unreachable.
"""
from __future__ import annotations

import copy
import itertools

import jsonpatch
from lightkube.core.exceptions import ApiError

from hooks.kube.client import KubeUnavailable

_rv = itertools.count(100)


def api_error(code: int, message: str) -> ApiError:
    import httpx2 as httpx

    request = httpx.Request("GET", "https://fake/")
    response = httpx.Response(code, json={"kind": "Status", "apiVersion": "v1", "code": code, "message": message,
                                          "status": "Failure"}, request=request)
    return ApiError(request=request, response=response)


def _no_such_type(kind: str):
    """The API server answers a plain-text 404 for a resource type it does not serve."""
    import httpx2 as httpx

    request = httpx.Request("GET", f"https://fake/apis/{kind}")
    response = httpx.Response(404, text="404 page not found", request=request)
    return httpx.HTTPStatusError("Client error '404 Not Found'", request=request, response=response)


class _Obj(dict):
    """A dict that also answers .to_dict(), like lightkube models."""

    def to_dict(self):
        return copy.deepcopy(dict(self))


def apply_merge_patch(target: dict, patch: dict) -> None:
    """RFC 7386 merge patch, in place."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            apply_merge_patch(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def _selected(query: str, labels: dict) -> bool:
    """A ``labelSelector`` query (the API server's syntax, as hooks/fencing/selectors.py writes it) on labels."""
    import re

    for term in re.findall(r"[^,(]+(?:\([^)]*\))?", query or ""):
        term = term.strip()
        sets = re.fullmatch(r"(\S+) (in|notin) \((.*)\)", term)
        if sets:
            key, op, values = sets.group(1), sets.group(2), sets.group(3).split(",")
            if (labels.get(key) in values if key in labels else False) != (op == "in"):
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif "=" in term:
            key, value = term.split("=", 1)
            if labels.get(key) != value:
                return False
        elif term not in labels:
            return False
    return True


def _matches(value, wanted) -> bool:
    """One selector term (lightkube's: a string, None for "exists", an iterable for "in", or an operator) on a
    value, None when the object has none."""
    op = getattr(wanted, "op_name", None)
    if op is None:
        if wanted is None:
            return value is not None
        if isinstance(wanted, str):
            return value == wanted
        return value in set(wanted)
    if op == "equal":
        return value == wanted.value
    if op == "not_equal":
        return value != wanted.value
    if op == "in_":
        return value in set(wanted.value)
    if op == "not_in":
        return value not in set(wanted.value)
    if op == "exists":
        return value is not None
    if op == "not_exists":
        return value is None
    raise AssertionError(f"FakeKube: selector operator {op} not supported")


def _labels_match(obj: dict, labels) -> bool:
    present = (obj.get("metadata") or {}).get("labels") or {}
    return all(_matches(present.get(key), wanted) for key, wanted in (labels or {}).items())


def _fields_match(obj: dict, fields) -> bool:
    """A field selector as the API server applies it: a field the object lacks reads as ""."""
    for path, wanted in (fields or {}).items():
        value = obj
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if not _matches("" if value is None else value, wanted):
            return False
    return True


def _kind(res) -> str:
    info = getattr(res, "_api_info", None)
    return info.resource.kind if info is not None else res.__name__


def _subresource(res) -> str:
    """The subresource a lightkube class stands for ("status" for ``Machine.Status``), "" for the object."""
    info = getattr(res, "_api_info", None)
    return (info.action or "") if info is not None else ""


class FakeKube:
    def __init__(self, objects: list[dict] | None = None, *, unavailable: bool = False,
                 without_crds: tuple[str, ...] = ()):
        self.nodes: dict[str, dict] = {}
        self.pods: dict[str, dict] = {}  # ns/name -> pod
        self.volume_attachments: dict[str, dict] = {}
        self.claims: dict[str, dict] = {}
        self.fencing_requests: list[dict] = []
        self.objects: dict[tuple[str, str, str], dict] = {}  # (kind, namespace, name) -> any other object
        self.events: list[tuple[str, str, str]] = []  # (kind/name, reason, message), each report
        self._event_names: dict[str, tuple[str, str, str]] = {}
        self.patches: list[tuple] = []  # merge patches of objects other than Events: (kind, namespace, name, patch)
        self.calls: list[tuple] = []
        self.unavailable = unavailable
        self.refused: set[tuple[str, str]] = set()  # (verb, kind) the API server answers with a 500
        self.without_crds = without_crds
        for obj in objects or []:
            self.add_object(obj)

    # -- setup ------------------------------------------------------------
    def add_object(self, obj: dict) -> None:
        """An object the API server "has"; Nodes, Pods and FencingRequests go where the verbs look for them."""
        kind = obj["kind"]
        if kind == "Node":
            return self.add_node(obj)
        if kind == "Pod":
            return self.add_pod(obj)
        if kind == "FencingRequest":
            return self.put_fencing_request(obj)
        meta = obj["metadata"]
        self.objects[(kind, meta.get("namespace") or "", meta["name"])] = copy.deepcopy(obj)

    def add_node(self, node: dict) -> None:
        node = copy.deepcopy(node)
        node["metadata"]["resourceVersion"] = str(next(_rv))
        self.nodes[node["metadata"]["name"]] = node

    def add_pod(self, pod: dict) -> None:
        meta = pod["metadata"]
        self.pods[f"{meta['namespace']}/{meta['name']}"] = copy.deepcopy(pod)

    def put_fencing_request(self, fr: dict) -> None:
        """Store (or replace, by uid) a FencingRequest as the API server would have it."""
        uid = fr["metadata"].get("uid")
        self.fencing_requests = [f for f in self.fencing_requests if f["metadata"].get("uid") != uid]
        self.fencing_requests.append(copy.deepcopy(fr))

    def taints(self, node: str) -> list[dict]:
        return self.nodes[node].get("spec", {}).get("taints") or []

    def reasons(self) -> list[str]:
        """The reason of every Event report, in order (an aggregated repeat counts again)."""
        return [r for _, r, _ in self.events]

    # -- the verbs the hooks use --------------------------------------------
    def _check(self, *call):
        self.calls.append(call)
        if self.unavailable:
            raise KubeUnavailable("Kubernetes API unreachable (test)")
        if call[:2] in self.refused:
            raise api_error(500, f"{call[0]} {call[1]} refused (test)")

    def get(self, res, name, namespace=None):
        kind = _kind(res)
        self._check("get", kind, name)
        if kind in self.without_crds:
            raise _no_such_type(kind)
        if kind == "Node":
            if name not in self.nodes:
                raise api_error(404, f'nodes "{name}" not found')
            node = copy.deepcopy(self.nodes[name])
            return res.from_dict(node) if hasattr(res, "from_dict") else _Obj(node)
        if kind == "Pod" and f"{namespace}/{name}" in self.pods:
            return _Obj(copy.deepcopy(self.pods[f"{namespace}/{name}"]))
        if kind == "PersistentVolumeClaim":
            key = f"{namespace}/{name}"
            if key not in self.claims:
                raise api_error(404, f'persistentvolumeclaims "{name}" not found')
            return _Obj(self.claims[key])
        if kind == "FencingRequest":
            for fr in self.fencing_requests:
                if fr["metadata"]["name"] == name and fr["metadata"].get("namespace") == namespace:
                    return _Obj(copy.deepcopy(fr))
        key = (kind, namespace or "", name)
        if key in self.objects:
            return _Obj(copy.deepcopy(self.objects[key]))
        raise api_error(404, f'{kind} "{name}" not found')

    def list(self, res, namespace=None, labels=None, fields=None):
        kind = _kind(res)
        self._check("list", kind, namespace, fields)
        if kind in self.without_crds:
            raise _no_such_type(kind)
        if kind == "Pod":
            return [_Obj(p) for p in self.pods.values() if _fields_match(p, fields) and _labels_match(p, labels)
                    and namespace in (None, "*", p["metadata"].get("namespace"))]
        if kind == "VolumeAttachment":
            return [_Obj(v) for v in self.volume_attachments.values()]
        if kind == "FencingRequest":
            return [_Obj(f) for f in self.fencing_requests]
        if kind == "Node":
            return [res.from_dict(copy.deepcopy(n)) if hasattr(res, "from_dict") else _Obj(n)
                    for n in self.nodes.values() if _labels_match(n, labels)]
        return [_Obj(copy.deepcopy(o)) for (k, ns, _), o in sorted(self.objects.items())
                if k == kind and namespace in (None, "*", ns) and _labels_match(o, labels) and _fields_match(o, fields)]

    def table(self, res, labels="", page_size=500):
        """Nodes as the API server prints them for ``kubectl get nodes``: Name and Status columns."""
        kind = _kind(res)
        self._check("table", kind, labels)
        assert kind == "Node", f"FakeKube.table of {kind} not supported"
        for node in sorted(self.nodes.values(), key=lambda n: n["metadata"]["name"]):
            if not _selected(labels, node["metadata"].get("labels") or {}):
                continue
            ready = next((c.get("status") for c in (node.get("status") or {}).get("conditions") or []
                          if c.get("type") == "Ready"), None)
            status = "Ready" if ready == "True" else "NotReady" if ready else "Unknown"
            if (node.get("spec") or {}).get("unschedulable"):
                status += ",SchedulingDisabled"
            yield {"Name": node["metadata"]["name"], "Status": status, "Roles": "<none>"}

    def json_patch(self, res, name, ops, namespace=None):
        ops = list(ops)
        sub = _subresource(res)
        self._check("json_patch", f"{_kind(res)}/{sub}" if sub else _kind(res), name, ops)
        if _kind(res) in self.without_crds:
            raise _no_such_type(_kind(res))
        key = (_kind(res), namespace or "", name)
        if _kind(res) != "Node" and key in self.objects:  # a custom resource (a Machine's annotations)
            try:
                patched = jsonpatch.apply_patch(self.objects[key], ops)
            except jsonpatch.JsonPatchTestFailed:
                raise api_error(422, "the server rejected our request: test failed") from None
            if sub == "status":  # the status subresource writes status alone, whatever else the patch says
                patched = {**copy.deepcopy(self.objects[key]), "status": patched.get("status")}
            patched["metadata"]["resourceVersion"] = str(next(_rv))
            self.objects[key] = patched
            return
        if _kind(res) != "Node" or name not in self.nodes:
            return  # recorded only: the test did not give the API server this object
        try:
            patched = jsonpatch.apply_patch(self.nodes[name], ops)
        except jsonpatch.JsonPatchTestFailed:
            raise api_error(422, "the server rejected our request: test failed") from None
        patched["metadata"]["resourceVersion"] = str(next(_rv))
        self.nodes[name] = patched

    def merge_patch(self, res, name, patch, namespace=None):
        kind = _kind(res)
        self._check("merge_patch", kind, name, patch)
        if kind == "Event":
            if name in self._event_names:
                # The recorder aggregates a repeated Event by bumping its count: one more report of it.
                self.events.append(self._event_names[name])
            return
        self.patches.append((kind, namespace, name, patch))
        if kind == "Node" and name in self.nodes:
            apply_merge_patch(self.nodes[name], patch)
        elif (kind, namespace or "", name) in self.objects:
            apply_merge_patch(self.objects[(kind, namespace or "", name)], patch)

    def delete(self, res, name, namespace=None, grace_period=None):
        self._check("delete", _kind(res), name, namespace)
        if _kind(res) == "VolumeAttachment":
            if name not in self.volume_attachments:
                raise api_error(404, "not found")
            del self.volume_attachments[name]
            return
        raise AssertionError(f"FakeKube.delete of {_kind(res)} not supported")

    def delete_with_options(self, res, name, options, namespace=None):
        kind = _kind(res)
        self._check("delete_with_options", kind, name, namespace, options)
        if kind in self.without_crds:
            raise _no_such_type(kind)
        if kind == "Pod":
            assert options.get("gracePeriodSeconds") == 0
            store, key = self.pods, f"{namespace}/{name}"
        elif kind == "Node":
            store, key = self.nodes, name
        else:
            store, key = self.objects, (kind, namespace or "", name)
        if key not in store:
            raise api_error(404, f'{kind} "{name}" not found')
        uid = (options.get("preconditions") or {}).get("uid")
        if uid and store[key]["metadata"].get("uid") != uid:
            raise api_error(409, "Precondition failed: UID in precondition does not match")
        del store[key]

    def create(self, obj, name=None, namespace=None):
        kind = getattr(obj, "kind", None) or type(obj).__name__
        self._check("create", kind, name, namespace, obj)
        if kind == "Event":
            ref = obj.involvedObject
            self.events.append((f"{ref.kind}/{ref.name}", obj.reason, obj.message))
            self._event_names[obj.metadata.name] = self.events[-1]
        if kind == "FencingRequest":
            fr = obj.to_dict()
            meta = fr["metadata"]
            if any(f["metadata"]["name"] == meta["name"] and f["metadata"].get("namespace") == meta.get("namespace")
                   for f in self.fencing_requests):
                raise api_error(409, f'fencingrequests "{meta["name"]}" already exists')
            meta["uid"] = f"uid-fr-{next(_rv)}"
            self.put_fencing_request(fr)
        return obj
