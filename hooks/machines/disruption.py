"""Which of a pool's Machines go now, and why: repair, interruptions, drift, expiry, within the budgets (pure).

The pool records each disruption it starts in ``status.disruptions``
(``machine``, ``uid``, ``reason``, ``at`` the signal's time, ``startedAt``,
``replacement``); that record is what the budgets count and what the
replacement is timed from. A Machine in a record is not counted towards
``replicas``, so the pool makes its replacement at once. Then the Machine
leaves (the pool stops returning it, Metacontroller deletes it, its
finalizer cordons, detaches, drains and terminates):

- Repair (its Node was fenced): once the FencingRequest says its pods and
  volumes were recovered: the Node is powered off already, nothing waits on
  the replacement.
- Every other reason: surge-first, once its replacement is Initialized, so
  the new Machine is ready before the old one cordons. When the pool needs
  no replacement (it has ``replicas`` without it), at once.
- Forceful signals (a spot interruption warning, the instance stopping):
  the Machine deletes itself (hooks.machines.liveness); the pool records it
  for the count and the timing, and makes the replacement because a Machine
  being deleted is never counted.

Disrupting, for the budgets, is every Machine of the pool with a Node that is
being deleted, plus every recorded one not yet deleted (a Machine that never
had a Node disrupts nothing). Candidates are started in order: repair,
then EC2's notices (scheduled change, impaired status, rebalance), then
expiry, then drift; each by the time of its signal.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from hooks import conditions, timefmt
from hooks.machines import budgets as budget_rules
from hooks.machines import names, pool, signals
from hooks.machines.repair import Fenced

MAX_RECORDS = 1000
# A record whose Machine is gone is kept until its replacement is Initialized, at most this long.
RECORD_KEEP_SECONDS = 3600.0
_ORDER = {signals.REPAIR: 0, signals.SCHEDULED_CHANGE: 1, signals.STATUS_IMPAIRED: 2, signals.REBALANCE: 3,
          signals.EXPIRED: 4, signals.DRIFTED: 5}
_RECORD_KEYS = {"machine": str, "uid": str, "reason": str, "at": str, "startedAt": str, "replacement": str,
                "replacementReadyAt": str, "goneAt": str}


@dataclass(frozen=True)
class Candidate:
    machine: dict
    reason: str
    at: dt.datetime


@dataclass
class Outcome:
    records: list[dict]  # the pool's status.disruptions after this call
    held: set[str]  # names of recorded Machines still there: not counted towards replicas
    leaving: set[str]  # names the pool stops returning now
    started: list[dict] = field(default_factory=list)  # records opened by this call
    ready: list[dict] = field(default_factory=list)  # records whose replacement became Initialized in this call
    blocked: dict[str, int] = field(default_factory=dict)  # candidates held back by a budget, by reason
    disrupting: int = 0


def records_of(status: dict) -> list[dict]:
    """The pool's records as written before, read through bounds: a malformed entry is dropped."""
    raw = status.get("disruptions") if isinstance(status, dict) else None
    found = []
    for item in raw if isinstance(raw, list) else []:
        if not isinstance(item, dict):
            continue
        record = {k: item[k] for k, kind in _RECORD_KEYS.items() if isinstance(item.get(k), kind)}
        if record.get("machine") and record.get("uid") and record.get("reason") in signals.REASONS \
                and timefmt.parse(record.get("at")):
            found.append(record)
    return found[:MAX_RECORDS]


def _drifted_at(machine: dict, template_hash: str, now: dt.datetime) -> dt.datetime | None:
    """When the Machine drifted, if it did: made from a template other than the pool's, as the pool (read
    fresh) has it now. The Machine's own Drifted condition is judged on Metacontroller's copy of the pool,
    which can be a step behind; it gives only the time."""
    made_from = machine["metadata"]["annotations"].get(names.TEMPLATE_HASH)
    if not template_hash or not made_from or made_from == template_hash:
        return None
    cond = conditions.find(machine["status"], names.DRIFTED) or {}
    return timefmt.parse(cond.get("lastTransitionTime")) if cond.get("status") == "True" else now


