"""Machine and NodePool specs, read through bounded parsers (pure).

A Machine's spec is its NodePool's template, copied when the Machine is
created and immutable afterwards (the CRD refuses changes), so a Machine
never depends on its pool to know what it is. ``template_hash`` is how a
Machine tells that its pool's template has moved on (Drifted).

A NodePool with ``spec.replicas`` is static: it keeps that many Machines.
One without is a provisioning pool: its Machines follow the pending pods,
within its requirements and limits (``ProvisioningSpec``).
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field

from lightkube.utils.quantity import parse_quantity

from hooks import bounds, fields, machine_names, provisioning_names
from hooks.contract import RequestError
from hooks.machines import budgets

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
# Provisioning pools.
MAX_WEIGHT = 100
MAX_REQUIREMENTS = 30
MAX_REQUIREMENT_VALUES = 100
MAX_POOL_MACHINES = 10000
MAX_LABEL_KEY = 316  # a DNS subdomain prefix (253), "/" and a name (63), as the CRD bounds it
MAX_LABEL_VALUE = 63
WHEN_EMPTY = "WhenEmpty"
WHEN_EMPTY_OR_UNDERUTILIZED = "WhenEmptyOrUnderutilized"
CONSOLIDATION_POLICIES = (WHEN_EMPTY, WHEN_EMPTY_OR_UNDERUTILIZED)
DEFAULT_CONSOLIDATE_AFTER = 30.0
_LABEL_KEY = re.compile(r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                        r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_INTEGER = re.compile(r"[0-9]{1,18}")
_QUANTITY_LENGTH = 64


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
    if key.startswith(machine_names.OWN_KEY_PREFIX):
        raise RequestError(where, f"{key!r} is in the {machine_names.OWN_KEY_PREFIX} domain, which nodewarden keeps for itself")


def _node_map(spec: dict, key: str, where: str) -> dict:
    """Labels or annotations for the Node: none of nodewarden's own keys."""
    raw = _string_map(spec, key, where)
    for k in raw:
        _not_ours(k, f"{where}.{key}.{k}")
    return raw


def _name(obj: dict, where: str) -> str:
    """The object's name, which becomes a label value on its Nodes: at most 63 characters."""
    name = fields.mapping(obj, "metadata").get("name")
    if isinstance(name, str) and len(name) > machine_names.MAX_NAME:
        raise RequestError(f"{where}.metadata.name", f"is longer than {machine_names.MAX_NAME} characters, the most a label "
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
                   drain_timeout, instance_types_required: bool = True) -> MachineSpec:
    """A MachineSpec from a Machine's spec or a pool's template spec; RequestError names what is wrong.

    ``instance_types_required`` False: a provisioning pool's template, whose instance types may come from
    its requirements instead."""
    instance_types = _strings(spec, "instanceTypes", where, maximum=20)
    if not instance_types and (instance_types_required or spec.get("instanceTypes") is not None):
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


Requirement = tuple[str, str, tuple[str, ...]]  # (label key, operator, values)


@dataclass(frozen=True)
class PoolLimits:
    """What a provisioning pool's Machines may add up to; None: no limit."""

    cpu: str | None = None  # a quantity, as written
    memory: str | None = None
    machines: int | None = None


@dataclass(frozen=True)
class ProvisioningSpec:
    """The fields a provisioning pool (no ``replicas``) is read with."""

    weight: int = 0  # higher is tried first; ties by name
    # The template's instanceTypes, when given, come first as an In requirement on the instance type.
    requirements: tuple[Requirement, ...] = ()
    limits: PoolLimits = field(default_factory=PoolLimits)
    consolidation_policy: str = WHEN_EMPTY_OR_UNDERUTILIZED
    consolidate_after: float | None = DEFAULT_CONSOLIDATE_AFTER  # seconds; None: Never


@dataclass(frozen=True)
class PoolSpec:
    replicas: int | None  # None: a provisioning pool
    template: MachineSpec
    machine_spec: dict  # the spec every new Machine of the pool gets, as written
    template_hash: str
    budgets: tuple = budgets.DEFAULT  # hooks.machines.budgets.Budget, most restrictive active one wins
    expire_after: float | None = None  # seconds a Machine lives before it is replaced; None: never
    provisioning: ProvisioningSpec | None = None  # set exactly when replicas is None


