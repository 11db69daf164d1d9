"""Consolidation of a provisioning NodePool: what its two methods, Empty and Underutilized, share (pure).

Candidates. A Machine of the pool may be one when it is Initialized, not
being deleted, not being disrupted (the pool's records, its disruption mark,
an interruption notice), its Node is Ready, schedulable and not leaving, no
pending pod is placed on it by this round's scheduling, and neither the
Machine, its Node nor a pod running there carries
``nodewarden.io/do-not-disrupt: "true"``. Then it is:

- Empty (hooks.nodepools.methods.empty): its Node runs no pod but DaemonSet
  pods and static (mirror) pods, which go with the Node. Finished and
  terminating pods count for nothing.
- Underutilized (hooks.nodepools.methods.underutilized, policy
  WhenEmptyOrUnderutilized only): every other pod there is owned by a
  controller (a bare pod would not come back), has no host port (which the
  scheduler does not model), may be evicted now (no PodDisruptionBudget
  in its way, hooks.machines.pod_budgets), and fits on the pool's other Nodes as they are
  now (Initialized, Ready, schedulable, not disrupting, not taking pending
  pods this round, not Empty candidates), by hooks.provisioning.scheduling
  with each pod's constraints, once the pods of the pool's Machines already
  leaving took the room they will need. A pod with a persistent volume claim may only
  move within its Node's zone (EBS volumes are zonal).

The clock. ``status.consolidation`` holds each candidate as ``{machine, uid,
reason, since}``: ``since`` is carried from the previous status while the
Machine stays a candidate for the same reason, and the record is dropped the
first round it is not (a lost status only delays: the clock starts again).
An Underutilized clock never starts before its newest pod started, so a pod
just placed is not moved at once. A candidate is offered only when it has
been one for ``consolidateAfter`` and this round, on fresh reads, still finds
it one; ``consolidateAfter: Never`` makes no candidate.

No churn:

- Nothing is offered while the round launches Machines of this pool for
  pending pods: those pods are the demand consolidation would otherwise
  fight (the candidates keep their clocks).
- Removals are budgeted like every disruption the pool chooses (reasons
  Empty and Underutilized), counting the Machines already disrupting.
- Every due Empty candidate may go in one pass (no pod moves); at most one
  Underutilized candidate goes per pass, and the next pass judges the rest
  on what the API server holds then.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from hooks import conditions, machine_names, objects, provisioning_names, timefmt
from hooks.machines import budgets, pod_budgets, signals
from hooks.machines.spec import ProvisioningSpec
from hooks.nodepools.state import Candidate, Pass, PoolState
from hooks.provisioning import inputs, slots
from hooks.provisioning.resources import Resources

MAX_RECORDS = 1000
_RECORD_KEYS = {"machine": str, "uid": str, "reason": str, "since": str}


@dataclass
class Member:
    machine: dict
    node: dict | None
    pods: list[dict]  # bound to its Node and not finished

    @property
    def name(self) -> str:
        return self.machine["metadata"]["name"]

    @property
    def node_name(self) -> str:
        return slots.name_of(self.node)


@dataclass
class Found:
    member: Member
    reason: str
    since: dt.datetime
    moving: tuple = ()  # the pods it would evict, as they would move (hooks.nodepools.methods.underutilized)
    asked: Resources = Resources()  # what they request
    placement: Mapping[str, str] = field(default_factory=dict)  # each pod ("ns/name") -> the Node it fits on
    allocatable: Resources = Resources()

    def record(self) -> dict:
        meta = self.member.machine["metadata"]
        return {"machine": meta["name"], "uid": meta["uid"], "reason": self.reason, "since": timefmt.fmt(self.since)}


@dataclass
class Family:
    """What the consolidation methods of one pass share: read once, before the first of them."""

    policy: ProvisioningSpec
    after: float
    carried: dict  # (uid, reason) -> since, from the previous status
    pool: str
    able: list[Member]  # settled: a candidate or a target
    eligible: list[Member]  # able, and nothing says do-not-disrupt
    launching: int  # pending pods the round launches Machines of this pool for
    disruption_budgets: pod_budgets.Budgets  # the PodDisruptionBudgets the round read
    found: list[Found] = field(default_factory=list)
    held: int = 0  # due candidates held back because the round launches Machines for pending pods


def records_of(status: Any) -> list[dict]:
    """The pool's consolidation records as written before, read through bounds: a malformed one is dropped."""
    raw = status.get("consolidation") if isinstance(status, dict) else None
    found = []
    for item in raw if isinstance(raw, list) else []:
        if not isinstance(item, dict):
            continue
        entry = {k: item[k] for k, kind in _RECORD_KEYS.items() if isinstance(item.get(k), kind)}
        if entry.get("machine") and entry.get("uid") and entry.get("reason") in signals.CONSOLIDATION \
                and timefmt.parse(entry.get("since")):
            found.append(entry)
    return found[:MAX_RECORDS]


