"""Which of a pool's Machines go now, and why: repair, interruptions, drift, expiry, within the budgets (pure).

A disruption the pool starts is proven by its children, as the API server
holds them, whichever single write of a sync fails:

- the pool's mark on the Machine it chose (``nodewarden.io/disruption``:
  the reason and the signal's time), written before the call answers;
- ``nodewarden.io/replaces`` on the Machine made to replace it (the old
  Machine's uid and name, the reason and the signal's time), set when
  Metacontroller creates it, which it does before it writes the pool's status.

The pool's ``status.disruptions`` (``machine``, ``uid``, ``reason``, ``at``
the signal's time, ``startedAt``, ``replacement``, ``replacementReadyAt``,
``goneAt``) is a cache of those with the times the metrics need: a record
lost with a status write is rebuilt from the mark or the replacement, and a
record's ``replacement`` is whichever live Machine names it now. A Machine
with a record is not counted towards ``replicas``, so its replacement is made
at once. Then it leaves (the pool stops returning it, Metacontroller deletes
it, its finalizer cordons, detaches, drains and terminates):

- Repair (its Node was fenced): once the FencingRequest says its pods and
  volumes were recovered: the Node is powered off already, nothing waits on
  the replacement.
- Every other reason: surge-first, once its replacement is Initialized, so
  the new Machine is ready before the old one cordons. Its replacement is a
  live Machine naming it that is not being disrupted itself; when there is
  none (never made, deleted, or fenced before it initialized), the pool
  makes another, unless it has ``replicas`` Machines without this one: then
  it goes at once. A scale-down never takes the replacement a Machine waits
  for (hooks.machines.pool.desired).
- Forceful signals (a spot interruption warning, the instance stopping):
  the Machine deletes itself (hooks.machines.disrupted); the pool records it
  for the count and the timing, and makes the replacement because a Machine
  being deleted is never counted.

Disrupting, for the budgets, is every Machine of the pool with a Node that is
being deleted, plus every recorded one not yet deleted (a Machine that never
had a Node disrupts nothing). Candidates are started in order: repair,
then EC2's notices (scheduled change, impaired status, rebalance), then
expiry, then drift; each by the time of its signal. A provisioning pool's
consolidation (Empty, Underutilized) is chosen by its provisioning round, not
here; once marked, such a Machine is recorded and proven like the others. A
provisioning pool has no replicas to count: its disrupted Machines wait for
a replacement, except a consolidated one, whose pods fit on the pool's other
Nodes. A replacement a Machine still waits for is a candidate for
repair only (it cannot initialize once powered off); that repair is never
held by a budget, since the Machine waiting for it would wait for ever, and
counts as disrupting while it lasts.
"""
from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field

from hooks import conditions, machine_names, timefmt
from hooks.machines import budgets, pool, signals
from hooks.machines.repair import Fenced

MAX_RECORDS = 1000
# A record whose Machine is gone is kept until its replacement is Initialized, at most this long.
RECORD_KEEP_SECONDS = 3600.0
_ORDER = {signals.REPAIR: 0, signals.SCHEDULED_CHANGE: 1, signals.STATUS_IMPAIRED: 2, signals.REBALANCE: 3,
          signals.EXPIRED: 4, signals.DRIFTED: 5, signals.EMPTY: 6, signals.UNDERUTILIZED: 7}
# What a record may be for: the pool's own choices, and forceful signals (recorded for the count and timing).
_RECORDED = tuple(_ORDER) + signals.FORCEFUL
_RECORD_KEYS = {"machine": str, "uid": str, "reason": str, "at": str, "startedAt": str, "replacement": str,
                "replacementReadyAt": str, "goneAt": str}
_MAX_REPLACES = 512
_MAX_UID = 128


@dataclass(frozen=True)
class Candidate:
    machine: dict
    reason: str
    at: dt.datetime


@dataclass(frozen=True)
class Replaces:
    """What ``nodewarden.io/replaces`` on a Machine says: the Machine it was made to replace, and why."""

    uid: str
    machine: str
    reason: str
    at: dt.datetime

    def encode(self) -> str:
        return json.dumps({"uid": self.uid, "machine": self.machine, "reason": self.reason,
                           "at": timefmt.fmt(self.at)}, separators=(",", ":"), sort_keys=True)


