"""What each claim means for this cluster's Machines, once EC2 and the API server were asked (pure).

A message names an instance; it is acted on only when, as read just now:

- EC2 knows the instance and it carries ``kubernetes.io/cluster/<cluster>=owned``;
- exactly one Machine records it in ``status.instanceID``, and the instance is
  that Machine's (``names.machines_instance``);
- EC2 agrees with the claim: a spot warning or a rebalance recommendation
  names a spot instance, a state change names an instance that is leaving now,
  and a spot warning whose deadline has passed (a redrive, a replay) is
  confirmed by EC2 now: the instance has left ``running``, or its spot request
  says it is being reclaimed (``marked-for-termination``, ``-stop``,
  ``-hibernation``). A warning within its two minutes is recorded on the
  spot instance as it is: EC2 may not show the reclaim yet, and the drain has
  only that long.

Two cases are neither recorded nor dropped as foreign:

- The instance carries this cluster's tag and the UID tag of a Machine that
  records no instance yet (the seconds after RunInstances, or a crash before
  the status write): the message waits (``WAITING``: not deleted, received
  again after the visibility timeout) until the Machine records it, at most
  ``RECORD_WAIT_SECONDS`` after the event; then it is foreign. Our tags prove
  the instance ours, and a Machine the API server does not have proves nothing.
- The Machine is being deleted (``deletionTimestamp``, or its termination
  begun): its finalizer terminates the instance, so a state change is our own
  termination, not EC2's disruption, and any other notice but a spot warning
  (whose deadline cuts the drain short) changes nothing (``IGNORED``).

Anything else is dropped with the reason as its outcome. A signal is written
only over none or a weaker one (``signals.supersedes``), or over a stop EC2
no longer agrees with (``signals.outlived``), so a redelivered message finds
its signal there and writes nothing.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass

from hooks import timefmt
from hooks.ec2_names import LEAVING_STATES, cluster_owned
from hooks.interruption import messages
from hooks.machines import names, signals

STATUS_CHECK_ID = "status-check"
# How long after its event a notice for an instance of ours waits for its Machine to record it: the record is
# written in the call after RunInstances, or in the next one after a crash.
RECORD_WAIT_SECONDS = 300.0
# Spot request status codes that say EC2 is reclaiming the instance now.
SPOT_RECLAIMING = ("marked-for-termination", "marked-for-stop", "marked-for-hibernation")


@dataclass(frozen=True)
class Verdict:
    """What one claim means for one of the instances it names."""

    message_id: str
    kind: str  # the signal's reason, or messages.UNREAD
    outcome: str
    why: str = ""
    instance: str = ""
    machine: str = ""
    machine_uid: str = ""
    signal: signals.Signal | None = None
    replaces: str | None = None  # the annotation the write may replace: a stop EC2 no longer agrees with


def machine_summary(machine: dict) -> dict:
    """What judging needs of a Machine (JSON-able: fixtures give the same)."""
    meta = machine.get("metadata") if isinstance(machine.get("metadata"), dict) else {}
    status = machine.get("status") if isinstance(machine.get("status"), dict) else {}
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
    termination = status.get("termination") if isinstance(status.get("termination"), dict) else {}
    recorded = status.get("instanceID")
    return {"name": meta.get("name") if isinstance(meta.get("name"), str) else "",
            "uid": meta.get("uid") if isinstance(meta.get("uid"), str) else "",
            "instanceID": recorded if isinstance(recorded, str) else "",
            "interruption": annotations.get(signals.INTERRUPTION_ANNOTATION),
            "deleting": bool(meta.get("deletionTimestamp") or termination.get("startedAt"))}


class Book:
    """The Machines by the instance they record and by uid, and the signal each carries as this call leaves it."""

    def __init__(self, machines: list[dict]):
        self._by_instance: dict[str, list[dict]] = {}
        self._by_uid: dict[str, dict] = {}
        self._carried: dict[str, tuple[signals.Signal | None, str | None]] = {}
        for m in machines:
            if not isinstance(m, dict) or not isinstance(m.get("uid"), str) or not m.get("uid") \
                    or not m.get("name"):
                continue
            self._by_uid[m["uid"]] = m
            text = m.get("interruption") if isinstance(m.get("interruption"), str) else None
            self._carried[m["uid"]] = (signals.parse(text, signals.INTERRUPTIONS), text)
            if m.get("instanceID"):
                self._by_instance.setdefault(m["instanceID"], []).append(m)

    def recording(self, instance: str) -> list[dict]:
        return self._by_instance.get(instance, [])

    def machine(self, uid) -> dict | None:
        return self._by_uid.get(uid) if isinstance(uid, str) else None

    def carried(self, uid: str) -> signals.Signal | None:
        return self._carried.get(uid, (None, None))[0]

    def carried_text(self, uid: str) -> str | None:
        """The annotation as the API server has it, or as this call writes it."""
        return self._carried.get(uid, (None, None))[1]

    def carry(self, uid: str, signal: signals.Signal) -> None:
        self._carried[uid] = (signal, signal.encode())


def spot_status_needed(claim: messages.Claim, now: dt.datetime) -> bool:
    """A spot warning whose deadline has passed: only EC2's word now (the spot request's status) confirms it."""
    return claim.reason == signals.SPOT_INTERRUPTION and claim.deadline is not None and claim.deadline <= now


def judge(claim: messages.Claim, book: Book, instances: dict, cluster_name: str, now: dt.datetime) -> list[Verdict]:
    """One verdict per instance the claim names; ``instances`` is DescribeInstances' answer by id (with
    ``spotRequest``, the spot request's status code, where it was asked).

    A message one of whose instances waits is written for none of them yet: it stays on the queue, and
    what it would write is judged again when it comes back (nothing is carried for a later message).
    """
    verdicts = [_one(claim, iid, book, instances.get(iid), cluster_name, now) for iid in claim.instances]
    waiting = [v for v in verdicts if v.outcome == messages.WAITING]
    if waiting:
        held = f"its message waits for instance {waiting[0].instance}"
        return [dataclasses.replace(v, outcome=messages.WAITING, why=held) if v.outcome == messages.RECORDED else v
                for v in verdicts]
    for verdict in verdicts:
        if verdict.outcome == messages.RECORDED:
            book.carry(verdict.machine_uid, verdict.signal)
    return verdicts


def _one(claim: messages.Claim, iid: str, book: Book, instance: dict | None, cluster_name: str,
         now: dt.datetime) -> Verdict:
    def dropped(outcome: str, why: str) -> Verdict:
        return Verdict(claim.message_id, claim.reason, outcome, why, iid)

    if not isinstance(instance, dict):
        return dropped(messages.FOREIGN, f"EC2 does not know instance {iid}")
    tags = instance.get("tags") if isinstance(instance.get("tags"), dict) else {}
    if not cluster_owned(tags, cluster_name):
        return dropped(messages.FOREIGN, f"instance {iid} is not tagged for cluster {cluster_name!r}")
    recording = book.recording(iid)
    if len(recording) > 1:
        return dropped(messages.FOREIGN, f"instance {iid} is recorded by {len(recording)} Machines, not one")
    if recording:
        machine = recording[0]
        if not names.machines_instance(tags, machine["uid"], cluster_name):
            return dropped(messages.FOREIGN, f"instance {iid} is not Machine {machine['name']}'s")
    else:
        machine = book.machine(tags.get(names.TAG_MACHINE_UID))
        if machine is None:
            return dropped(messages.FOREIGN, f"instance {iid} is recorded by no Machine, and its "
                                             f"{names.TAG_MACHINE_UID} tag names none")
        if machine.get("instanceID"):
            # A second launch for the Machine: its controller terminates it.
            return dropped(messages.FOREIGN, f"instance {iid} is not the one Machine {machine['name']} records "
                                             f"({machine['instanceID']})")

    def about(outcome: str, why: str = "", signal: signals.Signal | None = None,
              replaces: str | None = None) -> Verdict:
        return Verdict(claim.message_id, claim.reason, outcome, why, iid, machine["name"], machine["uid"], signal,
                       replaces)

    if machine.get("deleting") and not (recording and claim.reason == signals.SPOT_INTERRUPTION):
        # Its own termination, or a notice that changes nothing now; a spot warning still cuts its drain short.
        return about(messages.IGNORED, f"Machine {machine['name']} is being deleted: its finalizer terminates "
                                       f"instance {iid}")
    disagreement = _disagreement(claim, iid, instance, now)
    if disagreement:
        return about(messages.UNCONFIRMED, disagreement)
    if not recording:
        if (now - claim.at).total_seconds() > RECORD_WAIT_SECONDS:
            return about(messages.FOREIGN, f"instance {iid} carries Machine {machine['name']}'s tags, but the Machine "
                                           f"has not recorded it within {RECORD_WAIT_SECONDS:g}s of the event")
        return about(messages.WAITING, f"instance {iid} carries Machine {machine['name']}'s tags; the Machine "
                                       f"records no instance yet")
    signal = claim.signal()
    carried = book.carried(machine["uid"])
    replaces = None
    if signals.outlived(carried, instance.get("state"), now):
        replaces, carried = book.carried_text(machine["uid"]), None
    if not signals.supersedes(signal, carried):
        return about(messages.DUPLICATE,
                     f"Machine {machine['name']} already carries {carried.reason} from {carried.id or 'unknown'}")
    return about(messages.RECORDED, "", signal, replaces)


def _disagreement(claim: messages.Claim, iid: str, instance: dict, now: dt.datetime) -> str:
    """Why what EC2 says now does not bear the claim out ("" when it does)."""
    state = instance.get("state")
    if claim.reason in (signals.SPOT_INTERRUPTION, signals.REBALANCE) and instance.get("lifecycle") != "spot":
        return f"instance {iid} is not a spot instance"
    if claim.reason == signals.INSTANCE_STOPPING and state not in LEAVING_STATES:
        return f"instance {iid} is {state}, not leaving"
    if spot_status_needed(claim, now) and state not in LEAVING_STATES \
            and instance.get("spotRequest") not in SPOT_RECLAIMING:
        code = instance.get("spotRequest")
        return (f"the warning's deadline {timefmt.fmt(claim.deadline)} has passed, and instance {iid} is {state} "
                f"with its spot request {str(code)[:64] if code else 'not found'}")
    return ""


def status_claims(impaired: list[str], now: dt.datetime) -> list[messages.Claim]:
    """A claim per instance whose status checks EC2 reports impaired, given at ``now``."""
    return [messages.Claim(STATUS_CHECK_ID, signals.STATUS_IMPAIRED, (iid,), now) for iid in sorted(set(impaired))]
