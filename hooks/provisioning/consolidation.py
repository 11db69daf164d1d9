"""Consolidation of a provisioning NodePool: which Machines are Empty or Underutilized, and which go now (pure).

Candidates. A Machine of the pool may be one when it is Initialized, not
being deleted, not being disrupted (the pool's records, its disruption mark,
an interruption notice), its Node is Ready, schedulable and not leaving, no
pending pod is placed on it by this round's scheduling, and neither the
Machine, its Node nor a pod running there carries
``nodewarden.io/do-not-disrupt: "true"``. Then it is:

- Empty: its Node runs no pod but DaemonSet pods and static (mirror) pods,
  which go with the Node. Finished and terminating pods count for nothing.
- Underutilized (policy WhenEmptyOrUnderutilized only): every other pod
  there is owned by a controller (a bare pod would not come back), has no
  host port (which the scheduler does not model), and fits on the pool's
  other Nodes as they are now (Initialized, Ready, schedulable, not
  disrupting, not taking pending pods this round, not Empty candidates),
  by hooks.provisioning.scheduling with each pod's constraints. A pod with
  a persistent volume claim may only move within its Node's zone (EBS
  volumes are zonal).

The clock. ``status.consolidation`` holds each candidate as ``{machine, uid,
reason, since}``: ``since`` is carried from the previous status while the
Machine stays a candidate for the same reason, and the record is dropped the
first round it is not (a lost status only delays: the clock starts again).
An Underutilized clock never starts before its newest pod started, so a pod
just placed is not moved at once. A candidate becomes a removal only when
it has been one for ``consolidateAfter`` and this round, on fresh reads,
still finds it one; ``consolidateAfter: Never`` makes no candidate.

No churn:

- Nothing is removed while the round launches Machines of this pool for
  pending pods: those pods are the demand consolidation would otherwise
  fight (the candidates keep their clocks).
- Removals are budgeted like every disruption the pool chooses
  (hooks.machines.budgets, reasons Empty and Underutilized), counting the
  Machines already disrupting.
- Every due Empty candidate may go in one round (no pod moves); at most one
  Underutilized candidate goes per round, and the next round judges the rest
  on what the API server holds then. The one chosen frees the most for the
  least moved: fewest pods to move, then least cpu, then least memory
  requested, then the most allocatable cpu and memory, then by name.

The search. Checking a Machine is a scheduling run over the pool's Nodes,
so Underutilized Machines are checked in the order of the choice and the
search stops at the first due one, which is the one the choice would take
of them all: the Machines past it keep their records as they were (one
removal a round must not restart their clocks) and are checked before they
can go. It also stops after ``MAX_UNDERUTILIZED_CHECKS`` checks: Machines
it did not reach are no candidates that round, so when that many cheaper
Machines cannot move, a dearer one is not looked at until they can or go.
The pods on the Nodes are indexed once for all the checks
(hooks.provisioning.residents).

The pods an Underutilized removal evicts fit on the remaining Nodes by
construction: the scheduler placed each on a Node that stays (``placement``
says where) with what runs there counted. Once evicted and pending, the
next round's scheduling tries existing Nodes before any new Machine, so they
go where they fitted and launch nothing, unless other pods took that room
in between, which is new demand. PodDisruptionBudgets are the drain's to
respect when the Machine leaves, not consolidation's.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, Collection, Iterable, Mapping, Sequence

from hooks import conditions, machine_names, objects, provisioning_names, timefmt
from hooks.contract import RequestError
from hooks.machines import budgets, signals
from hooks.machines.spec import WHEN_EMPTY_OR_UNDERUTILIZED, ProvisioningSpec
from hooks.provisioning import pods, scheduling, slots
from hooks.provisioning.resources import Resources

MAX_RECORDS = 1000
# Scheduling runs the Underutilized search makes per round, each over the pool's Nodes: what bounds its cost.
MAX_UNDERUTILIZED_CHECKS = 25
_RECORD_KEYS = {"machine": str, "uid": str, "reason": str, "since": str}


@dataclass(frozen=True)
class BudgetState:
    """The pool's budgets as hooks.machines.disruption leaves them in this call."""

    rules: tuple[budgets.Budget, ...] = budgets.DEFAULT
    size: int = 0  # disruption.budget_size
    disrupting: int = 0  # disruption.Outcome.disrupting: Machines disrupting, those started in this call too
    machines: frozenset[str] = frozenset()  # disruption.Outcome.held: names of Machines being disrupted