@dataclass
class Outcome:
    records: list[dict]  # the pool's status.disruptions after this call
    held: set[str]  # names of recorded Machines still there: not counted towards replicas
    leaving: set[str]  # names the pool stops returning now
    kept: set[str] = field(default_factory=set)  # replacements Machines wait for: never taken by a scale-down
    needs: list[dict] = field(default_factory=list)  # records a new Machine of this call replaces, in order
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


def replaces_of(machine: dict) -> Replaces | None:
    """What the Machine's ``nodewarden.io/replaces`` says, read through bounds: anything else reads as none."""
    data = signals.json_object(machine["metadata"]["annotations"].get(machine_names.REPLACES), _MAX_REPLACES)
    if data is None:
        return None
    uid, name, reason, at = data.get("uid"), data.get("machine"), data.get("reason"), timefmt.parse(data.get("at"))
    if not (isinstance(uid, str) and 0 < len(uid) <= _MAX_UID and isinstance(name, str)
            and 0 < len(name) <= machine_names.MAX_NAME and reason in _RECORDED and at is not None):
        return None
    return Replaces(uid, name, reason, at)


def replaces(record: dict) -> dict[str, str]:
    """The annotations of a Machine made to replace the Machine of ``record``."""
    mark = Replaces(record["uid"], record["machine"], record["reason"], timefmt.parse(record["at"]))
    return {machine_names.REPLACES: mark.encode()}


def _drifted_at(machine: dict, template_hash: str, now: dt.datetime) -> dt.datetime | None:
    """When the Machine drifted, if it did: made from a template other than the pool's, as the pool (read
    fresh) has it now. The Machine's own Drifted condition is judged on Metacontroller's copy of the pool,
    which can be a step behind; it gives only the time."""
    made_from = machine["metadata"]["annotations"].get(machine_names.TEMPLATE_HASH)
    if not template_hash or not made_from or made_from == template_hash:
        return None
    cond = conditions.find(machine["status"], machine_names.DRIFTED) or {}
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