def family(state: PoolState, progress: Pass) -> Family | None:
    """The pass's consolidation view (made by the first method that asks); None when the pool does not
    consolidate in this call: not a provisioning pool, no round read, or ``consolidateAfter: Never``."""
    if progress.consolidating is not None:
        return progress.consolidating
    provisioned = state.provisioned
    policy = state.spec.provisioning
    if policy is None or provisioned is None or provisioned.readings is None:
        return None
    if progress.consolidation is None:
        progress.consolidation = []
    if policy.consolidate_after is None:
        return None
    readings = provisioned.readings
    by_name = {slots.name_of(n): n for n in readings.nodes if isinstance(n, dict)}
    on_nodes = inputs.pods_by_node(readings.bound)
    members = [_member(m, by_name, on_nodes) for m in state.machines if not m["metadata"]["deletionTimestamp"]]
    placed = set(provisioned.placed_slots)
    able = [m for m in members if _settled(m, progress.held) and m.name not in placed and m.node_name not in placed]
    progress.consolidating = Family(
        policy=policy, after=policy.consolidate_after,
        carried={(r["uid"], r["reason"]): timefmt.parse(r["since"]) for r in state.consolidation},
        pool=state.name, able=able, eligible=[m for m in able if not _do_not_disrupt(m)],
        launching=provisioned.status.get("pendingPods", 0),
        disruption_budgets=pod_budgets.Budgets(readings.disruption_budgets))
    return progress.consolidating


def take(state: PoolState, progress: Pass, view: Family, cand: Found, message: str) -> None:
    """Offer a due candidate: held while the round launches for pending pods, else within the budgets."""
    if view.launching > 0:
        view.held += 1
        return
    progress.offer(state, Candidate(cand.member.machine, cand.reason, cand.since, message=message,
                                    placement=dict(cand.placement), node=cand.member.node_name), leaves=True)


def settle(progress: Pass, view: Family) -> None:
    """The status's consolidation records after this pass: every candidate found, by Machine."""
    progress.consolidation = sorted((f.record() for f in view.found), key=lambda r: r["machine"])[:MAX_RECORDS]


def report(state: PoolState, progress: Pass) -> list[str]:
    """Why due candidates did not go: the round's launches, the budgets."""
    view = progress.consolidating
    if view is None:
        return []
    said = []
    if view.held:
        said.append(f"consolidation of {view.held} Machines held: this round launches Machines for "
                    f"{view.launching} pending pods")
    for reason in signals.CONSOLIDATION:
        count = progress.blocked.get(reason)
        if count:
            allowed = budgets.allowed(state.spec.budgets, reason, progress.size, state.now)
            said.append(f"consolidation of {count} Machines ({reason}) held by the disruption budget: "
                        f"{progress.disrupting} of at most {allowed} disrupting")
    return said


def _member(machine: dict, nodes: Mapping[str, dict], on_nodes: Mapping[str, Sequence[dict]]) -> Member:
    node = nodes.get(machine["status"].get("nodeName") or "")
    labels = (node or {}).get("metadata", {}).get("labels") if node is not None else None
    if not isinstance(labels, dict) or labels.get(machine_names.MACHINE_LABEL) != machine["metadata"]["name"]:
        return Member(machine, None, [])
    bound = on_nodes.get(slots.name_of(node)) or ()
    return Member(machine, node, [p for p in bound if isinstance(p, dict) and not slots.finished(p)])


