"""What a pod's persistent volumes ask of the Node it runs on, as kube-scheduler's VolumeBinding, VolumeZone and
NodeVolumeLimits read them (pure).

A pod's claims are its ``persistentVolumeClaim`` volumes and its generic
ephemeral volumes (the claim ``<pod>-<volume>``, made by the ephemeral volume
controller and owned by the pod). A bound claim's PersistentVolume says where
the pod may run: its required node affinity (any one of its terms) and its
zone labels. An unbound claim of a WaitForFirstConsumer StorageClass is
provisioned where the pod lands, within the class's allowedTopologies. A
missing claim or class, a claim being deleted or lost, a volume that does not
exist, or an unbound claim of a class that binds Immediately: kube-scheduler
runs the pod nowhere until that changes, so no Machine is made for it.

Attach limits: each CSI volume counts once per Node, by its driver (the
PersistentVolume's, else the class's provisioner; in-tree EBS counts as the
EBS CSI driver). A Node's CSINode says how many of a driver's volumes it can
attach; before it does, the instance type's figure stands (hooks.machines.capacity).

Every read is bounded and never raises: a malformed object reads as absent,
and a malformed field that says where a pod may go makes its pod's problem.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from hooks import provisioning_names
from hooks.contract import RequestError
from hooks.provisioning import pods, requirements
from hooks.provisioning.requirements import Requirements, Rule
from hooks.provisioning_names import IN

WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"
LOST = "Lost"
MAX_VOLUMES = 1000
# Combinations of the volumes' topology terms a pod is tried with, at most.
MAX_TERMS = 100
ZONE = provisioning_names.ZONE_LABEL
# Labels that mean the zone, on a PersistentVolume (VolumeZone) or as a CSI driver's topology key.
ZONE_ALIASES = ("failure-domain.beta.kubernetes.io/zone", "topology.ebs.csi.aws.com/zone")
# In-tree provisioners kube-scheduler counts as their CSI driver (CSI migration).
IN_TREE = {"kubernetes.io/aws-ebs": provisioning_names.EBS_CSI_DRIVER}


@dataclass(frozen=True)
class PodVolumes:
    """What a pod's claims ask: the Node requirements they allow (any one of ``terms``; none given: anywhere),
    the CSI volumes it attaches as (driver, claim) pairs, and why kube-scheduler would run it nowhere, or None."""

    terms: tuple[Requirements, ...] = ()
    attachments: frozenset = frozenset()
    problem: str | None = None


NONE = PodVolumes()


def _mapping(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _name(obj: Any) -> str:
    return _text(_mapping(_mapping(obj).get("metadata")).get("name"))


def claims_of(pod: Any) -> list[tuple[str, str, bool]]:
    """The pod's claims as (volume name, claim name, ephemeral), in the order of its volumes."""
    pod = _mapping(pod)
    raw = _mapping(pod.get("spec")).get("volumes")
    if not isinstance(raw, list):
        return []
    pod_name = _name(pod)
    found = []
    for volume in raw[:MAX_VOLUMES]:
        volume = _mapping(volume)
        name = _text(volume.get("name"))
        claim = _mapping(volume.get("persistentVolumeClaim"))
        if claim:
            found.append((name, _text(claim.get("claimName")), False))
        elif isinstance(volume.get("ephemeral"), dict):
            found.append((name, f"{pod_name}-{name}", True))
    return found


def claimed(raw_pods: Iterable[Any]) -> bool:
    """Whether a pod provisioning may place has a claim: only then does a round read volumes."""
    return any(claims_of(p) and pods.is_provisionable(p) for p in raw_pods)


def _normalized(found: Requirements) -> Requirements:
    """The zone aliases read as the zone label, which every provisioned Node carries."""
    aliases = [k for k in ZONE_ALIASES if k in found.rules]
    if not aliases:
        return found
    rules = {k: r for k, r in found.rules.items() if k not in aliases}
    for key in aliases:
        rules[ZONE] = rules[ZONE].intersect(found.rules[key]) if ZONE in rules else found.rules[key]
    return Requirements(rules)


def _terms(raw_terms: Any, where: str) -> tuple[Requirements, ...]:
    """NodeSelectorTerms, ORed; an empty term matches no Node and is left out."""
    if not isinstance(raw_terms, list) or len(raw_terms) > requirements.MAX_EXPRESSIONS:
        raise RequestError(where, f"must be a list of at most {requirements.MAX_EXPRESSIONS} terms")
    found = []
    for i, term in enumerate(raw_terms):
        parsed = requirements.from_node_selector_term(term, f"{where}[{i}]")
        if parsed is not None:
            found.append(_normalized(parsed))
    return tuple(found)