@dataclass(frozen=True)
class Removal:
    machine: str
    uid: str
    node: str
    reason: str  # signals.EMPTY or signals.UNDERUTILIZED
    since: dt.datetime
    placement: Mapping[str, str]  # each pod it evicts ("ns/name") -> the Node it fits on; Empty: none
    message: str


@dataclass
class Consolidation:
    candidates: list[dict] = field(default_factory=list)  # status.consolidation after this round
    remove: list[Removal] = field(default_factory=list)  # in order
    blocked: dict[str, int] = field(default_factory=dict)  # due candidates a budget held back, by reason
    held: int = 0  # due candidates held back because the round launches Machines for pending pods
    events: list[str] = field(default_factory=list)  # Event texts for the pool: removals, then holds


@dataclass
class _Member:
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
class _Found:
    member: _Member
    reason: str
    since: dt.datetime
    moving: tuple = ()  # the pods it would evict, as they would move (_moved)
    asked: Resources = Resources()  # what they request
    placement: Mapping[str, str] = field(default_factory=dict)
    allocatable: Resources = Resources()

    def record(self) -> dict:
        meta = self.member.machine["metadata"]
        return {"machine": meta["name"], "uid": meta["uid"], "reason": self.reason, "since": timefmt.fmt(self.since)}


def records_of(status: Any) -> list[dict]:
    """The pool's consolidation records as written before, read through bounds: a malformed one is dropped."""
    raw = status.get("consolidation") if isinstance(status, dict) else None
    found = []
    for item in raw if isinstance(raw, list) else []:
        if not isinstance(item, dict):
            continue
        record = {k: item[k] for k, kind in _RECORD_KEYS.items() if isinstance(item.get(k), kind)}
        if record.get("machine") and record.get("uid") and record.get("reason") in signals.CONSOLIDATION \
                and timefmt.parse(record.get("since")):
            found.append(record)
    return found[:MAX_RECORDS]


def decide(machines: Sequence[dict], nodes: Iterable[dict], pods_by_node: Mapping[str, Sequence[dict]],
           placed_slots: Collection[str], launching: int, provisioning: ProvisioningSpec, previous: Sequence[dict],
           budget: BudgetState, now: dt.datetime) -> Consolidation:
    """This round's consolidation of one provisioning pool.

    ``machines``: the pool's Machines as the API server lists them now
    (hooks.machines.pool.machines_of); ``nodes``: Nodes read now (any
    pool's; a Machine's is the one its status names that carries its
    ``nodewarden.io/machine`` label); ``pods_by_node``: the pods bound to
    each of them, from one successful list; ``placed_slots``: the Slot
    names (Node or Machine names) this round's scheduling placed pending
    pods on; ``launching``: the pending pods the round launches Machines of
    this pool for (new claims and in-flight Machines); ``provisioning``:
    the pool's consolidationPolicy and consolidateAfter; ``previous``:
    ``records_of`` the pool's status.
    """
    out = Consolidation()
    after = provisioning.consolidate_after
    if after is None:
        return out
    carried = {(r["uid"], r["reason"]): timefmt.parse(r["since"]) for r in previous}
    by_name = {slots.name_of(n): n for n in nodes if isinstance(n, dict)}
    members = [_member(m, by_name, pods_by_node) for m in machines if not m["metadata"]["deletionTimestamp"]]
    placed = set(placed_slots)
    able = [m for m in members if _settled(m, budget) and m.name not in placed and m.node_name not in placed]
    eligible = [m for m in able if not _do_not_disrupt(m)]
    found: list[_Found] = []
    for member in eligible:
        if _empty(member):
            found.append(_Found(member, signals.EMPTY, _since(carried, member, signals.EMPTY, now)))
    state = _Choice(budget, launching, now, out)
    for cand in sorted((f for f in found if _due(f, after, now)), key=lambda f: (f.since, f.member.name)):
        state.take(cand)
    if provisioning.consolidation_policy == WHEN_EMPTY_OR_UNDERUTILIZED:
        # An Empty candidate is no target: removing it moves nothing, so filling it would be churn.
        empty = {f.member.name for f in found}
        pool = machines[0]["metadata"]["labels"].get(machine_names.POOL_LABEL, "") if machines else ""
        room = {m.name: slots.of_node(m.node, m.pods, pool, m.name) for m in able if m.name not in empty}
        movable = [_movable(m, pool, room, carried, now) for m in eligible if m.name not in empty]
        checked, chosen = _search(sorted((c for c in movable if c is not None), key=_order), room, carried, after,
                                  now)
        found.extend(checked)
        if chosen is not None:
            state.take(chosen)
    out.candidates = sorted((f.record() for f in found), key=lambda r: r["machine"])[:MAX_RECORDS]
    state.report()
    return out