def _settled(member: Member, held: set[str]) -> bool:
    """Initialized, with a usable Node, and going nowhere: neither a candidate nor a target otherwise."""
    machine = member.machine
    if member.node is None or not conditions.is_true(machine["status"], machine_names.INITIALIZED):
        return False
    if member.name in held or signals.of(machine, signals.DISRUPTION_ANNOTATION) is not None \
            or signals.of(machine, signals.INTERRUPTION_ANNOTATION) is not None:
        return False
    return slots.usable(member.node)


def _annotations(obj: Any) -> Mapping:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    found = meta.get("annotations") if isinstance(meta, dict) else None
    return found if isinstance(found, dict) else {}


def _marked(obj: Any) -> bool:
    return _annotations(obj).get(provisioning_names.DO_NOT_DISRUPT) == "true"


def terminating(pod: dict) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def _do_not_disrupt(member: Member) -> bool:
    """The user's word on the Machine, its Node or a pod that is not leaving anyway."""
    return _marked(member.machine) or _marked(member.node) \
        or any(_marked(p) for p in member.pods if not terminating(p))


def controller(pod: dict) -> dict | None:
    refs = (pod.get("metadata") or {}).get("ownerReferences")
    for ref in refs if isinstance(refs, list) else []:
        if isinstance(ref, dict) and ref.get("controller") is True:
            return ref
    return None


def _stays_with_node(pod: dict) -> bool:
    """A DaemonSet's pod or a static (mirror) pod: it goes with the Node and is never moved."""
    if objects.daemonset_of(pod) or objects.MIRROR_ANNOTATION in _annotations(pod):
        return True
    owner = controller(pod)
    return owner is not None and owner.get("kind") == "Node"


def moving(member: Member) -> list[dict]:
    """The pods removing the Machine would move elsewhere."""
    return [p for p in member.pods if not terminating(p) and not _stays_with_node(p)]


def _claims_volume(pod: dict) -> bool:
    volumes = (pod.get("spec") or {}).get("volumes")
    return any(isinstance(v, dict) and (v.get("persistentVolumeClaim") or v.get("ephemeral"))
               for v in (volumes if isinstance(volumes, list) else []))


def moved(pod: dict, zone: str | None) -> dict | None:
    """The pod as the scheduler would place it elsewhere; None when it may not move at all. A pod with a
    volume claim keeps to its Node's zone."""
    if not _claims_volume(pod):
        return pod
    if not zone:
        return None
    spec = dict(pod.get("spec") or {})
    selector = spec.get("nodeSelector") if isinstance(spec.get("nodeSelector"), dict) else {}
    if selector.get(provisioning_names.ZONE_LABEL, zone) != zone:
        return None
    spec["nodeSelector"] = {**selector, provisioning_names.ZONE_LABEL: zone}
    return {**pod, "spec": spec}


def moving_from(machine: dict, state: PoolState) -> list[dict]:
    """The pods that leave with ``machine`` and will need room elsewhere, as the scheduler would place them
    (this call's round read them); none when its Node was not read."""
    readings = state.provisioned.readings if state.provisioned is not None else None
    if readings is None:
        return []
    by_name = {slots.name_of(n): n for n in readings.nodes if isinstance(n, dict)}
    member = _member(machine, by_name, inputs.pods_by_node(readings.bound))
    if member.node is None:
        return []
    zone = ((member.node.get("metadata") or {}).get("labels") or {}).get(provisioning_names.ZONE_LABEL)
    return [p for p in (moved(pod, zone) for pod in moving(member)) if p is not None]


def since(view: Family, member: Member, reason: str, now: dt.datetime,
          not_before: dt.datetime | None = None) -> dt.datetime:
    """When the Machine became a candidate for ``reason``: carried from the status, else now."""
    found = view.carried.get((member.machine["metadata"]["uid"], reason))
    if found is None or found > now:
        found = now
    if not_before is not None:
        found = max(found, min(not_before, now))
    return found


def due(cand: Found, after: float, now: dt.datetime) -> bool:
    return (now - cand.since).total_seconds() >= after