def expire_after(spec: dict) -> float | None:
    """``expireAfter``: a duration, or Never (the default)."""
    value = spec.get("expireAfter")
    if value is None or value == NEVER:
        return None
    return bounds.duration(value, "parent.spec.expireAfter", positive=True, maximum=MAX_EXPIRE_AFTER)


def _label_key(key, where: str) -> str:
    if not isinstance(key, str) or not key or len(key) > MAX_LABEL_KEY or not _LABEL_KEY.fullmatch(key):
        raise RequestError(where, f"must be a label key of at most {MAX_LABEL_KEY} characters")
    if key.startswith(machine_names.OWN_KEY_PREFIX) and key not in provisioning_names.WELL_KNOWN:
        ours = ", ".join(k for k in provisioning_names.WELL_KNOWN if k.startswith(machine_names.OWN_KEY_PREFIX))
        raise RequestError(where, f"{key!r} is in the {machine_names.OWN_KEY_PREFIX} domain; of its keys a "
                                  f"requirement may name only {ours}")
    return key


def _requirement(item: dict, where: str) -> Requirement:
    key = _label_key(item.get("key"), f"{where}.key")
    operator = item.get("operator")
    if operator not in provisioning_names.OPERATORS:
        raise RequestError(f"{where}.operator", f"must be one of {', '.join(provisioning_names.OPERATORS)}")
    raw = item.get("values")
    raw = [] if raw is None else raw
    if not isinstance(raw, list) or len(raw) > MAX_REQUIREMENT_VALUES:
        raise RequestError(f"{where}.values", f"must be a list of at most {MAX_REQUIREMENT_VALUES} strings")
    for i, value in enumerate(raw):
        if not isinstance(value, str) or len(value) > MAX_LABEL_VALUE or not _LABEL_VALUE.fullmatch(value):
            raise RequestError(f"{where}.values[{i}]", f"must be a label value of at most {MAX_LABEL_VALUE} "
                                                       "characters")
    if operator in (provisioning_names.IN, provisioning_names.NOT_IN) and not raw:
        raise RequestError(f"{where}.values", f"{operator} needs at least one value")
    if operator in (provisioning_names.EXISTS, provisioning_names.DOES_NOT_EXIST) and raw:
        raise RequestError(f"{where}.values", f"{operator} takes no values")
    if operator in (provisioning_names.GT, provisioning_names.LT) and (len(raw) != 1 or not _INTEGER.fullmatch(raw[0])):
        raise RequestError(f"{where}.values", f"{operator} needs exactly one whole number (\"4\")")
    if key == provisioning_names.CAPACITY_TYPE_LABEL and any(v not in CAPACITY_TYPES for v in raw):
        raise RequestError(f"{where}.values", f"the capacity types are {', '.join(CAPACITY_TYPES)}")
    return key, operator, tuple(dict.fromkeys(raw))


def requirements(spec: dict, where: str = "parent.spec") -> tuple[Requirement, ...]:
    """A pool's ``requirements`` as (key, operator, values) triples, checked as the CRD checks them."""
    items = fields.objects(spec, "requirements", where=where)
    if len(items) > MAX_REQUIREMENTS:
        raise RequestError(f"{where}.requirements", f"has more than {MAX_REQUIREMENTS} requirements")
    return tuple(_requirement(item, f"{where}.requirements[{i}]") for i, item in enumerate(items))


def _quantity(limits: dict, key: str, where: str) -> str | None:
    value = limits.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise RequestError(f"{where}.{key}", f"must be a quantity, got {type(value).__name__}")
    text = str(value).strip()
    try:
        if len(text) > _QUANTITY_LENGTH or parse_quantity(text) < 0:
            raise ValueError(text)
    except ValueError:
        raise RequestError(f"{where}.{key}", f"must be a quantity of at least 0 (\"1000\", \"4000Gi\"), "
                                             f"got {text[:40]!r}") from None
    return text


def limits(spec: dict, where: str = "parent.spec") -> PoolLimits:
    """A pool's ``limits``: cpu and memory as quantities, machines a count; each optional."""
    raw = fields.mapping(spec, "limits", where=where)
    where = f"{where}.limits"
    machines = raw.get("machines")
    return PoolLimits(
        cpu=_quantity(raw, "cpu", where), memory=_quantity(raw, "memory", where),
        machines=None if machines is None else bounds.whole_number(machines, f"{where}.machines", minimum=0,
                                                                   maximum=MAX_POOL_MACHINES))


