"""Machine and NodePool specs, read through bounded parsers (pure).

A Machine's spec is its NodePool's template, copied when the Machine is
created and immutable afterwards (the CRD refuses changes), so a Machine
never depends on its pool to know what it is. ``template_hash`` is how a
Machine tells that its pool's template has moved on (Drifted).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from hooks import bounds, fields
from hooks.contract import RequestError
from hooks.machines import budgets, names

MAX_REPLICAS = 1000
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# The template fields a Machine copies (and the CRD schema holds).
TEMPLATE_FIELDS = ("taints", "startupTaints", "instanceTypes", "capacityType", "subnets", "subnetSelector",
                   "securityGroups", "imageId", "launchTemplate", "instanceProfile", "userData")
ON_DEMAND, SPOT = "on-demand", "spot"
CAPACITY_TYPES = (ON_DEMAND, SPOT)
DEFAULT_REGISTRATION_TTL = "15m"
DEFAULT_DRAIN_TIMEOUT = "10m"
NEVER = "Never"
MAX_EXPIRE_AFTER = 10 * 366 * 24 * 3600.0


@dataclass(frozen=True)
class Taint:
    key: str
    effect: str
    value: str | None = None

    def to_dict(self) -> dict:
        out = {"key": self.key, "effect": self.effect}
        if self.value is not None:
            out["value"] = self.value
        return out


@dataclass(frozen=True)
class MachineSpec:
    labels: dict
    annotations: dict
    taints: tuple[Taint, ...]
    startup_taints: tuple[Taint, ...]
    instance_types: tuple[str, ...]
    subnets: tuple[str, ...]
    subnet_selector: dict
    security_groups: tuple[str, ...]
    image_id: str | None
    launch_template: dict | None
    instance_profile: str | None
    user_data: str | None
    registration_ttl: float
    drain_timeout: float
    capacity_type: str = ON_DEMAND


def _strings(spec: dict, key: str, where: str, *, maximum: int) -> tuple[str, ...]:
    raw = spec.get(key)
    if raw is None:
        return ()
    if not isinstance(raw, list) or len(raw) > maximum:
        raise RequestError(f"{where}.{key}", f"must be a list of at most {maximum} strings")
    for i, item in enumerate(raw):
        if not isinstance(item, str) or not item or len(item) > 255:
            raise RequestError(f"{where}.{key}[{i}]", "must be a non-empty string of at most 255 characters")
    return tuple(raw)


def _string_map(spec: dict, key: str, where: str) -> dict:
    raw = fields.mapping(spec, key, where=where)
    if len(raw) > 100:
        raise RequestError(f"{where}.{key}", "has more than 100 entries")
    for k, v in raw.items():
        if not isinstance(v, str) or len(k) > 317 or len(v) > 4096:
            raise RequestError(f"{where}.{key}.{k}", "must be a string (keys ≤317, values ≤4096 characters)")
    return raw


def _not_ours(key: str, where: str) -> None:
    """Keys in nodewarden's own domain are set by nodewarden alone (the CRDs refuse them too)."""
    if key.startswith(names.OWN_KEY_PREFIX):
        raise RequestError(where, f"{key!r} is in the {names.OWN_KEY_PREFIX} domain, which nodewarden keeps for itself")


def _node_map(spec: dict, key: str, where: str) -> dict:
    """Labels or annotations for the Node: none of nodewarden's own keys."""
    raw = _string_map(spec, key, where)
    for k in raw:
        _not_ours(k, f"{where}.{key}.{k}")
    return raw


def _name(obj: dict, where: str) -> str:
    """The object's name, which becomes a label value on its Nodes: at most 63 characters."""
    name = fields.mapping(obj, "metadata").get("name")
    if isinstance(name, str) and len(name) > names.MAX_NAME:
        raise RequestError(f"{where}.metadata.name", f"is longer than {names.MAX_NAME} characters, the most a label "
                                                     "value may have")
    return name


def _taints(spec: dict, key: str, where: str) -> tuple[Taint, ...]:
    found = []
    items = fields.objects(spec, key, where=where)
    if len(items) > 50:
        raise RequestError(f"{where}.{key}", "has more than 50 taints")
    for i, item in enumerate(items):
        at = f"{where}.{key}[{i}]"
        taint_key = fields.item_string(item, "key", at)
        effect = fields.item_string(item, "effect", at)
        if not taint_key:
            raise RequestError(f"{at}.key", "is required")
        _not_ours(taint_key, f"{at}.key")
        if effect not in _EFFECTS:
            raise RequestError(f"{at}.effect", f"must be one of {', '.join(_EFFECTS)}")
        found.append(Taint(taint_key, effect, fields.item_string(item, "value", at)))
    return tuple(found)


def _optional_string(spec: dict, key: str, where: str, maximum: int = 255) -> str | None:
    value = fields.string(spec, key, where=where)
    if value is not None and len(value) > maximum:
        raise RequestError(f"{where}.{key}", f"is longer than {maximum} characters")
    return value or None