class _Choice:
    """Due candidates into removals, within the holds and the budgets."""

    def __init__(self, budget: BudgetState, launching: int, now: dt.datetime, out: Consolidation):
        self.budget, self.launching, self.now, self.out = budget, launching, now, out
        self.disrupting = budget.disrupting

    def take(self, cand: _Found) -> None:
        out, placement = self.out, cand.placement
        if self.launching > 0:
            out.held += 1
            return
        allowed = budgets.allowed(self.budget.rules, cand.reason, self.budget.size, self.now)
        if allowed is not None and self.disrupting >= allowed:
            out.blocked[cand.reason] = out.blocked.get(cand.reason, 0) + 1
            return
        self.disrupting += 1
        member, since = cand.member, timefmt.fmt(cand.since)
        if cand.reason == signals.EMPTY:
            message = (f"Machine {member.name} (Node {member.node_name}) has run no pod but DaemonSet pods since "
                       f"{since}: removing it (Empty)")
        else:
            onto = sorted(set(placement.values()))
            message = (f"Machine {member.name} (Node {member.node_name}): its {len(placement)} pods have fitted on "
                       f"the pool's other Nodes since {since}: removing it (Underutilized); they fit on "
                       f"{', '.join(onto)}")
        out.remove.append(Removal(member.name, member.machine["metadata"]["uid"], member.node_name, cand.reason,
                                  cand.since, dict(placement), message))
        out.events.append(message)

    def report(self) -> None:
        out = self.out
        if out.held:
            out.events.append(f"consolidation of {out.held} Machines held: this round launches Machines for "
                              f"{self.launching} pending pods")
        for reason, count in sorted(out.blocked.items()):
            allowed = budgets.allowed(self.budget.rules, reason, self.budget.size, self.now)
            out.events.append(f"consolidation of {count} Machines ({reason}) held by the disruption budget: "
                              f"{self.disrupting} of at most {allowed} disrupting")


def _member(machine: dict, nodes: Mapping[str, dict], pods_by_node: Mapping[str, Sequence[dict]]) -> _Member:
    node = nodes.get(machine["status"].get("nodeName") or "")
    labels = (node or {}).get("metadata", {}).get("labels") if node is not None else None
    if not isinstance(labels, dict) or labels.get(machine_names.MACHINE_LABEL) != machine["metadata"]["name"]:
        return _Member(machine, None, [])
    bound = pods_by_node.get(slots.name_of(node)) or ()
    return _Member(machine, node, [p for p in bound if isinstance(p, dict) and not slots.finished(p)])


def _settled(member: _Member, budget: BudgetState) -> bool:
    """Initialized, with a usable Node, and going nowhere: neither a candidate nor a target otherwise."""
    machine = member.machine
    if member.node is None or not conditions.is_true(machine["status"], machine_names.INITIALIZED):
        return False
    if member.name in budget.machines or signals.of(machine, signals.DISRUPTION_ANNOTATION) is not None \
            or signals.of(machine, signals.INTERRUPTION_ANNOTATION) is not None:
        return False
    return slots.usable(member.node)


def _annotations(obj: Any) -> Mapping:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    found = meta.get("annotations") if isinstance(meta, dict) else None
    return found if isinstance(found, dict) else {}


def _marked(obj: Any) -> bool:
    return _annotations(obj).get(provisioning_names.DO_NOT_DISRUPT) == "true"


def _terminating(pod: dict) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def _do_not_disrupt(member: _Member) -> bool:
    """The user's word on the Machine, its Node or a pod that is not leaving anyway."""
    return _marked(member.machine) or _marked(member.node) \
        or any(_marked(p) for p in member.pods if not _terminating(p))


def _controller(pod: dict) -> dict | None:
    refs = (pod.get("metadata") or {}).get("ownerReferences")
    for ref in refs if isinstance(refs, list) else []:
        if isinstance(ref, dict) and ref.get("controller") is True:
            return ref
    return None


def _stays_with_node(pod: dict) -> bool:
    """A DaemonSet's pod or a static (mirror) pod: it goes with the Node and is never moved."""
    if objects.daemonset_of(pod) or objects.MIRROR_ANNOTATION in _annotations(pod):
        return True
    owner = _controller(pod)
    return owner is not None and owner.get("kind") == "Node"


def _moving(member: _Member) -> list[dict]:
    """The pods removing the Machine would move elsewhere."""
    return [p for p in member.pods if not _terminating(p) and not _stays_with_node(p)]


def _empty(member: _Member) -> bool:
    return not _moving(member)