def decide(machines: list[dict], previous: list[dict], rules: tuple[budgets.Budget, ...],
           expire_after: float | None, fenced: dict[str, Fenced], replicas: int | None, now: dt.datetime,
           template_hash: str = "") -> Outcome:
    """What the pool's disruptions are after this call.

    ``machines`` are the pool's Machines as the API server lists them now
    (hooks.machines.pool.machines_of), ``previous`` its records
    (``records_of``), ``fenced`` the Fenced facts by Machine uid,
    ``replicas`` None for a provisioning pool (a Machine without a
    replacement waits for one: no count says it can go without),
    ``template_hash`` the hash of the pool's template now (drift).
    """
    stamp = timefmt.fmt(now)
    by_uid = {m["metadata"]["uid"]: m for m in machines}
    live = [m for m in machines if not m["metadata"]["deletionTimestamp"]]
    live_by_name = {m["metadata"]["name"]: m for m in live}
    claims = _claims(live)
    records = _known(machines, live, previous, claims, now)
    recorded = {r["uid"] for r in records}
    started: list[dict] = []
    # Forceful: the Machine is already going by itself; recorded for the count and the timing. A notice given
    # after the Machine's deletion began did not cause it (a scale-down, a delete): no disruption of EC2's.
    for machine in machines:
        notice = signals.of(machine, signals.INTERRUPTION_ANNOTATION)
        deleted_at = timefmt.parse(machine["metadata"]["deletionTimestamp"])
        if deleted_at is not None and notice is not None and notice.forceful and notice.at <= deleted_at \
                and machine["metadata"]["uid"] not in recorded:
            record = _record(machine, notice.reason, notice.at, stamp)
            records.append(record)
            started.append(record)
            recorded.add(machine["metadata"]["uid"])
    held = {m["metadata"]["name"] for m in live if m["metadata"]["uid"] in recorded}
    # Made for a Machine that waits for it and not Initialized yet: a candidate for repair only.
    awaited = {m["metadata"]["name"] for record in records
               for m in _waited_for(record, by_uid, claims, live_by_name, held) if not _initialized(m)}
    outcome = Outcome(records=records, held=held, leaving=set(), started=started)
    deleting = sum(1 for m in machines if m["metadata"]["deletionTimestamp"] and pool.has_node(m))
    disrupting = deleting + len(held)
    size = budget_size(machines, records)
    found = []
    for machine in live:
        if machine["metadata"]["uid"] in recorded:
            continue
        reason = candidate(machine, now, expire_after, fenced.get(machine["metadata"]["uid"]), template_hash)
        # A replacement still waited for goes for repair only: powered off, it would never initialize.
        if reason is not None and (machine["metadata"]["name"] not in awaited or reason.reason == signals.REPAIR):
            found.append(reason)
    found.sort(key=lambda c: (_ORDER[c.reason], c.at, c.machine["metadata"]["name"]))
    for cand in found:
        allowed = budgets.allowed(rules, cand.reason, size, now)
        exempt = cand.machine["metadata"]["name"] in awaited
        if not exempt and allowed is not None and disrupting >= allowed:
            outcome.blocked[cand.reason] = outcome.blocked.get(cand.reason, 0) + 1
            continue
        record = _record(cand.machine, cand.reason, cand.at, stamp)
        records.append(record)
        outcome.started.append(record)
        held.add(cand.machine["metadata"]["name"])
        disrupting += 1
    outcome.disrupting = disrupting
    counted = len(live) - len(held)
    waiting: list[tuple[int, dict]] = []
    for record in records:
        machine = by_uid.get(record["uid"])
        made = _made_for(record, claims, live_by_name, held)
        replacement = made[0] if made else None
        if replacement is not None and _initialized(replacement) and not record.get("replacementReadyAt"):
            record["replacementReadyAt"] = stamp
            outcome.ready.append(record)
        if machine is None:
            continue
        consolidated = replicas is None and record["reason"] in signals.CONSOLIDATION
        if machine["metadata"]["deletionTimestamp"]:
            if replacement is None and not record.get("replacementReadyAt") and not consolidated:
                waiting.append((2, record))  # only timed: nothing waits for it
            continue
        if record["reason"] == signals.REPAIR:
            fence = fenced.get(record["uid"])
            if fence is None or fence.recovered:  # no longer fenced by a live request: nothing to wait for
                outcome.leaving.add(record["machine"])
            elif replacement is None:
                waiting.append((1, record))
            continue
        outcome.kept.update(m["metadata"]["name"] for m in made)
        if replacement is not None:
            if _initialized(replacement):
                outcome.leaving.add(record["machine"])
        elif replicas is not None and counted >= replicas:
            outcome.leaving.add(record["machine"])  # none needed: the pool has its replicas without it
        elif consolidated:
            outcome.leaving.add(record["machine"])  # chosen because its pods fit elsewhere: nothing replaces it
        else:
            waiting.append((0, record))
    waiting.sort(key=lambda item: (item[0], item[1]["at"], item[1]["machine"]))
    outcome.needs = [record for _, record in waiting]
    return outcome


def _claims(live: list[dict]) -> dict[str, list[dict]]:
    """The live Machines that name, in ``nodewarden.io/replaces``, the Machine of each uid: oldest first."""
    found: dict[str, list[dict]] = {}
    for machine in sorted(live, key=lambda m: (m["metadata"]["creationTimestamp"], m["metadata"]["name"])):
        made_for = replaces_of(machine)
        if made_for is not None and made_for.uid != machine["metadata"]["uid"]:
            found.setdefault(made_for.uid, []).append(machine)
    return found


