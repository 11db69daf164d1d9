"""The Metacontroller hook contract: parse requests, shape responses, and the names Metacontroller writes on
a DecoratorController's objects (its claim annotation, its finalizer).

Metacontroller speaks two hook versions, chosen per hook by the controller's
``spec.hooks.<hook>.version`` (absent means v1); every request carries that
controller, so the version is read from it, never guessed from the body.

- A CompositeController request names its object ``parent`` and its children
  ``children`` in both versions.
- A DecoratorController request names them ``object`` and ``attachments`` in
  both versions. (Metacontroller v4's v2 decorator request type calls its Go
  fields ``Parent`` and ``Children``, but their JSON tags are ``object`` and
  ``attachments``: the wire names are the tags.)
- Both carry ``related`` (grouped like the children) and ``finalizing``.
- Inside each ``Kind.apiVersion`` group, v1 keys an object by its name
  relative to the parent (``namespace/name`` only when the parent is
  cluster-scoped and the object is not), v2 by ``namespace/name`` (just
  ``name`` when cluster-scoped).

We index objects by their own metadata instead of trusting either key, and
the parsed request keeps the names ``parent``/``children`` for both kinds and
versions, so controllers never see the difference. What the version changes
on the wire is only the inner keys, and how strictly the response is read.

Strict v2 response parsing rejects unknown fields, so responses are built
only from the fields each controller kind allows.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

DECORATOR = "decorator"
COMPOSITE = "composite"
HOOKS = ("sync", "finalize", "customize")

RESPONSE_FIELDS = {
    DECORATOR: ("labels", "annotations", "status", "attachments", "resyncAfterSeconds", "finalized"),
    COMPOSITE: ("status", "children", "resyncAfterSeconds", "finalized"),
}
CUSTOMIZE_FIELDS = ("relatedResources",)
# The annotation by which Metacontroller knows an attachment as a DecoratorController's own: its value is
# the controller's name.
DECORATOR_CLAIM = "metacontroller.k8s.io/decorator-controller"


def decorator_finalizer(controller: str) -> str:
    """The finalizer Metacontroller puts on the objects of a DecoratorController with a finalize hook."""
    return f"metacontroller.io/decoratorcontroller-{controller}"


class RequestError(ValueError):
    """A request that cannot be served; ``field`` names what is wrong."""

    def __init__(self, field_path: str, problem: str):
        super().__init__(f"{field_path}: {problem}")
        self.field = field_path
        self.problem = problem


def _require_mapping(value: Any, path: str, *, optional: bool = False) -> dict:
    if value is None and optional:
        return {}
    if not isinstance(value, dict):  # JSON objects decode to dict; cheaper than Mapping
        expected = "an object or null" if optional else "an object"
        raise RequestError(path, f"must be {expected}, got {type(value).__name__}")
    return dict(value)


def _check_object(obj: Any, path: str) -> dict:
    obj = _require_mapping(obj, path)
    meta = _require_mapping(obj.get("metadata"), f"{path}.metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise RequestError(f"{path}.metadata.name", "must be a non-empty string")
    for key in ("namespace", "uid", "resourceVersion", "deletionTimestamp"):
        if meta.get(key) is not None and not isinstance(meta[key], str):
            raise RequestError(f"{path}.metadata.{key}", "must be a string")
    for key in ("labels", "annotations"):
        if meta.get(key) is not None:
            mapping = _require_mapping(meta[key], f"{path}.metadata.{key}")
            for k, v in mapping.items():
                if not isinstance(v, str):
                    raise RequestError(f"{path}.metadata.{key}.{k}", "must be a string")
    for key in ("spec", "status"):
        if obj.get(key) is not None:
            _require_mapping(obj[key], f"{path}.{key}")
    _check_taints(obj, path)
    return obj


def _check_taints(obj: dict, path: str) -> None:
    """A Node's taints, read by several controllers: objects with string key, value and effect."""
    taints = (obj.get("spec") or {}).get("taints")
    if taints is None:
        return
    if not isinstance(taints, list):
        raise RequestError(f"{path}.spec.taints", f"must be a list, got {type(taints).__name__}")
    for i, taint in enumerate(taints):
        if not isinstance(taint, dict):
            raise RequestError(f"{path}.spec.taints[{i}]", f"must be an object, got {type(taint).__name__}")
        for field_name in ("key", "value", "effect"):
            if taint.get(field_name) is not None and not isinstance(taint[field_name], str):
                raise RequestError(f"{path}.spec.taints[{i}].{field_name}", "must be a string")


