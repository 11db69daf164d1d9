"""What one pass of a NodePool's decision reads, and what it has decided so far (pure).

``PoolState`` is read-only: the pool's spec and its Machines as the API
server listed them in this call, the FencingRequests' verdicts, this call's
provisioning round. ``Pass`` is what the disruption methods write, in turn:
the records (opened, proven, settled), which Machines are held from the
count, which leave now, which replacements are still needed, and the
budget they all share.
"""
from __future__ import annotations

import datetime as dt
import functools
from dataclasses import dataclass, field
from typing import Any, Mapping

from hooks import timefmt
from hooks.machines import budgets, pool, signals
from hooks.machines.repair import Fenced
from hooks.machines.spec import PoolSpec
from hooks.nodepools import records
from hooks.provisioning.rounds import Round


@dataclass(frozen=True)
class PoolState:
    name: str
    uid: str
    spec: PoolSpec
    machines: list[dict]  # the pool's Machines as the API server lists them now (hooks.machines.pool.machines_of)
    known: frozenset[str]  # names of the Machines Metacontroller showed: only those can be left out
    fenced: Mapping[str, Fenced]
    now: dt.datetime
    fencing_known: bool = True  # the FencingRequests were read: a repaired Machine's recovery is known
    provisioned: Round | None = None  # this call's provisioning round, when the pool is one and ran one
    consolidation: tuple[dict, ...] = ()  # the status's consolidation records from before

    @functools.cached_property
    def live(self) -> list[dict]:
        return [m for m in self.machines if not m["metadata"]["deletionTimestamp"]]

    @functools.cached_property
    def by_uid(self) -> dict[str, dict]:
        return {m["metadata"]["uid"]: m for m in self.machines}

    @functools.cached_property
    def live_by_name(self) -> dict[str, dict]:
        return {m["metadata"]["name"]: m for m in self.live}

    @functools.cached_property
    def claims(self) -> dict[str, list[dict]]:
        return records.claims(self.live)

    @property
    def stamp(self) -> str:
        return timefmt.fmt(self.now)

    @property
    def provisioning(self) -> bool:
        return self.spec.replicas is None


@dataclass(frozen=True)
class Candidate:
    """A Machine a method would let go now, and why."""

    machine: dict
    reason: str
    at: dt.datetime  # the signal's time (consolidation: since when it has been a candidate)
    exempt: bool = False  # never held by a budget: a replacement waited for, repaired
    message: str = ""  # the Event a start sends (consolidation says where the pods go)
    placement: Mapping[str, str] = field(default_factory=dict)  # consolidation: each pod it evicts -> its Node
    node: str = ""  # its Node's name, where a method read one

    @property
    def name(self) -> str:
        return self.machine["metadata"]["name"]


@dataclass
class Pass:
    records: list[dict]  # the pool's status.disruptions after this call
    held: set[str]  # names of recorded Machines still there: not counted towards replicas
    awaited: set[str]  # replacements a Machine waits for, not Initialized yet: candidates for repair only
    size: int  # what a budget's percentage is of (records.budget_size)
    disrupting: int  # Machines disrupting now, those started in this pass included
    leaving: set[str] = field(default_factory=set)  # names the pool stops returning now
    surplus: list[str] = field(default_factory=list)  # a static pool's scale-down, in its order
    kept: set[str] = field(default_factory=set)  # replacements Machines wait for: never taken by a scale-down
    needs: list[dict] = field(default_factory=list)  # records a new Machine of this call replaces, in order
    started: list[dict] = field(default_factory=list)  # records opened by this pass
    ready: list[dict] = field(default_factory=list)  # records whose replacement became Initialized now
    blocked: dict[str, int] = field(default_factory=dict)  # candidates held back by a budget, by reason
    offered: set[str] = field(default_factory=set)  # uids a method offered: a later one does not
    chosen: list[Candidate] = field(default_factory=list)  # the candidates this pass started, in order
    messages: list[str] = field(default_factory=list)  # the Event texts of the starts that carry one, in order
    consolidation: list[dict] | None = None  # status.consolidation after this pass (None: not judged now)
    consolidating: Any = None  # the consolidation methods' shared view (hooks.nodepools.consolidation.Family)

    @property
    def recorded(self) -> set[str]:
        return {r["uid"] for r in self.records}

    def allowed(self, reason: str, rules: tuple[budgets.Budget, ...], now: dt.datetime) -> int | None:
        """How many more Machines may start disrupting for ``reason`` (None: no limit)."""
        limit = budgets.allowed(rules, reason, self.size, now)
        return None if limit is None else limit - self.disrupting

    def offer(self, state: PoolState, cand: Candidate, *, leaves: bool = False) -> bool:
        """Start ``cand`` if the budgets let it: recorded, held from the count, counted as disrupting; one that
        ``leaves`` goes in this call (nothing replaces it). False when a budget holds it."""
        self.offered.add(cand.machine["metadata"]["uid"])
        left = self.allowed(cand.reason, state.spec.budgets, state.now)
        if not cand.exempt and left is not None and left <= 0:
            self.blocked[cand.reason] = self.blocked.get(cand.reason, 0) + 1
            return False
        entry = records.record(cand.machine, cand.reason, cand.at, state.stamp)
        self.records.append(entry)
        self.started.append(entry)
        self.held.add(cand.name)
        self.chosen.append(cand)
        if leaves:
            self.leaving.add(cand.name)
        if cand.message:
            self.messages.append(cand.message)
        self.disrupting += 1
        return True


def open_pass(state: PoolState, previous: list[dict]) -> Pass:
    """The records this pass starts from: the status's and those the children prove, and every forceful
    notice a Machine is already going for (recorded for the count and the timing)."""
    known = records.known(state.machines, state.live, previous, state.claims, state.now)
    recorded = {r["uid"] for r in known}
    started = []
    # A notice given after the Machine's deletion began did not cause it (a scale-down, a delete).
    for machine in state.machines:
        notice = signals.of(machine, signals.INTERRUPTION_ANNOTATION)
        deleted_at = timefmt.parse(machine["metadata"]["deletionTimestamp"])
        if deleted_at is not None and notice is not None and notice.forceful and notice.at <= deleted_at \
                and machine["metadata"]["uid"] not in recorded:
            entry = records.record(machine, notice.reason, notice.at, state.stamp)
            known.append(entry)
            started.append(entry)
            recorded.add(machine["metadata"]["uid"])
    held = {m["metadata"]["name"] for m in state.live if m["metadata"]["uid"] in recorded}
    awaited = {m["metadata"]["name"] for entry in known
               for m in records.waited_for(entry, state.by_uid, state.claims, state.live_by_name, held)
               if not records.initialized(m)}
    deleting = sum(1 for m in state.machines if m["metadata"]["deletionTimestamp"] and pool.has_node(m))
    return Pass(records=known, held=held, awaited=awaited, size=records.budget_size(state.machines, known),
                disrupting=deleting + len(held), started=started)