def _volume_terms(volume: Mapping) -> tuple[Requirements, ...] | None:
    """Where a PersistentVolume may be used: its required node affinity and its zone labels; None: anywhere."""
    where = f"PersistentVolume {_name(volume)}"
    affinity = _mapping(_mapping(_mapping(volume.get("spec")).get("nodeAffinity")).get("required"))
    terms = _terms(affinity.get("nodeSelectorTerms"), f"{where} spec.nodeAffinity.required.nodeSelectorTerms") \
        if affinity else None
    if terms == ():
        raise RequestError(f"{where} spec.nodeAffinity.required", "has no term a Node can meet")
    labels = _mapping(_mapping(volume.get("metadata")).get("labels"))
    zones: Rule | None = None
    for key in (ZONE, *ZONE_ALIASES):
        value = labels.get(key)
        if isinstance(value, str) and value:
            rule = Rule.of(IN, value.split("__"))  # VolumeZone: several zones joined by "__"
            zones = rule if zones is None else zones.intersect(rule)
    if zones is None:
        return terms
    pinned = Requirements({ZONE: zones})
    return tuple(t.intersect(pinned) for t in terms) if terms is not None else (pinned,)


def _class_terms(storage_class: Mapping) -> tuple[Requirements, ...] | None:
    """Where a WaitForFirstConsumer class provisions: its allowedTopologies (any one term); None: anywhere."""
    raw = storage_class.get("allowedTopologies")
    if not raw:
        return None
    where = f"StorageClass {_name(storage_class)} allowedTopologies"
    if not isinstance(raw, list) or len(raw) > requirements.MAX_EXPRESSIONS:
        raise RequestError(where, f"must be a list of at most {requirements.MAX_EXPRESSIONS} terms")
    as_node_terms = []
    for i, term in enumerate(raw):
        expressions = _mapping(term).get("matchLabelExpressions")
        if not isinstance(expressions, list):
            raise RequestError(f"{where}[{i}].matchLabelExpressions", "must be a list")
        as_node_terms.append({"matchExpressions": [{**_mapping(e), "operator": IN} for e in expressions]})
    found = _terms(as_node_terms, where)
    if not found:
        raise RequestError(where, "has no term a Node can meet")
    return found


def _driver(name: str) -> str:
    return IN_TREE.get(name, name)


def _combined(terms: tuple[Requirements, ...], more: tuple[Requirements, ...]) -> tuple[Requirements, ...]:
    """Both at once: every satisfiable pair of one term of each."""
    if not terms:
        return more
    found = []
    for mine in terms:
        for theirs in more:
            both = mine.intersect(theirs)
            if both.satisfiable and both not in found:
                found.append(both)
    if len(found) > MAX_TERMS:
        raise RequestError("spec.volumes", f"their topologies combine in more than {MAX_TERMS} ways")
    return tuple(found)


