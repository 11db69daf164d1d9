"""NodeFencingPolicy: parse, default, decide which policy governs a node, and whether a count is recent."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Iterable

from hooks import bounds, fencing_names, fields, timefmt
from hooks.contract import RequestError
from hooks.fencing import selectors
from hooks.replacement.spec import DEFAULT_MAX_UNHEALTHY, ReplacementSpec, int_or_percent, parse_replacement, scaled

DEFAULT_DURATION = 60.0
MAX_NODES = 1_000_000
MAX_RULES = 32
MAX_NAMESPACES = 256


@dataclass(frozen=True)
class Rule:
    """A node condition that makes a node unhealthy once it has lasted ``seconds``."""

    type: str
    status: str
    seconds: float

    def describe(self) -> str:
        return f"{self.type}={self.status}"


DEFAULT_RULES = (
    Rule("Ready", "Unknown", DEFAULT_DURATION),
    Rule("Ready", "False", DEFAULT_DURATION),
)


@dataclass(frozen=True)
class Policy:
    name: str
    generation: int = 0
    node_selector: dict = field(default_factory=dict)
    rules: tuple[Rule, ...] = DEFAULT_RULES
    max_unhealthy: int | str = DEFAULT_MAX_UNHEALTHY
    exclude_control_plane: bool = True
    action: str = fencing_names.ACTION_OFF
    strategy: str = fencing_names.OUT_OF_SERVICE
    failover_selector: dict | None = None
    failover_namespaces: tuple[str, ...] = ()
    status: dict = field(default_factory=dict)
    deleting: bool = False
    uid: str = ""
    replacement: ReplacementSpec = field(default_factory=ReplacementSpec)

    def selects(self, node_labels: dict) -> bool:
        return selectors.matches(self.node_selector, node_labels)

    def allowed_unhealthy(self, total: int) -> int:
        """How many of ``total`` nodes may be unhealthy before the storm guard holds."""
        return scaled(self.max_unhealthy, total, round_up=False)


def _rules(obj: dict, where: str) -> tuple[Rule, ...]:
    items = fields.objects(obj, "spec", "unhealthyConditions", where=where)
    if not items:
        return DEFAULT_RULES
    if len(items) > MAX_RULES:  # every Node's sync walks them all
        raise RequestError(f"{where}.spec.unhealthyConditions", f"has {len(items)} items; at most {MAX_RULES}")
    rules = []
    for i, item in enumerate(items):
        path = f"{where}.spec.unhealthyConditions[{i}]"
        ctype = fields.item_string(item, "type", path)
        status = fields.item_string(item, "status", path)
        if not ctype or not status:
            raise RequestError(path, "needs a type and a status")
        seconds = bounds.duration(item.get("duration"), f"{path}.duration", default=DEFAULT_DURATION)
        rules.append(Rule(ctype, status, seconds))
    return tuple(rules)


def _max_unhealthy(obj: dict, where: str) -> int | str:
    raw = fields.mapping(obj, "spec", where=where).get("maxUnhealthy")
    return int_or_percent(raw, f"{where}.spec.maxUnhealthy", DEFAULT_MAX_UNHEALTHY, MAX_NODES)


def _choice(obj: dict, key: str, allowed: tuple[str, ...], default: str, where: str) -> str:
    value = fields.string(obj, "spec", key, where=where, default=default)
    if value not in allowed:
        raise RequestError(f"{where}.spec.{key}", f"must be one of {', '.join(allowed)}, got {value!r}")
    return value


def parse(obj: dict, where: str = "parent") -> Policy:
    """A Policy from a NodeFencingPolicy object; RequestError names a bad field."""
    meta = obj["metadata"]
    spec = fields.mapping(obj, "spec", where=where)
    failover = fields.mapping(obj, "spec", "failover", where=where)
    failover_selector = None
    if "podSelector" in failover:
        failover_selector = selectors.validate(failover.get("podSelector"), f"{where}.spec.failover.podSelector")
    namespaces = failover.get("namespaces") or []
    if not isinstance(namespaces, list) or not all(isinstance(n, str) for n in namespaces):
        raise RequestError(f"{where}.spec.failover.namespaces", "must be a list of namespace names")
    if len(namespaces) > MAX_NAMESPACES:
        raise RequestError(f"{where}.spec.failover.namespaces",
                           f"has {len(namespaces)} items; at most {MAX_NAMESPACES}")
    generation = meta.get("generation") or 0
    return Policy(
        name=meta["name"],
        generation=generation if isinstance(generation, int) else 0,
        node_selector=selectors.validate(spec.get("nodeSelector"), f"{where}.spec.nodeSelector"),
        rules=_rules(obj, where),
        max_unhealthy=_max_unhealthy(obj, where),
        exclude_control_plane=fields.boolean(obj, "spec", "excludeControlPlane", where=where, default=True),
        action=_choice(obj, "action", fencing_names.ACTIONS, fencing_names.ACTION_OFF, where),
        strategy=_choice(obj, "recoveryStrategy", fencing_names.STRATEGIES, fencing_names.OUT_OF_SERVICE, where),
        failover_selector=failover_selector,
        failover_namespaces=tuple(namespaces),
        status=fields.mapping(obj, "status", where=where),
        deleting=bool(meta.get("deletionTimestamp")),
        uid=meta.get("uid") if isinstance(meta.get("uid"), str) else "",
        replacement=parse_replacement(obj, where),
    )


def parse_all(objs: list[dict]) -> tuple[list[Policy], dict[str, str]]:
    """Valid policies sorted by name, and the problems of the invalid ones by name."""
    valid, invalid = [], {}
    for obj in objs:
        name = obj["metadata"]["name"]
        try:
            valid.append(parse(obj, where=f"related.{fencing_names.POLICY_KIND}/{name}"))
        except RequestError as exc:
            invalid[name] = str(exc)
    return sorted(valid, key=lambda p: p.name), invalid


def governing(policies: list[Policy], node_labels: dict) -> Policy | None:
    """The first policy by name that selects the node; None means never fence it."""
    for policy in policies:
        if not policy.deleting and policy.selects(node_labels):
            return policy
    return None


def counted_since(objs: Iterable[dict], announced: dt.datetime) -> bool:
    """Whether some policy's last count (``status.countedAt``) is as recent as ``announced``."""
    for obj in objs:
        status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
        counted = timefmt.parse(status.get("countedAt"))
        if counted is not None and counted >= announced:
            return True
    return False