def consolidate_after(disruption: dict, where: str = "parent.spec.disruption") -> float | None:
    """``consolidateAfter``: a duration (default 30s), or Never."""
    value = disruption.get("consolidateAfter")
    if value == NEVER:
        return None
    return bounds.duration(value, f"{where}.consolidateAfter", default=DEFAULT_CONSOLIDATE_AFTER)


def provisioning(spec: dict, instance_types: tuple[str, ...]) -> ProvisioningSpec:
    """What a provisioning pool is read with; the template's ``instance_types`` become the first requirement."""
    where = "parent.spec"
    weight = bounds.whole_number(spec.get("weight"), f"{where}.weight", minimum=0, maximum=MAX_WEIGHT, default=0)
    found = requirements(spec, where)
    if instance_types:
        found = ((provisioning_names.INSTANCE_TYPE_LABEL, provisioning_names.IN, instance_types),) + found
    disruption = fields.mapping(spec, "disruption", where=where)
    policy = fields.string(disruption, "consolidationPolicy", where=f"{where}.disruption",
                           default=WHEN_EMPTY_OR_UNDERUTILIZED)
    if policy not in CONSOLIDATION_POLICIES:
        raise RequestError(f"{where}.disruption.consolidationPolicy",
                           f"must be one of {', '.join(CONSOLIDATION_POLICIES)}")
    return ProvisioningSpec(weight=weight, requirements=found, limits=limits(spec, where),
                            consolidation_policy=policy, consolidate_after=consolidate_after(disruption))


def pool(obj: dict) -> PoolSpec:
    _name(obj, "parent")
    spec = fields.mapping(obj, "spec")
    replicas = None if spec.get("replicas") is None else bounds.whole_number(
        spec.get("replicas"), "parent.spec.replicas", minimum=0, maximum=MAX_REPLICAS)
    template = fields.mapping(spec, "template")
    meta = fields.mapping(template, "metadata", where="parent.spec.template")
    inner = fields.mapping(template, "spec", where="parent.spec.template")
    where = "parent.spec.template"
    labels = _node_map(meta, "labels", f"{where}.metadata")
    annotations = _node_map(meta, "annotations", f"{where}.metadata")
    parsed = parse_template(inner, f"{where}.spec", labels=labels, annotations=annotations,
                            registration_ttl=spec.get("registrationTTL"), drain_timeout=spec.get("drainTimeout"),
                            instance_types_required=replicas is not None)
    machine_spec = {k: inner[k] for k in TEMPLATE_FIELDS if inner.get(k) not in (None, [], {}, "")}
    machine_spec.update({"labels": labels, "annotations": annotations,
                         "registrationTTL": spec.get("registrationTTL") or DEFAULT_REGISTRATION_TTL,
                         "drainTimeout": spec.get("drainTimeout") or DEFAULT_DRAIN_TIMEOUT})
    if replicas is not None:
        return PoolSpec(replicas, parsed, machine_spec, template_hash(machine_spec), budgets.parse(obj),
                        expire_after(spec))
    provisioning_spec = provisioning(spec, parsed.instance_types)
    written = provisioning_spec.requirements[1:] if parsed.instance_types else provisioning_spec.requirements
    # A requirement narrows what a Machine may be: changing one drifts the Machines made before. None written,
    # the hash is a static pool's, so a pool turned from one kind into the other keeps its Machines.
    hashed = {**machine_spec, "requirements": sorted([k, op, sorted(values)] for k, op, values in written)} \
        if written else machine_spec
    return PoolSpec(None, parsed, machine_spec, template_hash(hashed), budgets.parse(obj), expire_after(spec),
                    provisioning_spec)


def template_hash(machine_spec: dict) -> str:
    """A short, stable digest of what a Machine is made from."""
    encoded = json.dumps(machine_spec, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(encoded).hexdigest()[:16]


def pool_of(machine_obj: dict) -> str:
    return fields.mapping(machine_obj, "metadata", "labels").get(machine_names.POOL_LABEL) or ""
