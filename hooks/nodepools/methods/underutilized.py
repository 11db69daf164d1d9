"""Underutilized: a provisioning pool's Machine whose pods all fit on the pool's other Nodes as they are now
goes, once that has held for ``consolidateAfter``; at most one per pass, within the budgets (pure).

Policy WhenEmptyOrUnderutilized only. What makes a candidate, its clock and
the holds are in hooks.nodepools.consolidation.

The search. Checking a Machine is a scheduling run over the pool's Nodes,
so Machines are checked in the order of the choice (fewest pods to move,
then least cpu, then least memory requested, then the most allocatable cpu
and memory, then by name: the one that frees the most for the least moved)
and the search stops at the first due one, which is the one the choice
would take of them all: the Machines past it keep their records as they
were (one removal a pass must not restart their clocks) and are checked
before they can go. It also stops after ``MAX_CHECKS`` checks: Machines it
did not reach are no candidates that pass, so when that many cheaper
Machines cannot move, a dearer one is not looked at until they can or go.
The pods on the Nodes are indexed once for all the checks
(hooks.provisioning.residents).

The pods a removal evicts fit on the remaining Nodes by construction: the
scheduler placed each on a Node that stays (the candidate's ``placement``
says where) with what runs there counted. Once evicted and pending, the
next round's scheduling tries existing Nodes before any new Machine, so
they go where they fitted and launch nothing, unless other pods took that
room in between, which is new demand. A Machine one of whose pods a
PodDisruptionBudget keeps from being evicted now is no candidate: its drain
would stop there.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import Mapping, Sequence

from hooks import provisioning_names, timefmt
from hooks.contract import RequestError
from hooks.machines import pod_budgets, signals
from hooks.machines.spec import WHEN_EMPTY_OR_UNDERUTILIZED
from hooks.nodepools import consolidation
from hooks.nodepools.consolidation import Family, Found, Member
from hooks.nodepools.state import Pass, PoolState
from hooks.provisioning import pods, scheduling, slots
from hooks.provisioning.resources import Resources

name = "underutilized"
# Scheduling runs the search makes per pass, each over the pool's Nodes: what bounds its cost.
MAX_CHECKS = 25


def run(state: PoolState, progress: Pass) -> None:
    view = consolidation.family(state, progress)
    if view is None or view.policy.consolidation_policy != WHEN_EMPTY_OR_UNDERUTILIZED:
        return
    # An Empty candidate is no target: removing it moves nothing, so filling it would be churn.
    empty = {f.member.name for f in view.found if f.reason == signals.EMPTY}
    room = {m.name: slots.of_node(m.node, m.pods, view.pool, m.name) for m in view.able if m.name not in empty}
    movable = [_movable(m, view, room, state.now) for m in view.eligible if m.name not in empty]
    promised = [pods.view(p) for m in state.machines if _leaving(m, progress)
                for p in consolidation.moving_from(m, state)]
    checked, chosen = _search(sorted((c for c in movable if c is not None), key=_order), room, view, state.now,
                              [p for p in promised if p.unsupported is None])
    view.found.extend(checked)
    if chosen is not None:
        member, placement = chosen.member, chosen.placement
        onto = sorted(set(placement.values()))
        consolidation.take(state, progress, view, chosen,
                           f"Machine {member.name} (Node {member.node_name}): its {len(placement)} pods have "
                           f"fitted on the pool's other Nodes since {timefmt.fmt(chosen.since)}: removing it "
                           f"(Underutilized); they fit on {', '.join(onto)}")
    consolidation.settle(progress, view)


def _host_ports(pod: dict) -> bool:
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    if spec.get("hostNetwork") is True:
        return True
    for container in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        ports = container.get("ports") if isinstance(container, dict) else None
        if any(isinstance(p, dict) and p.get("hostPort") for p in (ports if isinstance(ports, list) else [])):
            return True
    return False


def _started(pod: dict) -> dt.datetime | None:
    status = pod.get("status") if isinstance(pod.get("status"), dict) else {}
    return timefmt.parse(status.get("startTime")) or timefmt.parse((pod.get("metadata") or {}).get("creationTimestamp"))


def _movable(member: Member, view: Family, room: Mapping[str, scheduling.Slot | None],
             now: dt.datetime) -> Found | None:
    """The Machine as a candidate before its pods are placed elsewhere: None when one of them may not move at
    all. Its pods are read in full only when it is checked (``_search``)."""
    leaving = consolidation.moving(member)
    if any(consolidation.controller(p) is None or _host_ports(p) for p in leaving):
        return None
    if pod_budgets.blocked(leaving, view.disruption_budgets):
        return None  # its pods cannot be evicted now: a drain would stop at the budget
    zone = ((member.node.get("metadata") or {}).get("labels") or {}).get(provisioning_names.ZONE_LABEL)
    moved = [consolidation.moved(p, zone) for p in leaving]
    own = room.get(member.name) or slots.of_node(member.node, member.pods, view.pool, member.name)
    if any(p is None for p in moved) or own is None:
        return None
    asked = Resources()
    try:
        for pod in moved:
            asked += pods.requests_of(pod.get("spec") if isinstance(pod.get("spec"), dict) else {})
    except RequestError:
        return None  # the scheduler could not place it
    newest = max((t for t in (_started(p) for p in leaving) if t is not None), default=None)
    return Found(member, signals.UNDERUTILIZED,
                 consolidation.since(view, member, signals.UNDERUTILIZED, now, newest),
                 tuple(moved), asked, {}, own.allocatable)


def _leaving(machine: dict, progress: Pass) -> bool:
    """Being deleted, disrupted, or let go in this pass: its pods will need room elsewhere."""
    meta = machine["metadata"]
    return bool(meta["deletionTimestamp"]) or meta["name"] in progress.held or meta["name"] in progress.leaving


def _after(promised: Sequence[pods.PodView], room: list[scheduling.Slot]) -> list[scheduling.Slot]:
    """``room`` with the pods of Machines already leaving placed first: the room they will take is not room."""
    placed = scheduling.schedule(promised, (), room, ()).placed
    by_slot: dict[str, list[pods.PodView]] = {}
    for pod in promised:
        if pod.key in placed:
            by_slot.setdefault(placed[pod.key], []).append(pod)
    taken = []
    for slot in room:
        mine = by_slot.get(slot.name)
        if mine:
            asked = Resources()
            for pod in mine:
                asked += pod.requests
            slot = replace(slot, requested=slot.requested + asked,
                           pods=slot.pods + tuple(pods.Resident(p.namespace, p.labels, p.anti_affinity) for p in mine))
        taken.append(slot)
    return taken


def _search(ordered: Sequence[Found], room: Mapping[str, scheduling.Slot | None], view: Family,
            now: dt.datetime, promised: Sequence[pods.PodView] = ()) -> tuple[list[Found], Found | None]:
    """The candidates, and the one to remove: ``ordered`` as the choice orders them (``_order``), each checked
    by placing its pods on the others, one scheduling run over the pool's Nodes per Machine; when Machines
    are already leaving (``promised``: their pods), the others as they are once those pods took their room."""
    targets = [(target, slot) for target, slot in room.items() if slot is not None]
    residents = scheduling.residents_of(slot for _, slot in targets)
    found: list[Found] = []
    checks = 0
    for index, cand in enumerate(ordered):
        if checks == MAX_CHECKS:
            break
        views = [pods.view(p) for p in cand.moving]
        others = [slot for target, slot in targets if target != cand.member.name]
        if not others or any(v.unsupported is not None for v in views):
            continue
        checks += 1
        if promised:
            result = scheduling.schedule(views, (), _after(promised, others), ())
        else:
            result = scheduling.schedule(views, (), others, (), residents=residents)
        if result.unschedulable or result.claims or len(result.placed) != len(views):
            continue
        cand.placement = dict(result.placed)
        found.append(cand)
        if consolidation.due(cand, view.after, now):
            found.extend(c for c in ordered[index + 1:]
                         if (c.member.machine["metadata"]["uid"], signals.UNDERUTILIZED) in view.carried)
            return found, cand
    return found, None


def _order(cand: Found) -> tuple:
    """Which candidate goes first: the one that frees the most for the least moved."""
    return (len(cand.moving), cand.asked.cpu, cand.asked.memory, -cand.allocatable.cpu, -cand.allocatable.memory,
            cand.member.name)