class Storage:
    """The round's PersistentVolumeClaims, PersistentVolumes, StorageClasses and CSINodes, by name."""

    def __init__(self, claims: Mapping[tuple[str, str], dict], volumes: Mapping[str, dict],
                 classes: Mapping[str, dict], node_limits: Mapping[str, Mapping[str, int | None]]):
        self.claims, self.volumes, self.classes, self.node_limits = claims, volumes, classes, node_limits

    @classmethod
    def of(cls, raw: Mapping) -> Storage:
        """From what gather read: {"claims", "volumes", "storageClasses", "csiNodes"}, each a list of objects."""
        def listed(key: str) -> list[dict]:
            found = raw.get(key)
            return [o for o in found if isinstance(o, dict) and _name(o)] if isinstance(found, list) else []
        claims = {}
        for claim in listed("claims"):
            namespace = _text(_mapping(claim.get("metadata")).get("namespace")) or "default"
            claims[(namespace, _name(claim))] = claim
        limits: dict[str, dict[str, int | None]] = {}
        for node in listed("csiNodes"):
            drivers = _mapping(node.get("spec")).get("drivers")
            found: dict[str, int | None] = {}
            for driver in drivers if isinstance(drivers, list) else []:
                driver = _mapping(driver)
                count = _mapping(driver.get("allocatable")).get("count")
                if _text(driver.get("name")):
                    found[driver["name"]] = count if isinstance(count, int) and not isinstance(count, bool) \
                        and count >= 0 else None
            limits[_name(node)] = found
        return cls(claims, {_name(v): v for v in listed("volumes")},
                   {_name(c): c for c in listed("storageClasses")}, limits)

    def _claim(self, pod: Mapping, volume: str, claim_name: str, ephemeral: bool) -> dict:
        """The claim, or RequestError saying why kube-scheduler would not run the pod with it."""
        meta = _mapping(pod.get("metadata"))
        namespace = _text(meta.get("namespace")) or "default"
        where = f"volume {volume!r}"
        claim = self.claims.get((namespace, claim_name))
        if claim is None:
            raise RequestError(where, f"PersistentVolumeClaim {claim_name} does not exist"
                                      + (" yet (its pod's ephemeral volume makes it)" if ephemeral else ""))
        claim_meta = _mapping(claim.get("metadata"))
        if ephemeral:
            owners = claim_meta.get("ownerReferences")
            if not any(isinstance(o, dict) and o.get("controller") and o.get("uid") == meta.get("uid")
                       for o in (owners if isinstance(owners, list) else [])):
                raise RequestError(where, f"PersistentVolumeClaim {claim_name} was not made for this pod")
        if claim_meta.get("deletionTimestamp"):
            raise RequestError(where, f"PersistentVolumeClaim {claim_name} is being deleted")
        if _mapping(claim.get("status")).get("phase") == LOST:
            raise RequestError(where, f"PersistentVolumeClaim {claim_name} lost its PersistentVolume")
        return claim

    def _bound(self, claim: Mapping, where: str, claim_name: str) -> dict | None:
        """The PersistentVolume the claim is bound to; None when unbound."""
        name = _text(_mapping(claim.get("spec")).get("volumeName"))
        if not name:
            return None
        volume = self.volumes.get(name)
        if volume is None:
            raise RequestError(where, f"PersistentVolumeClaim {claim_name} names PersistentVolume {name}, "
                                      "which does not exist")
        if _mapping(volume.get("metadata")).get("deletionTimestamp"):
            raise RequestError(where, f"PersistentVolume {name} is being deleted")
        return volume

    def _class(self, claim: Mapping, where: str, claim_name: str) -> dict:
        """The class of an unbound claim, if it provisions where the pod lands."""
        name = _text(_mapping(claim.get("spec")).get("storageClassName"))
        if not name:
            raise RequestError(where, f"PersistentVolumeClaim {claim_name} is not bound and names no StorageClass: "
                                      "kube-scheduler waits for it to be bound")
        storage_class = self.classes.get(name)
        if storage_class is None:
            raise RequestError(where, f"StorageClass {name} of PersistentVolumeClaim {claim_name} does not exist")
        if storage_class.get("volumeBindingMode") != WAIT_FOR_FIRST_CONSUMER:
            raise RequestError(where, f"PersistentVolumeClaim {claim_name} is not bound yet and its StorageClass "
                                      f"{name} binds Immediately: kube-scheduler waits for it to be bound")
        return storage_class

    def of_pod(self, pod: Any) -> PodVolumes:
        """What the pod's claims ask of its Node (NONE for a pod without claims); never raises."""
        pod = _mapping(pod)
        found = claims_of(pod)
        if not found:
            return NONE
        namespace = _text(_mapping(pod.get("metadata")).get("namespace")) or "default"
        terms: tuple[Requirements, ...] = ()
        attachments = set()
        try:
            for volume, claim_name, ephemeral in found:
                where = f"volume {volume!r}"
                claim = self._claim(pod, volume, claim_name, ephemeral)
                bound = self._bound(claim, where, claim_name)
                if bound is not None:
                    more = _volume_terms(bound)
                    driver = self._volume_driver(bound)
                else:
                    storage_class = self._class(claim, where, claim_name)
                    more = _class_terms(storage_class)
                    driver = _driver(_text(storage_class.get("provisioner")))
                if more is not None:
                    terms = _combined(terms, more)
                    if not terms:
                        raise RequestError("spec.volumes", "no Node can meet the topologies of all its volumes")
                if driver:
                    attachments.add((driver, f"{namespace}/{claim_name}"))
        except RequestError as exc:
            return PodVolumes(problem=str(exc))
        return PodVolumes(terms, frozenset(attachments))

    @staticmethod
    def _volume_driver(volume: Mapping) -> str:
        spec = _mapping(volume.get("spec"))
        if spec.get("csi") is not None:
            return _text(_mapping(spec.get("csi")).get("driver"))
        if spec.get("awsElasticBlockStore") is not None:
            return provisioning_names.EBS_CSI_DRIVER
        return ""

    def attached(self, pod: Any) -> frozenset:
        """The CSI volumes a pod bound to a Node holds there, as (driver, claim) pairs; those that do not read
        hold none."""
        pod = _mapping(pod)
        namespace = _text(_mapping(pod.get("metadata")).get("namespace")) or "default"
        found = set()
        for _, claim_name, _ in claims_of(pod):
            claim = self.claims.get((namespace, claim_name))
            if claim is None:
                continue
            volume = self.volumes.get(_text(_mapping(claim.get("spec")).get("volumeName")))
            if volume is not None:
                driver = self._volume_driver(volume)
            else:
                storage_class = self.classes.get(_text(_mapping(claim.get("spec")).get("storageClassName")))
                driver = _driver(_text(storage_class.get("provisioner"))) if storage_class else ""
            if driver:
                found.add((driver, f"{namespace}/{claim_name}"))
        return frozenset(found)

    def limits(self, node: str, by_type: Mapping[str, int]) -> dict[str, int]:
        """How many volumes of each driver the Node can attach: its CSINode's counts (a driver it lists without
        one has no limit), else the instance type's ``by_type``."""
        found = dict(by_type)
        for driver, count in self.node_limits.get(node, {}).items():
            if count is None:
                found.pop(driver, None)
            else:
                found[driver] = count
        return found


def over_limit(attached: frozenset, wanted: frozenset, limits: Mapping[str, int]) -> tuple[str, int] | None:
    """The (driver, limit) whose limit a Node holding ``attached`` exceeds once it also attaches ``wanted``."""
    for driver in sorted({d for d, _ in wanted}):
        limit = limits.get(driver)
        if limit is not None and len({a for a in attached | wanted if a[0] == driver}) > limit:
            return driver, limit
    return None