def parse_object(obj: Any, path: str) -> dict:
    """Validate one Kubernetes object's shape (as a request's objects are): a RequestError names the field."""
    return _check_object(obj, path)


def type_key(obj: Mapping) -> str:
    """Metacontroller's group key: ``Kind.version`` or ``Kind.group/version``."""
    api_version = obj.get("apiVersion", "v1")
    return f"{obj.get('kind', '')}.{api_version}"


class ObjectGroups:
    """Objects grouped by ``Kind.apiVersion``, looked up by their own metadata."""

    def __init__(self, groups: Mapping[str, Mapping[str, dict]] | None = None):
        self._by_type: dict[str, list[dict]] = {}
        for key, objs in (groups or {}).items():
            self._by_type[key] = list(objs.values())

    @classmethod
    def parse(cls, raw: Any, path: str) -> "ObjectGroups":
        groups = _require_mapping(raw, path, optional=True)
        checked: dict[str, dict[str, dict]] = {}
        for key, objs in groups.items():
            if not isinstance(key, str) or "." not in key:
                raise RequestError(f"{path}", f"group key {key!r} is not 'Kind.version'")
            objs = _require_mapping(objs, f"{path}.{key}", optional=True)
            checked[key] = {n: _check_object(o, f"{path}.{key}.{n}") for n, o in objs.items()}
        return cls(checked)

    def of_kind(self, kind: str, api_group: str | None = None) -> list[dict]:
        """All objects of a kind, any version (optionally only of one API group)."""
        found = []
        for key, objs in self._by_type.items():
            k, _, api_version = key.partition(".")
            group = api_version.rpartition("/")[0] if "/" in api_version else ""
            if k == kind and (api_group is None or group == api_group):
                found.extend(objs)
        return sorted(found, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))

    def only(self, kinds) -> "ObjectGroups":
        """The objects of these kinds (any version), grouped as here."""
        kept = ObjectGroups()
        kept._by_type = {key: objs for key, objs in self._by_type.items() if key.partition(".")[0] in kinds}
        return kept

    def all(self) -> list[dict]:
        return [obj for objs in self._by_type.values() for obj in objs]

    def with_objects(self, objs: list[dict]) -> "ObjectGroups":
        """These groups with ``objs`` added (or replacing the object of the same kind, namespace and name)."""
        grown = ObjectGroups()
        grown._by_type = {key: list(found) for key, found in self._by_type.items()}
        for obj in objs:
            meta = obj["metadata"]
            group = grown._by_type.setdefault(type_key(obj), [])
            group[:] = [o for o in group if (o["metadata"].get("namespace"), o["metadata"]["name"])
                        != (meta.get("namespace"), meta["name"])]
            group.append(obj)
        return grown

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict | None:
        for obj in self.of_kind(kind):
            meta = obj["metadata"]
            if meta["name"] == name and (namespace is None or meta.get("namespace") == namespace):
                return obj
        return None

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_type.values())


@dataclass(frozen=True)
class HookRequest:
    """A parsed sync/finalize request, identical for hook versions v1 and v2."""

    controller_kind: str
    version: str
    parent: dict
    children: ObjectGroups = field(default_factory=ObjectGroups)
    related: ObjectGroups = field(default_factory=ObjectGroups)
    finalizing: bool = False
    controller: dict = field(default_factory=dict)
    # Set by the pipeline once the parent (and what the actions rest on) was re-read from the API server.
    verified: bool = False
    # Readings of this request computed once per call (see ``reading``); a replaced request starts empty.
    _readings: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def reading(self, key, compute):
        """``compute()``, once per request and ``key``: gather and decide share one reading of the parent."""
        if key not in self._readings:
            self._readings[key] = compute()
        return self._readings[key]

    @property
    def meta(self) -> dict:
        return self.parent["metadata"]

    @property
    def name(self) -> str:
        return self.meta["name"]

    @property
    def annotations(self) -> dict:
        return self.meta.get("annotations") or {}

    @property
    def labels(self) -> dict:
        return self.meta.get("labels") or {}

    @property
    def deleting(self) -> bool:
        return bool(self.meta.get("deletionTimestamp"))


