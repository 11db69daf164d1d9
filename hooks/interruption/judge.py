"""What each claim means for this cluster's Machines, once EC2 and the API server were asked (pure).

A message names an instance; it is acted on only when, as read just now:

- EC2 knows the instance and it carries ``kubernetes.io/cluster/<cluster>=owned``;
- exactly one Machine records it in ``status.instanceID``, and the instance is
  that Machine's (``names.machines_instance``);
- EC2 agrees with the claim: a spot warning or a rebalance recommendation
  names a spot instance, a state change names an instance that is leaving now.

Anything else is dropped with the reason as its outcome. A signal is
written only over none or a weaker one (``signals.supersedes``), so a
redelivered message finds its signal there and writes nothing.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from hooks.interruption import messages
from hooks.machines import names, signals

STATUS_CHECK_ID = "status-check"


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


def machine_summary(machine: dict) -> dict:
    """What judging needs of a Machine (JSON-able: fixtures give the same)."""
    meta = machine.get("metadata") if isinstance(machine.get("metadata"), dict) else {}
    status = machine.get("status") if isinstance(machine.get("status"), dict) else {}
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
    recorded = status.get("instanceID")
    return {"name": meta.get("name") if isinstance(meta.get("name"), str) else "",
            "uid": meta.get("uid") if isinstance(meta.get("uid"), str) else "",
            "instanceID": recorded if isinstance(recorded, str) else "",
            "interruption": annotations.get(signals.INTERRUPTION_ANNOTATION)}


class Book:
    """The Machines by the instance they record, and the signal each carries as this call leaves it."""

    def __init__(self, machines: list[dict]):
        self._by_instance: dict[str, list[dict]] = {}
        self._carried: dict[str, signals.Signal | None] = {}
        for m in machines:
            if not isinstance(m, dict) or not m.get("instanceID") or not m.get("uid") or not m.get("name"):
                continue
            self._by_instance.setdefault(m["instanceID"], []).append(m)
            self._carried[m["uid"]] = signals.parse(m.get("interruption"), signals.INTERRUPTIONS)

    def recording(self, instance: str) -> list[dict]:
        return self._by_instance.get(instance, [])

    def carried(self, uid: str) -> signals.Signal | None:
        return self._carried.get(uid)

    def carry(self, uid: str, signal: signals.Signal) -> None:
        self._carried[uid] = signal

    @property
    def instances(self) -> list[str]:
        return sorted(self._by_instance)


def judge(claim: messages.Claim, book: Book, instances: dict, cluster_name: str) -> list[Verdict]:
    """One verdict per instance the claim names; ``instances`` is DescribeInstances' answer by id."""
    return [_one(claim, iid, book, instances.get(iid), cluster_name) for iid in claim.instances]


def _one(claim: messages.Claim, iid: str, book: Book, instance: dict | None, cluster_name: str) -> Verdict:
    def dropped(outcome: str, why: str) -> Verdict:
        return Verdict(claim.message_id, claim.reason, outcome, why, iid)

    if not isinstance(instance, dict):
        return dropped(messages.FOREIGN, f"EC2 does not know instance {iid}")
    tags = instance.get("tags") if isinstance(instance.get("tags"), dict) else {}
    if not cluster_name or tags.get(names.cluster_tag(cluster_name)) != names.CLUSTER_TAG_VALUE:
        return dropped(messages.FOREIGN, f"instance {iid} is not tagged for cluster {cluster_name!r}")
    recording = book.recording(iid)
    if len(recording) != 1:
        return dropped(messages.FOREIGN, f"instance {iid} is recorded by {len(recording)} Machines, not one")
    machine = recording[0]
    if not names.machines_instance(tags, machine["uid"], cluster_name):
        return dropped(messages.FOREIGN, f"instance {iid} is not Machine {machine['name']}'s")
    if claim.reason in (signals.SPOT_INTERRUPTION, signals.REBALANCE) and instance.get("lifecycle") != "spot":
        return dropped(messages.UNCONFIRMED, f"instance {iid} is not a spot instance")
    if claim.reason == signals.INSTANCE_STOPPING and instance.get("state") not in messages.LEAVING_STATES:
        return dropped(messages.UNCONFIRMED, f"instance {iid} is {instance.get('state')}, not leaving")
    signal = claim.signal()
    carried = book.carried(machine["uid"])
    if not signals.supersedes(signal, carried):
        return Verdict(claim.message_id, claim.reason, messages.DUPLICATE,
                       f"Machine {machine['name']} already carries {carried.reason} from {carried.id or 'unknown'}",
                       iid, machine["name"], machine["uid"])
    book.carry(machine["uid"], signal)
    return Verdict(claim.message_id, claim.reason, messages.RECORDED, "", iid, machine["name"], machine["uid"], signal)


def status_claims(impaired: list[str], now: dt.datetime) -> list[messages.Claim]:
    """A claim per instance whose status checks EC2 reports impaired, given at ``now``."""
    return [messages.Claim(STATUS_CHECK_ID, signals.STATUS_IMPAIRED, (iid,), now) for iid in sorted(set(impaired))]