def parse_template(spec: dict, where: str, *, labels: dict, annotations: dict, registration_ttl,
                   drain_timeout) -> MachineSpec:
    """A MachineSpec from a Machine's spec or a pool's template spec; RequestError names what is wrong."""
    instance_types = _strings(spec, "instanceTypes", where, maximum=20)
    if not instance_types:
        raise RequestError(f"{where}.instanceTypes", "must name at least one instance type")
    image_id = _optional_string(spec, "imageId", where)
    template = fields.mapping(spec, "launchTemplate", where=where) or None
    if template is not None:
        for key in ("id", "name", "version"):
            _optional_string(template, key, f"{where}.launchTemplate")
        if not (template.get("id") or template.get("name")):
            raise RequestError(f"{where}.launchTemplate", "needs an id or a name")
    if bool(image_id) == bool(template):
        raise RequestError(where, "needs exactly one of imageId and launchTemplate")
    subnets = _strings(spec, "subnets", where, maximum=16)
    selector = _string_map(spec, "subnetSelector", where)
    if not subnets and not selector:
        raise RequestError(where, "needs subnets or a subnetSelector")
    capacity_type = fields.string(spec, "capacityType", where=where, default=ON_DEMAND)
    if capacity_type not in CAPACITY_TYPES:
        raise RequestError(f"{where}.capacityType", f"must be one of {', '.join(CAPACITY_TYPES)}")
    user_data = fields.string(spec, "userData", where=where)
    if user_data is not None and len(user_data) > 16384:
        raise RequestError(f"{where}.userData", "is longer than 16384 characters")
    return MachineSpec(
        labels=labels, annotations=annotations,
        taints=_taints(spec, "taints", where),
        startup_taints=_taints(spec, "startupTaints", where),
        instance_types=instance_types,
        subnets=subnets,
        subnet_selector=selector,
        security_groups=_strings(spec, "securityGroups", where, maximum=16),
        image_id=image_id,
        launch_template=template,
        instance_profile=_optional_string(spec, "instanceProfile", where),
        user_data=user_data,
        registration_ttl=bounds.duration(registration_ttl, f"{where}.registrationTTL",
                                         default=bounds.duration(DEFAULT_REGISTRATION_TTL, "default"), positive=True),
        drain_timeout=bounds.duration(drain_timeout, f"{where}.drainTimeout",
                                      default=bounds.duration(DEFAULT_DRAIN_TIMEOUT, "default")),
        capacity_type=capacity_type,
    )


def machine(obj: dict) -> MachineSpec:
    _name(obj, "parent")
    spec = fields.mapping(obj, "spec")
    return parse_template(spec, "parent.spec", labels=_node_map(spec, "labels", "parent.spec"),
                          annotations=_node_map(spec, "annotations", "parent.spec"),
                          registration_ttl=spec.get("registrationTTL"), drain_timeout=spec.get("drainTimeout"))


@dataclass(frozen=True)
class PoolSpec:
    replicas: int
    template: MachineSpec
    machine_spec: dict  # the spec every new Machine of the pool gets, as written
    template_hash: str
    budgets: tuple = budgets.DEFAULT  # hooks.machines.budgets.Budget, most restrictive active one wins
    expire_after: float | None = None  # seconds a Machine lives before it is replaced; None: never


def expire_after(spec: dict) -> float | None:
    """``expireAfter``: a duration, or Never (the default)."""
    value = spec.get("expireAfter")
    if value is None or value == NEVER:
        return None
    return bounds.duration(value, "parent.spec.expireAfter", positive=True, maximum=MAX_EXPIRE_AFTER)


def pool(obj: dict) -> PoolSpec:
    _name(obj, "parent")
    spec = fields.mapping(obj, "spec")
    replicas = bounds.whole_number(spec.get("replicas"), "parent.spec.replicas", minimum=0, maximum=MAX_REPLICAS,
                                   default=0)
    template = fields.mapping(spec, "template")
    meta = fields.mapping(template, "metadata", where="parent.spec.template")
    inner = fields.mapping(template, "spec", where="parent.spec.template")
    where = "parent.spec.template"
    labels = _node_map(meta, "labels", f"{where}.metadata")
    annotations = _node_map(meta, "annotations", f"{where}.metadata")
    parsed = parse_template(inner, f"{where}.spec", labels=labels, annotations=annotations,
                            registration_ttl=spec.get("registrationTTL"), drain_timeout=spec.get("drainTimeout"))
    machine_spec = {k: inner[k] for k in TEMPLATE_FIELDS if inner.get(k) not in (None, [], {}, "")}
    machine_spec.update({"labels": labels, "annotations": annotations,
                         "registrationTTL": spec.get("registrationTTL") or DEFAULT_REGISTRATION_TTL,
                         "drainTimeout": spec.get("drainTimeout") or DEFAULT_DRAIN_TIMEOUT})
    return PoolSpec(replicas, parsed, machine_spec, template_hash(machine_spec), budgets.parse(obj),
                    expire_after(spec))


def template_hash(machine_spec: dict) -> str:
    """A short, stable digest of what a Machine is made from."""
    encoded = json.dumps(machine_spec, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(encoded).hexdigest()[:16]


def pool_of(machine_obj: dict) -> str:
    return fields.mapping(machine_obj, "metadata", "labels").get(names.POOL_LABEL) or ""