def expires_at(machine: dict, expire_after: float | None) -> dt.datetime | None:
    created = timefmt.parse(machine["metadata"]["creationTimestamp"])
    if expire_after is None or created is None:
        return None
    return created + dt.timedelta(seconds=expire_after)


def candidate(machine: dict, now: dt.datetime, expire_after: float | None, fence: Fenced | None,
              template_hash: str = "") -> Candidate | None:
    """Why a live Machine should go, if it should; forceful signals are the Machine's own to act on."""
    if fence is not None:
        return Candidate(machine, signals.REPAIR, fence.at)
    notice = signals.of(machine, signals.INTERRUPTION_ANNOTATION)
    if notice is not None and not notice.forceful:
        return Candidate(machine, notice.reason, notice.at)
    expiry = expires_at(machine, expire_after)
    if expiry is not None and expiry <= now:
        return Candidate(machine, signals.EXPIRED, expiry)
    drifted = _drifted_at(machine, template_hash, now)
    if drifted is not None:
        return Candidate(machine, signals.DRIFTED, drifted)
    return None


def decide(machines: list[dict], previous: list[dict], rules: tuple[budget_rules.Budget, ...],
           expire_after: float | None, fenced: dict[str, Fenced], replicas: int, now: dt.datetime,
           template_hash: str = "") -> Outcome:
    """What the pool's disruptions are after this call.

    ``machines`` are the pool's Machines as the API server lists them now
    (hooks.machines.pool.machines_of), ``previous`` its records
    (``records_of``), ``fenced`` the Fenced facts by Machine uid,
    ``template_hash`` the hash of the pool's template now (drift).
    """
    stamp = timefmt.fmt(now)
    by_uid = {m["metadata"]["uid"]: m for m in machines}
    by_name = {m["metadata"]["name"]: m for m in machines}
    live = [m for m in machines if not m["metadata"]["deletionTimestamp"]]
    records: list[dict] = []
    for record in previous:
        machine = by_uid.get(record["uid"])
        if machine is None and not record.get("goneAt"):
            record = {**record, "goneAt": stamp}
        if machine is None and _finished(record, now):
            continue
        records.append(dict(record))
    recorded = {r["uid"] for r in records}
    # Forceful: the Machine is already going by itself; recorded for the count and the timing.
    for machine in machines:
        notice = signals.of(machine, signals.INTERRUPTION_ANNOTATION)
        if machine["metadata"]["deletionTimestamp"] and notice is not None and notice.forceful \
                and machine["metadata"]["uid"] not in recorded:
            records.append(_record(machine, notice.reason, notice.at, stamp))
            recorded.add(machine["metadata"]["uid"])
    outcome = Outcome(records=records, held=set(), leaving=set())
    outcome.started = [r for r in records if r["startedAt"] == stamp and r not in previous]
    deleting = sum(1 for m in machines if m["metadata"]["deletionTimestamp"] and pool.has_node(m))
    open_live = {r["machine"] for r in records if r["uid"] in by_uid
                 and not by_uid[r["uid"]]["metadata"]["deletionTimestamp"]}
    disrupting = deleting + len(open_live)
    size = budget_size(machines, records)
    found = []
    for machine in live:
        if machine["metadata"]["uid"] in recorded or _is_replacement(machine, records):
            continue
        reason = candidate(machine, now, expire_after, fenced.get(machine["metadata"]["uid"]), template_hash)
        if reason is not None:
            found.append(reason)
    found.sort(key=lambda c: (_ORDER[c.reason], c.at, c.machine["metadata"]["name"]))
    for cand in found:
        allowed = budget_rules.allowed(rules, cand.reason, size, now)
        if allowed is not None and disrupting >= allowed:
            outcome.blocked[cand.reason] = outcome.blocked.get(cand.reason, 0) + 1
            continue
        record = _record(cand.machine, cand.reason, cand.at, stamp)
        records.append(record)
        outcome.started.append(record)
        open_live.add(cand.machine["metadata"]["name"])
        disrupting += 1
    outcome.disrupting = disrupting
    outcome.held = set(open_live)
    counted = len(live) - len(open_live)
    for record in records:
        machine = by_uid.get(record["uid"])
        replacement = by_name.get(record.get("replacement") or "")
        if replacement is not None and _initialized(replacement) and not record.get("replacementReadyAt"):
            record["replacementReadyAt"] = stamp
            outcome.ready.append(record)
        if machine is None or machine["metadata"]["deletionTimestamp"]:
            continue
        if _may_leave(record, replacement, fenced.get(record["uid"]), counted, replicas):
            outcome.leaving.add(record["machine"])
    return outcome