def _known(machines: list[dict], live: list[dict], previous: list[dict], claims: dict[str, list[dict]],
           now: dt.datetime) -> list[dict]:
    """The open records: the status's, and those only the children prove (a status write was lost), each once.

    A record whose Machine is gone closes once its replacement is Initialized, or nothing replaces it any
    more, or after RECORD_KEEP_SECONDS."""
    stamp = timefmt.fmt(now)
    by_uid = {m["metadata"]["uid"]: m for m in machines}
    live_by_name = {m["metadata"]["name"]: m for m in live}
    records, seen = [], set()
    for record in previous:
        if record["uid"] in seen:
            continue
        seen.add(record["uid"])
        record = dict(record)
        if record["uid"] not in by_uid:
            record.setdefault("goneAt", stamp)
            gone = timefmt.seconds_since(record.get("goneAt"), now)
            if record.get("replacementReadyAt") or not _made_for(record, claims, live_by_name, set()) \
                    or (gone is not None and gone >= RECORD_KEEP_SECONDS):
                continue
        records.append(record)
    for machine in sorted(live, key=lambda m: m["metadata"]["name"]):
        uid = machine["metadata"]["uid"]
        if uid in seen:
            continue
        mark = signals.of(machine, signals.DISRUPTION_ANNOTATION)
        made = claims.get(uid) or []
        if mark is not None and mark.reason in _ORDER:
            reason, at = mark.reason, mark.at
        elif made:
            first = replaces_of(made[0])
            reason, at = first.reason, first.at
        else:
            continue
        started = made[0]["metadata"]["creationTimestamp"] if made else ""
        records.append(_record(machine, reason, at, started if timefmt.parse(started) else stamp))
        seen.add(uid)
    return records[:MAX_RECORDS]


def _made_for(record: dict, claims: dict[str, list[dict]], live: dict[str, dict], held: set[str]) -> list[dict]:
    """The live Machines made to replace the record's that are not disrupted themselves, its replacement
    first (Initialized first, then the oldest): those naming it, else one the record names that names no
    Machine (made before replacements named theirs). Sets the record's ``replacement`` to it."""
    found = [m for m in claims.get(record["uid"], []) if m["metadata"]["name"] not in held]
    named = live.get(record.get("replacement") or "")
    if not found and named is not None and named["metadata"]["name"] not in held \
            and machine_names.REPLACES not in named["metadata"]["annotations"]:
        found = [named]
    found.sort(key=lambda m: not _initialized(m))
    if found:
        record["replacement"] = found[0]["metadata"]["name"]
    else:
        record.pop("replacement", None)
    return found


def _waited_for(record: dict, by_uid: dict[str, dict], claims: dict[str, list[dict]], live: dict[str, dict],
                held: set[str]) -> list[dict]:
    """The Machines made for the record's Machine when it waits for them (live, disrupted, not repaired)."""
    machine = by_uid.get(record["uid"])
    made = _made_for(record, claims, live, held)
    if machine is None or machine["metadata"]["name"] not in held or record["reason"] == signals.REPAIR:
        return []
    return made


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


def start(outcome: Outcome, machine: dict, reason: str, at: dt.datetime, now: dt.datetime) -> dict:
    """Record a disruption the pool chose outside ``decide`` (a provisioning round's consolidation, already
    within the budgets): counted as disrupting, and the Machine leaves now, as nothing replaces it."""
    record = _record(machine, reason, at, timefmt.fmt(now))
    outcome.records.append(record)
    outcome.started.append(record)
    outcome.held.add(machine["metadata"]["name"])
    outcome.leaving.add(machine["metadata"]["name"])
    outcome.disrupting += 1
    return record


def _initialized(machine: dict) -> bool:
    return not machine["metadata"]["deletionTimestamp"] and conditions.is_true(machine["status"], machine_names.INITIALIZED)


def assign_replacements(needs: list[dict], created: list[str]) -> None:
    """Name each record's replacement: the new Machines of this call, made in the order of ``needs``."""
    for record, name in zip(needs, created):
        record["replacement"] = name


def budget_status(rules: tuple[budgets.Budget, ...], size: int, disrupting: int, now: dt.datetime,
                  blocked: dict[str, int], reasons: tuple[str, ...] = signals.BUDGETED) -> dict:
    """What status shows: disrupting now, and how many more each of ``reasons`` may start."""
    allowed = {}
    for reason in reasons:
        limit = budgets.allowed(rules, reason, size, now)
        allowed[reason] = -1 if limit is None else max(0, limit - disrupting)
    out = {"disrupting": disrupting, "allowed": allowed}
    if blocked:
        out["blocked"] = dict(sorted(blocked.items()))
    return out