def _host_ports(pod: dict) -> bool:
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    if spec.get("hostNetwork") is True:
        return True
    for container in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        ports = container.get("ports") if isinstance(container, dict) else None
        if any(isinstance(p, dict) and p.get("hostPort") for p in (ports if isinstance(ports, list) else [])):
            return True
    return False


def _claims_volume(pod: dict) -> bool:
    volumes = (pod.get("spec") or {}).get("volumes")
    return any(isinstance(v, dict) and (v.get("persistentVolumeClaim") or v.get("ephemeral"))
               for v in (volumes if isinstance(volumes, list) else []))


def _moved(pod: dict, zone: str | None) -> dict | None:
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


def _started(pod: dict) -> dt.datetime | None:
    status = pod.get("status") if isinstance(pod.get("status"), dict) else {}
    return timefmt.parse(status.get("startTime")) or timefmt.parse((pod.get("metadata") or {}).get("creationTimestamp"))


def _since(carried: Mapping, member: _Member, reason: str, now: dt.datetime,
           not_before: dt.datetime | None = None) -> dt.datetime:
    since = carried.get((member.machine["metadata"]["uid"], reason))
    if since is None or since > now:
        since = now
    if not_before is not None:
        since = max(since, min(not_before, now))
    return since


def _due(cand: _Found, after: float, now: dt.datetime) -> bool:
    return (now - cand.since).total_seconds() >= after


def _movable(member: _Member, pool: str, room: Mapping[str, scheduling.Slot | None], carried: Mapping,
             now: dt.datetime) -> _Found | None:
    """The Machine as an Underutilized candidate before its pods are placed elsewhere: None when one of them
    may not move at all. Its pods are read in full only when it is checked (``_search``)."""
    moving = _moving(member)
    if any(_controller(p) is None or _host_ports(p) for p in moving):
        return None
    zone = ((member.node.get("metadata") or {}).get("labels") or {}).get(provisioning_names.ZONE_LABEL)
    moved = [_moved(p, zone) for p in moving]
    own = room.get(member.name) or slots.of_node(member.node, member.pods, pool, member.name)
    if any(p is None for p in moved) or own is None:
        return None
    asked = Resources()
    try:
        for pod in moved:
            asked += pods.requests_of(pod.get("spec") if isinstance(pod.get("spec"), dict) else {})
    except RequestError:
        return None  # the scheduler could not place it
    newest = max((t for t in (_started(p) for p in moving) if t is not None), default=None)
    return _Found(member, signals.UNDERUTILIZED, _since(carried, member, signals.UNDERUTILIZED, now, newest),
                  tuple(moved), asked, {}, own.allocatable)


def _search(ordered: Sequence[_Found], room: Mapping[str, scheduling.Slot | None], carried: Mapping,
            after: float, now: dt.datetime) -> tuple[list[_Found], _Found | None]:
    """The Underutilized candidates, and the one to remove: ``ordered`` as the choice orders them (``_order``),
    each checked by placing its pods on the others, one scheduling run over the pool's Nodes per Machine.

    The first due candidate is the one the choice would take of them all, so the search stops there; the
    Machines past it keep the records they had (one removal a round must not restart their clocks) and are
    checked again before they can go. The search also stops after MAX_UNDERUTILIZED_CHECKS checks without
    one: the Machines it did not reach are no candidates this round.
    """
    targets = [(name, slot) for name, slot in room.items() if slot is not None]
    residents = scheduling.residents_of(slot for _, slot in targets)
    found: list[_Found] = []
    checks = 0
    for index, cand in enumerate(ordered):
        if checks == MAX_UNDERUTILIZED_CHECKS:
            break
        views = [pods.view(p) for p in cand.moving]
        others = [slot for name, slot in targets if name != cand.member.name]
        if not others or any(v.unsupported is not None for v in views):
            continue
        checks += 1
        result = scheduling.schedule(views, (), others, (), residents=residents)
        if result.unschedulable or result.claims or len(result.placed) != len(views):
            continue
        cand.placement = dict(result.placed)
        found.append(cand)
        if _due(cand, after, now):
            found.extend(c for c in ordered[index + 1:]
                         if (c.member.machine["metadata"]["uid"], signals.UNDERUTILIZED) in carried)
            return found, cand
    return found, None


def _order(cand: _Found) -> tuple:
    """Which Underutilized candidate goes first: the one that frees the most for the least moved."""
    return (len(cand.moving), cand.asked.cpu, cand.asked.memory, -cand.allocatable.cpu, -cand.allocatable.memory,
            cand.member.name)