def budget_size(machines: list[dict], records: list[dict]) -> int:
    """What a budget's percentage is of: the pool's Machines with a Node that are not being deleted, each
    Machine and its replacement counted once (the replacement once it is Initialized), so a surge never
    widens the budget it was made under."""
    by_name = {m["metadata"]["name"]: m for m in machines}
    awaited, replaced = set(), set()
    for record in records:
        new = by_name.get(record.get("replacement") or "")
        if new is not None and _initialized(new):
            replaced.add(record["machine"])
        elif record.get("replacement"):
            awaited.add(record["replacement"])
    return sum(1 for m in machines if not m["metadata"]["deletionTimestamp"] and pool.has_node(m)
               and m["metadata"]["name"] not in awaited and m["metadata"]["name"] not in replaced)


def _record(machine: dict, reason: str, at: dt.datetime, stamp: str) -> dict:
    return {"machine": machine["metadata"]["name"], "uid": machine["metadata"]["uid"], "reason": reason,
            "at": timefmt.fmt(at), "startedAt": stamp}


def _is_replacement(machine: dict, records: list[dict]) -> bool:
    """A replacement still being waited for is not itself a candidate until its record closes."""
    name = machine["metadata"]["name"]
    return any(r.get("replacement") == name and not r.get("replacementReadyAt") for r in records)


def _initialized(machine: dict) -> bool:
    return not machine["metadata"]["deletionTimestamp"] and conditions.is_true(machine["status"], names.INITIALIZED)


def _may_leave(record: dict, replacement: dict | None, fence: Fenced | None, counted: int, replicas: int) -> bool:
    if record["reason"] == signals.REPAIR:
        return fence is None or fence.recovered  # no longer fenced by a live request: nothing to wait for
    if replacement is not None and _initialized(replacement):
        return True
    # No replacement asked for, and none needed: the pool has its replicas without this Machine.
    return not record.get("replacement") and counted >= replicas


def _finished(record: dict, now: dt.datetime) -> bool:
    """A record whose Machine is gone closes once its replacement is ready, or after RECORD_KEEP_SECONDS."""
    if record.get("replacementReadyAt") or not record.get("replacement"):
        return True
    gone = timefmt.seconds_since(record.get("goneAt"), now)
    return gone is not None and gone >= RECORD_KEEP_SECONDS


def assign_replacements(records: list[dict], created: list[str], machines: list[dict]) -> None:
    """Name each record's replacement: a new Machine of this call for a record with none (or whose one is gone)."""
    present = {m["metadata"]["name"] for m in machines if not m["metadata"]["deletionTimestamp"]}
    fresh = list(created)
    for record in records:
        if record.get("replacementReadyAt"):
            continue
        if record.get("replacement") in present:
            continue
        if fresh:
            record["replacement"] = fresh.pop(0)


def budget_status(rules: tuple[budget_rules.Budget, ...], size: int, disrupting: int, now: dt.datetime,
                  blocked: dict[str, int]) -> dict:
    """What status shows: disrupting now, and how many more each reason may start."""
    allowed = {}
    for reason in signals.BUDGETED:
        limit = budget_rules.allowed(rules, reason, size, now)
        allowed[reason] = -1 if limit is None else max(0, limit - disrupting)
    out = {"disrupting": disrupting, "allowed": allowed}
    if blocked:
        out["blocked"] = dict(sorted(blocked.items()))
    return out
