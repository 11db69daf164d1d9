"""A pool's disruption records, and what on its Machines proves each one (pure).

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
record's ``replacement`` is whichever live Machine names it now.
"""
from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass

from hooks import conditions, machine_names, timefmt
from hooks.machines import budgets, pool, signals

MAX_RECORDS = 1000
# A record whose Machine is gone is kept until its replacement is Initialized, at most this long.
RECORD_KEEP_SECONDS = 3600.0
# The order candidates are started in: repair, EC2's notices, expiry, drift, then consolidation.
ORDER = {signals.REPAIR: 0, signals.SCHEDULED_CHANGE: 1, signals.STATUS_IMPAIRED: 2, signals.REBALANCE: 3,
         signals.EXPIRED: 4, signals.DRIFTED: 5, signals.EMPTY: 6, signals.UNDERUTILIZED: 7}
# What a record may be for: the pool's own choices, and forceful signals (recorded for the count and timing).
RECORDED = tuple(ORDER) + signals.FORCEFUL
RECORD_KEYS = {"machine": str, "uid": str, "reason": str, "at": str, "startedAt": str, "replacement": str,
               "replacementReadyAt": str, "goneAt": str}
_MAX_REPLACES = 512
_MAX_UID = 128


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


def records_of(status: dict) -> list[dict]:
    """The pool's records as written before, read through bounds: a malformed entry is dropped."""
    raw = status.get("disruptions") if isinstance(status, dict) else None
    found = []
    for item in raw if isinstance(raw, list) else []:
        if not isinstance(item, dict):
            continue
        record = {k: item[k] for k, kind in RECORD_KEYS.items() if isinstance(item.get(k), kind)}
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
            and 0 < len(name) <= machine_names.MAX_NAME and reason in RECORDED and at is not None):
        return None
    return Replaces(uid, name, reason, at)


def replaces(record: dict) -> dict[str, str]:
    """The annotations of a Machine made to replace the Machine of ``record``."""
    mark = Replaces(record["uid"], record["machine"], record["reason"], timefmt.parse(record["at"]))
    return {machine_names.REPLACES: mark.encode()}


def record(machine: dict, reason: str, at: dt.datetime, stamp: str) -> dict:
    return {"machine": machine["metadata"]["name"], "uid": machine["metadata"]["uid"], "reason": reason,
            "at": timefmt.fmt(at), "startedAt": stamp}


def initialized(machine: dict) -> bool:
    return not machine["metadata"]["deletionTimestamp"] and conditions.is_true(machine["status"],
                                                                              machine_names.INITIALIZED)


def claims(live: list[dict]) -> dict[str, list[dict]]:
    """The live Machines that name, in ``nodewarden.io/replaces``, the Machine of each uid: oldest first."""
    found: dict[str, list[dict]] = {}
    for machine in sorted(live, key=lambda m: (m["metadata"]["creationTimestamp"], m["metadata"]["name"])):
        made_for = replaces_of(machine)
        if made_for is not None and made_for.uid != machine["metadata"]["uid"]:
            found.setdefault(made_for.uid, []).append(machine)
    return found


def known(machines: list[dict], live: list[dict], previous: list[dict], claimed: dict[str, list[dict]],
          now: dt.datetime) -> list[dict]:
    """The open records: the status's, and those only the children prove (a status write was lost), each once.

    A record whose Machine is gone closes once its replacement is Initialized, or nothing replaces it any
    more, or after RECORD_KEEP_SECONDS."""
    stamp = timefmt.fmt(now)
    by_uid = {m["metadata"]["uid"]: m for m in machines}
    live_by_name = {m["metadata"]["name"]: m for m in live}
    records, seen = [], set()
    for entry in previous:
        if entry["uid"] in seen:
            continue
        seen.add(entry["uid"])
        entry = dict(entry)
        if entry["uid"] not in by_uid:
            entry.setdefault("goneAt", stamp)
            gone = timefmt.seconds_since(entry.get("goneAt"), now)
            if entry.get("replacementReadyAt") or not made_for(entry, claimed, live_by_name, set()) \
                    or (gone is not None and gone >= RECORD_KEEP_SECONDS):
                continue
        records.append(entry)
    for machine in sorted(live, key=lambda m: m["metadata"]["name"]):
        uid = machine["metadata"]["uid"]
        if uid in seen:
            continue
        mark = signals.of(machine, signals.DISRUPTION_ANNOTATION)
        made = claimed.get(uid) or []
        if mark is not None and mark.reason in ORDER:
            reason, at = mark.reason, mark.at
        elif made:
            first = replaces_of(made[0])
            reason, at = first.reason, first.at
        else:
            continue
        started = made[0]["metadata"]["creationTimestamp"] if made else ""
        records.append(record(machine, reason, at, started if timefmt.parse(started) else stamp))
        seen.add(uid)
    return records[:MAX_RECORDS]


def made_for(entry: dict, claimed: dict[str, list[dict]], live: dict[str, dict], held: set[str]) -> list[dict]:
    """The live Machines made to replace the record's that are not disrupted themselves, its replacement
    first (Initialized first, then the oldest): those naming it, else one the record names that names no
    Machine (made before replacements named theirs). Sets the record's ``replacement`` to it."""
    found = [m for m in claimed.get(entry["uid"], []) if m["metadata"]["name"] not in held]
    named = live.get(entry.get("replacement") or "")
    if not found and named is not None and named["metadata"]["name"] not in held \
            and machine_names.REPLACES not in named["metadata"]["annotations"]:
        found = [named]
    found.sort(key=lambda m: not initialized(m))
    if found:
        entry["replacement"] = found[0]["metadata"]["name"]
    else:
        entry.pop("replacement", None)
    return found


def waited_for(entry: dict, by_uid: dict[str, dict], claimed: dict[str, list[dict]], live: dict[str, dict],
               held: set[str]) -> list[dict]:
    """The Machines made for the record's Machine when it waits for them (live, disrupted, not repaired)."""
    machine = by_uid.get(entry["uid"])
    made = made_for(entry, claimed, live, held)
    if machine is None or machine["metadata"]["name"] not in held or entry["reason"] == signals.REPAIR:
        return []
    return made


def budget_size(machines: list[dict], records: list[dict]) -> int:
    """What a budget's percentage is of: the pool's Machines with a Node that are not being deleted, each
    Machine and its replacement counted once (the replacement once it is Initialized), so a surge never
    widens the budget it was made under."""
    by_name = {m["metadata"]["name"]: m for m in machines}
    awaited, replaced = set(), set()
    for entry in records:
        new = by_name.get(entry.get("replacement") or "")
        if new is not None and initialized(new):
            replaced.add(entry["machine"])
        elif entry.get("replacement"):
            awaited.add(entry["replacement"])
    return sum(1 for m in machines if not m["metadata"]["deletionTimestamp"] and pool.has_node(m)
               and m["metadata"]["name"] not in awaited and m["metadata"]["name"] not in replaced)


def assign_replacements(needs: list[dict], created: list[str]) -> None:
    """Name each record's replacement: the new Machines of this call, made in the order of ``needs``."""
    for entry, name in zip(needs, created):
        entry["replacement"] = name


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
