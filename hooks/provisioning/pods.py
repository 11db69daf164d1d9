"""What provisioning reads of a pod: PodView, and which pending pods are provisioning's to place (pure).

Reads are bounded and never raise: a malformed field of a pod nobody can
place reads as absent, and one that would change where the pod may go
(its requests, node affinity, tolerations, spread, anti-affinity) makes the
pod unsupported, with the field and the problem as the reason. Constraints
the scheduler does not model (pod affinity, spread or anti-affinity over
another topology key, namespace selectors) make it unsupported too, rather
than provisioning a Node the pod then cannot use. Soft constraints of a kind
it does not model (preferred pod affinity) are left out.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass, field
from typing import Any, Collection, Mapping, NamedTuple

from hooks import provisioning_names, timefmt
from hooks.contract import RequestError
from hooks.provisioning import requirements, resources
from hooks.provisioning.requirements import Requirements, Rule
from hooks.provisioning_names import IN
from hooks.provisioning.resources import Resources

EXISTS, EQUAL = "Exists", "Equal"
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
DO_NOT_SCHEDULE, SCHEDULE_ANYWAY = "DoNotSchedule", "ScheduleAnyway"
ZONE, HOSTNAME = provisioning_names.ZONE_LABEL, provisioning_names.HOSTNAME_LABEL
MAX_CONTAINERS = 200
MAX_ITEMS = 100
MAX_SKEW = 1_000_000
# A host port's address that means every address of the Node, as kube-scheduler reads an empty hostIP.
EVERY_ADDRESS = "0.0.0.0"
PROTOCOLS = ("TCP", "UDP", "SCTP")


@dataclass(frozen=True)
class Toleration:
    key: str = ""
    operator: str = EQUAL
    value: str = ""
    effect: str = ""

    def tolerates(self, taint) -> bool:
        """Whether this tolerates ``taint`` (anything with key, value and effect)."""
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:
            return self.operator == EXISTS
        if self.key != taint.key:
            return False
        return self.operator == EXISTS or self.value == (taint.value or "")


def tolerates(tolerations: tuple[Toleration, ...], taints) -> bool:
    """Whether every taint that keeps pods off (NoSchedule, NoExecute) is tolerated."""
    for taint in taints:
        if taint.effect == "PreferNoSchedule":
            continue
        if not any(t.tolerates(taint) for t in tolerations):
            return False
    return True


@dataclass(frozen=True)
class PodSelector:
    """Pods whose labels meet ``selector`` in ``namespaces`` (None: every namespace)."""

    selector: Requirements
    namespaces: frozenset | None

    def matches(self, namespace: str, labels: Mapping[str, str]) -> bool:
        return (self.namespaces is None or namespace in self.namespaces) and self.selector.allows(labels)


@dataclass(frozen=True)
class Spread:
    """A topology spread constraint over zones (``zone``) or Nodes: at most ``max_skew`` more matching pods
    in one domain than in the emptiest; ``hard`` for DoNotSchedule."""

    zone: bool
    max_skew: int
    selector: PodSelector
    hard: bool


class HostPort(NamedTuple):
    """A port of the Node a pod's container binds: ``ip`` EVERY_ADDRESS for all of the Node's addresses."""

    ip: str
    protocol: str
    port: int


def port_conflict(wanted: tuple[HostPort, ...], held: Collection[HostPort]) -> HostPort | None:
    """The first of ``wanted`` a Node holding ``held`` cannot give, as kube-scheduler's NodePorts decides: the
    same protocol and port, on the same address or where either side binds every address."""
    for port in wanted:
        for other in held:
            if (other.port == port.port and other.protocol == port.protocol
                    and (other.ip == port.ip or EVERY_ADDRESS in (other.ip, port.ip))):
                return port
    return None


def describe_port(port: HostPort) -> str:
    return f"host port {port.port}/{port.protocol}" + ("" if port.ip == EVERY_ADDRESS else f" on {port.ip}")


@dataclass(frozen=True)
class Resident:
    """A pod as its neighbours see it: for spread counts and required anti-affinity both ways, and the host
    ports it holds."""

    namespace: str
    labels: Mapping[str, str]
    anti_affinity: tuple[PodSelector, ...] = ()
    host_ports: tuple[HostPort, ...] = ()


@dataclass(frozen=True, eq=False)
class PodView:
    key: str
    uid: str
    namespace: str
    labels: Mapping[str, str]
    requests: Resources
    node_selector: Requirements = requirements.EVERYTHING
    # Required node-affinity terms, ORed; empty: none given.
    required_terms: tuple[Requirements, ...] = ()
    # Preferred node-affinity terms, heaviest first: (weight, term).
    preferred_terms: tuple[tuple[int, Requirements], ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    spreads: tuple[Spread, ...] = ()
    anti_affinity: tuple[PodSelector, ...] = ()
    host_ports: tuple[HostPort, ...] = ()
    # The Node requirements its persistent volumes allow, any one of them; empty: none given.
    volume_terms: tuple[Requirements, ...] = ()
    # The CSI volumes it attaches: (driver, "namespace/claim") pairs.
    attachments: frozenset = frozenset()
    # Why provisioning cannot place this pod, or None.
    unsupported: str | None = None
    # Why kube-scheduler runs it nowhere until something else changes (a claim it waits for), or None.
    unplaceable: str | None = None
    # The Node requirements the pod may go by, any one of them: the node selector with each required term.
    alternatives: tuple[Requirements, ...] = field(default=(), compare=False)
    # Equal for pods that are placed alike (same requests, labels and constraints).
    signature: tuple = field(default=(), compare=False)


def _text(value: Any, default: str = "") -> str:
    return value if isinstance(value, str) else default


def _mapping(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value: Any, where: str, maximum: int = MAX_ITEMS) -> list:
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > maximum:
        raise RequestError(where, f"must be a list of at most {maximum} items")
    return value


def _labels(value: Any) -> dict[str, str]:
    labels = _mapping(value)
    return {k: v for k, v in labels.items() if isinstance(k, str) and isinstance(v, str)}


def _container_requests(container: Any, where: str) -> Resources:
    if not isinstance(container, dict):
        raise RequestError(where, "must be an object")
    return resources.parse(_mapping(container.get("resources")).get("requests"), f"{where}.resources.requests")


def requests_of(spec: Mapping) -> Resources:
    """What the pod asks a Node for, as the scheduler counts it: the larger of its containers (with the
    sidecars, init containers of restartPolicy Always, which keep running) and each init container in
    turn (with the sidecars started before it), plus the pod overhead and one pod."""
    total = resources.ZERO
    for i, container in enumerate(_list(spec.get("containers"), "spec.containers", MAX_CONTAINERS)):
        total += _container_requests(container, f"spec.containers[{i}]")
    init = _list(spec.get("initContainers"), "spec.initContainers", MAX_CONTAINERS)
    if init:
        sidecars = resources.ZERO
        init_peak = resources.ZERO
        for i, container in enumerate(init):
            asked = _container_requests(container, f"spec.initContainers[{i}]")
            if container.get("restartPolicy") == "Always":
                total += asked
                sidecars += asked
                during = sidecars
            else:
                during = asked + sidecars
            init_peak = init_peak.maximum(during)
        total = total.maximum(init_peak)
    if spec.get("overhead") is not None:
        total += resources.parse(spec.get("overhead"), "spec.overhead")
    return total + resources.ONE_POD


def host_ports(spec: Mapping) -> tuple[HostPort, ...]:
    """The host ports the pod's containers hold, as kube-scheduler's NodePorts counts them: every port of a
    container (not an init container) with a ``hostPort``; a hostNetwork pod's container ports are host
    ports whatever the field says (the API server sets ``hostPort`` to ``containerPort`` for them, though not
    in a DaemonSet's template). An empty ``hostIP`` is every address, an empty protocol TCP."""
    host_network = spec.get("hostNetwork") is True
    found = []
    for i, container in enumerate(_list(spec.get("containers"), "spec.containers", MAX_CONTAINERS)):
        listed = container.get("ports") if isinstance(container, dict) else None
        if not listed:
            continue  # most containers: nothing to read
        for j, raw in enumerate(_list(listed, f"spec.containers[{i}].ports")):
            port = raw.get("hostPort") if isinstance(raw, dict) else None
            if not port and host_network and isinstance(raw, dict):
                port = raw.get("containerPort")
            if port is None or port == 0:
                if not isinstance(raw, dict):
                    raise RequestError(f"spec.containers[{i}].ports[{j}]", "must be an object")
                continue
            where = f"spec.containers[{i}].ports[{j}]"
            if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
                raise RequestError(f"{where}.hostPort", "must be a port number from 1 to 65535")
            protocol = raw.get("protocol") or "TCP"
            if protocol not in PROTOCOLS:
                raise RequestError(f"{where}.protocol", f"must be one of {', '.join(PROTOCOLS)}")
            found.append(HostPort(_text(raw.get("hostIP")) or EVERY_ADDRESS, protocol, port))
    return tuple(dict.fromkeys(found)) if found else ()


def _tolerations(spec: Mapping) -> tuple[Toleration, ...]:
    found = []
    for i, raw in enumerate(_list(spec.get("tolerations"), "spec.tolerations")):
        where = f"spec.tolerations[{i}]"
        if not isinstance(raw, dict):
            raise RequestError(where, "must be an object")
        key, operator = _text(raw.get("key")), raw.get("operator") or EQUAL
        value, effect = _text(raw.get("value")), raw.get("effect") or ""
        if operator not in (EXISTS, EQUAL):
            raise RequestError(f"{where}.operator", f"must be Exists or Equal, got {str(operator)[:40]!r}")
        if effect and effect not in TAINT_EFFECTS:
            raise RequestError(f"{where}.effect", f"must be one of {', '.join(TAINT_EFFECTS)}")
        if not key and operator != EXISTS:
            raise RequestError(f"{where}.key", "may be empty only with operator Exists")
        found.append(Toleration(key, operator, value if operator == EQUAL else "", effect))
    return tuple(found)


def _namespaces(term: Mapping, namespace: str, where: str) -> frozenset | None:
    chooser = term.get("namespaceSelector")
    if chooser is not None:
        if isinstance(chooser, dict) and not chooser.get("matchLabels") and not chooser.get("matchExpressions"):
            return None  # the empty selector: every namespace
        raise RequestError(f"{where}.namespaceSelector", "selecting namespaces by label is not supported")
    names = _list(term.get("namespaces"), f"{where}.namespaces")
    if not all(isinstance(n, str) for n in names):
        raise RequestError(f"{where}.namespaces", "must be a list of strings")
    return frozenset(names) if names else frozenset((namespace,))


def _with_label_keys(selector: Requirements, keys: Any, labels: Mapping[str, str], where: str) -> Requirements:
    """matchLabelKeys: only pods with the same values of these keys as this pod's own."""
    rules = {}
    for i, key in enumerate(_list(keys, where)):
        if not isinstance(key, str):
            raise RequestError(f"{where}[{i}]", "must be a string")
        if key in labels:
            rules[key] = Rule.of(IN, (labels[key],))
    return selector.intersect(Requirements(rules)) if rules else selector


def _pod_selector(term: Mapping, namespace: str, labels: Mapping[str, str], where: str) -> PodSelector | None:
    selector = requirements.from_label_selector(term.get("labelSelector"), f"{where}.labelSelector")
    if selector is None:
        return None
    selector = _with_label_keys(selector, term.get("matchLabelKeys"), labels, f"{where}.matchLabelKeys")
    return PodSelector(selector, _namespaces(term, namespace, where))


def _spreads(spec: Mapping, namespace: str, labels: Mapping[str, str]) -> tuple[Spread, ...]:
    found = []
    for i, raw in enumerate(_list(spec.get("topologySpreadConstraints"), "spec.topologySpreadConstraints")):
        where = f"spec.topologySpreadConstraints[{i}]"
        if not isinstance(raw, dict):
            raise RequestError(where, "must be an object")
        key, when = raw.get("topologyKey"), raw.get("whenUnsatisfiable")
        if when not in (DO_NOT_SCHEDULE, SCHEDULE_ANYWAY):
            raise RequestError(f"{where}.whenUnsatisfiable", "must be DoNotSchedule or ScheduleAnyway")
        if key not in (ZONE, HOSTNAME):
            if when == SCHEDULE_ANYWAY:
                continue
            raise RequestError(f"{where}.topologyKey", f"spreading over {str(key)[:60]!r} is not supported "
                                                       f"(only {ZONE} and {HOSTNAME})")
        skew = raw.get("maxSkew")
        if isinstance(skew, bool) or not isinstance(skew, int) or not 1 <= skew <= MAX_SKEW:
            raise RequestError(f"{where}.maxSkew", "must be a whole number from 1")
        selector = _pod_selector(raw, namespace, labels, where)
        if selector is None:
            continue  # a null selector matches no pod: nothing to spread
        found.append(Spread(key == ZONE, skew, selector, when == DO_NOT_SCHEDULE))
    return tuple(found)


def _anti_affinity(affinity: Mapping, namespace: str, labels: Mapping[str, str], *,
                   strict: bool) -> tuple[PodSelector, ...]:
    """Required pod anti-affinity over Nodes. ``strict``: any other shape is an error (a pending pod);
    otherwise it is left out (a pod already running, whose terms only keep others away)."""
    where = "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    found = []
    for i, term in enumerate(_list(_mapping(affinity.get("podAntiAffinity")).get(
            "requiredDuringSchedulingIgnoredDuringExecution"), where)):
        at = f"{where}[{i}]"
        try:
            if not isinstance(term, dict):
                raise RequestError(at, "must be an object")
            if term.get("topologyKey") != HOSTNAME:
                raise RequestError(f"{at}.topologyKey", f"anti-affinity over {str(term.get('topologyKey'))[:60]!r} "
                                                        f"is not supported (only {HOSTNAME})")
            if term.get("mismatchLabelKeys"):
                raise RequestError(f"{at}.mismatchLabelKeys", "is not supported")
            selector = _pod_selector(term, namespace, labels, at)
        except RequestError:
            if strict:
                raise
            continue
        if selector is not None:
            found.append(selector)
    return tuple(found)


def _node_affinity(affinity: Mapping) -> tuple[tuple[Requirements, ...], bool, tuple[tuple[int, Requirements], ...]]:
    """(required terms, whether required terms were given, preferred terms heaviest first)."""
    node = _mapping(affinity.get("nodeAffinity"))
    required_raw = node.get("requiredDuringSchedulingIgnoredDuringExecution")
    required: list[Requirements] = []
    given = required_raw is not None
    if given:
        where = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        if not isinstance(required_raw, dict):
            raise RequestError(where, "must be an object")
        for i, term in enumerate(_list(required_raw.get("nodeSelectorTerms"), f"{where}.nodeSelectorTerms")):
            parsed = requirements.from_node_selector_term(term, f"{where}.nodeSelectorTerms[{i}]")
            if parsed is not None:
                required.append(parsed)
    preferred = []
    where = "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"
    for i, item in enumerate(_list(node.get("preferredDuringSchedulingIgnoredDuringExecution"), where)):
        if not isinstance(item, dict):
            raise RequestError(f"{where}[{i}]", "must be an object")
        weight = item.get("weight")
        if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 100:
            raise RequestError(f"{where}[{i}].weight", "must be a whole number from 1 to 100")
        term = requirements.from_node_selector_term(item.get("preference"), f"{where}[{i}].preference")
        if term is not None:
            preferred.append((i, weight, term))
    preferred.sort(key=lambda p: (-p[1], p[0]))
    return tuple(required), given, tuple((w, t) for _, w, t in preferred)


def _alternatives(node_selector: Requirements, terms: tuple[Requirements, ...], given: bool) -> tuple:
    if not given:
        return (node_selector,) if node_selector.satisfiable else ()
    return tuple(a for a in (node_selector.intersect(t) for t in terms) if a.satisfiable)


def _signature(view: PodView) -> tuple:
    return (view.namespace, frozenset(view.labels.items()), view.requests, view.alternatives, view.preferred_terms,
            view.tolerations, view.spreads, view.anti_affinity, view.host_ports, view.volume_terms, view.attachments,
            view.unsupported, view.unplaceable)


def _key(meta: Mapping) -> tuple[str, str]:
    namespace = _text(meta.get("namespace"), "default")
    return namespace, f"{namespace}/{_text(meta.get('name'), '?')}"


def view(pod: Any) -> PodView:
    """The pod as provisioning sees it; never raises."""
    pod = _mapping(pod)
    meta, spec = _mapping(pod.get("metadata")), _mapping(pod.get("spec"))
    return _view(meta, spec, strict=True)


def from_daemonset(daemonset: Any) -> PodView:
    """The pod a DaemonSet would run on every Node it admits, keyed by the DaemonSet."""
    daemonset = _mapping(daemonset)
    meta = _mapping(daemonset.get("metadata"))
    template = _mapping(_mapping(daemonset.get("spec")).get("template"))
    own = _mapping(template.get("metadata"))
    return _view({**own, "name": meta.get("name"), "namespace": meta.get("namespace"), "uid": meta.get("uid")},
                 _mapping(template.get("spec")), strict=False)


def _view(meta: Mapping, spec: Mapping, *, strict: bool) -> PodView:
    """``strict``: a pending pod, whose every constraint counts. Otherwise a DaemonSet's pod, of which only
    the requests, the host ports and what admits it to a Node count."""
    namespace, key = _key(meta)
    labels = _labels(meta.get("labels"))
    base = dict(key=key, uid=_text(meta.get("uid")), namespace=namespace, labels=labels)
    try:
        affinity = _mapping(spec.get("affinity"))
        if strict and _mapping(affinity.get("podAffinity")).get("requiredDuringSchedulingIgnoredDuringExecution"):
            raise RequestError("spec.affinity.podAffinity", "required pod affinity is not supported")
        node_selector = requirements.from_node_selector(spec.get("nodeSelector"))
        terms, given, preferred = _node_affinity(affinity)
        result = PodView(**base, requests=requests_of(spec), node_selector=node_selector, required_terms=terms,
                         preferred_terms=preferred, tolerations=_tolerations(spec),
                         spreads=_spreads(spec, namespace, labels) if strict else (),
                         anti_affinity=_anti_affinity(affinity, namespace, labels, strict=True) if strict else (),
                         host_ports=host_ports(spec), alternatives=_alternatives(node_selector, terms, given))
    except RequestError as exc:
        result = PodView(**base, requests=resources.ONE_POD, unsupported=str(exc))
    object.__setattr__(result, "signature", _signature(result))
    return result


def with_volumes(view: PodView, terms: tuple[Requirements, ...], attachments: frozenset,
                 problem: str | None) -> PodView:
    """``view`` with what its persistent volumes ask (hooks.provisioning.volumes.PodVolumes' fields)."""
    if view.unsupported is not None:
        return view
    found = dataclasses.replace(view, volume_terms=terms, attachments=attachments, unplaceable=problem)
    object.__setattr__(found, "signature", _signature(found))
    return found


def resident(pod: Any) -> Resident:
    """A pod bound to a Node, as the pods placed beside it see it; never raises."""
    pod = _mapping(pod)
    meta, spec = _mapping(pod.get("metadata")), _mapping(pod.get("spec"))
    namespace, _ = _key(meta)
    labels = _labels(meta.get("labels"))
    try:
        anti = _anti_affinity(_mapping(spec.get("affinity")), namespace, labels, strict=False)
    except RequestError:
        anti = ()
    try:
        ports = host_ports(spec)
    except RequestError:
        ports = ()  # the API server validates ports: a bound pod's that do not read hold none we can know
    return Resident(namespace, labels, anti, ports)


def _conditions(pod: Mapping) -> list[dict]:
    found = _mapping(pod.get("status")).get("conditions")
    return [c for c in found if isinstance(c, dict)] if isinstance(found, list) else []


def _unschedulable_condition(pod: Mapping) -> dict | None:
    for condition in _conditions(pod):
        if (condition.get("type") == "PodScheduled" and condition.get("status") == "False"
                and condition.get("reason") == "Unschedulable"):
            return condition
    return None


def is_provisionable(pod: Any) -> bool:
    """Whether the pod is provisioning's to place: Pending, unbound, found unschedulable by the scheduler,
    not nominated to a Node by preemption (it runs there once its victims are gone), not terminating, not a
    DaemonSet's and not held by a scheduling gate."""
    pod = _mapping(pod)
    meta, spec, status = _mapping(pod.get("metadata")), _mapping(pod.get("spec")), _mapping(pod.get("status"))
    if status.get("phase") != "Pending" or spec.get("nodeName") or status.get("nominatedNodeName"):
        return False
    if meta.get("deletionTimestamp") or spec.get("schedulingGates"):
        return False
    owners = meta.get("ownerReferences")
    if isinstance(owners, list) and any(isinstance(o, dict) and o.get("kind") == "DaemonSet" for o in owners):
        return False
    return _unschedulable_condition(pod) is not None


def unschedulable_since(pod: Any) -> dt.datetime | None:
    """When the scheduler found the pod unschedulable (its PodScheduled condition's last transition)."""
    condition = _unschedulable_condition(_mapping(pod))
    return timefmt.parse(condition.get("lastTransitionTime")) if condition else None