# Where a request puts its object and that object's children, by controller kind; the same in both hook versions.
REQUEST_NAMES = {
    DECORATOR: ("object", "attachments"),
    COMPOSITE: ("parent", "children"),
}


def request_names(controller_kind: str) -> tuple[str, str]:
    """The top-level names of the object and its children for this controller kind."""
    return REQUEST_NAMES[controller_kind]


def parse_request(body: Any, controller_kind: str, hook: str = "sync") -> HookRequest:
    """Validate a sync/finalize request body; raise RequestError naming the field."""
    body = _require_mapping(body, "request")
    controller = _require_mapping(body.get("controller"), "controller", optional=True)
    version = _declared_version(controller, hook)
    parent_key, children_key = request_names(controller_kind)
    if body.get(parent_key) is None:
        raise RequestError(parent_key, _missing(body, controller_kind, parent_key))
    parent = _check_object(body[parent_key], parent_key)
    finalizing = body.get("finalizing", False)
    if not isinstance(finalizing, bool):
        raise RequestError("finalizing", "must be a boolean")
    return HookRequest(
        controller_kind=controller_kind,
        version=version,
        parent=parent,
        children=ObjectGroups.parse(body.get(children_key), children_key),
        related=ObjectGroups.parse(body.get("related"), "related"),
        finalizing=finalizing,
        controller=controller,
    )


def _missing(body: Mapping, controller_kind: str, key: str) -> str:
    """Why the object is missing; names the other controller kind's field when the body has that one instead."""
    for other_kind, (other_key, _) in REQUEST_NAMES.items():
        if other_key != key and body.get(other_key) is not None:
            return (f"is required: {controller_kind} requests name the object {key!r} in both hook versions; "
                    f"this body has {other_key!r}, which only {other_kind} requests use")
    return "is required"


def parse_customize(body: Any) -> dict:
    """A customize request carries only the controller and the parent."""
    body = _require_mapping(body, "request")
    if body.get("parent") is None:
        raise RequestError("parent", "is required")
    return _check_object(body["parent"], "parent")


def _declared_version(controller: Mapping, hook: str) -> str:
    """``spec.hooks.<hook>.version``; Metacontroller defaults it to v1."""
    spec = controller.get("spec") if isinstance(controller.get("spec"), Mapping) else {}
    hooks = spec.get("hooks") if isinstance(spec.get("hooks"), Mapping) else {}
    spec = hooks.get(hook)
    version = spec.get("version") if isinstance(spec, Mapping) else None
    return version if version in ("v1", "v2") else "v1"


def shape_response(controller_kind: str, response: Mapping[str, Any]) -> dict:
    """Keep only the fields strict v2 parsing accepts for this controller kind.

    Dropping an unknown field here is a programming error, not a user error,
    so it raises: a hook must never send a body Metacontroller rejects.
    """
    allowed = RESPONSE_FIELDS[controller_kind]
    extra = sorted(set(response) - set(allowed))
    if extra:
        raise ValueError(f"{controller_kind} response has fields {extra}; allowed: {list(allowed)}")
    return {k: v for k, v in response.items() if v is not None or k in ("status", "attachments", "children")}


def decorator_response(
    *,
    labels: Mapping[str, str | None] | None = None,
    annotations: Mapping[str, str | None] | None = None,
    status: Mapping | None = None,
    attachments: Iterable[Mapping] | None = None,
    resync_after: float | None = None,
    finalized: bool | None = None,
) -> dict:
    """A DecoratorController response. ``status=None`` leaves the parent's status alone."""
    response: dict[str, Any] = {
        "labels": dict(labels or {}),
        "annotations": dict(annotations or {}),
        "status": dict(status) if status is not None else None,
        "attachments": list(attachments) if attachments is not None else [],
    }
    if resync_after:
        response["resyncAfterSeconds"] = float(resync_after)
    if finalized is not None:
        response["finalized"] = bool(finalized)
    return response


def composite_response(
    *,
    status: Mapping,
    children: Iterable[Mapping] | None = None,
    resync_after: float | None = None,
    finalized: bool | None = None,
) -> dict:
    """A CompositeController response. Status is required: null would wipe it."""
    if status is None:
        raise ValueError("a composite response needs the full status; null wipes it")
    response: dict[str, Any] = {"status": dict(status), "children": list(children or [])}
    if resync_after:
        response["resyncAfterSeconds"] = float(resync_after)
    if finalized is not None:
        response["finalized"] = bool(finalized)
    return response
