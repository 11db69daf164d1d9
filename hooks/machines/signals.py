"""Why a Machine should go: the signals and the disruption reasons, and the annotations that carry them (pure).

Two annotations on a Machine, each written by one controller only:

- ``nodewarden.io/interruption`` (the interruption controller): what EC2
  said about the Machine's instance — a spot interruption warning, a
  rebalance recommendation, a scheduled change, a state change to stopping
  or terminated, impaired status checks — as JSON
  ``{"reason", "at", "deadline", "id"}``. Written only after the instance was
  found to carry this cluster's tag and to be the one the Machine records.
  A stop EC2 no longer agrees with (``outlived``: the instance runs again)
  is retired: the machine controller removes it, and a later notice is
  written over it.
- ``nodewarden.io/disruption`` (the nodepool controller): that the pool has
  chosen the Machine to go, and why, as JSON ``{"reason", "at"}``. The
  machine controller shows it as the Disrupted condition and on the Node.

Both are read through ``parse``, which bounds them: anything else reads as
no signal at all. Whoever may write a Machine's annotations may delete the
Machine too, so neither grants more than that.
"""
from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass

from hooks import timefmt
from hooks.ec2_names import RUNNING

INTERRUPTION_ANNOTATION = "nodewarden.io/interruption"
DISRUPTION_ANNOTATION = "nodewarden.io/disruption"

# Signals from EC2 (the interruption controller).
SPOT_INTERRUPTION = "SpotInterruption"
INSTANCE_STOPPING = "InstanceStopping"  # a state change to stopping, stopped, shutting-down or terminated
REBALANCE = "RebalanceRecommendation"
SCHEDULED_CHANGE = "ScheduledChange"
STATUS_IMPAIRED = "StatusImpaired"
INTERRUPTIONS = (SPOT_INTERRUPTION, INSTANCE_STOPPING, REBALANCE, SCHEDULED_CHANGE, STATUS_IMPAIRED)
# The instance is going whatever we do: the Machine leaves at once, budgets or not.
FORCEFUL = (SPOT_INTERRUPTION, INSTANCE_STOPPING)

# Reasons of the pool's own (from the Machine, its age, its fencing, the pool's size).
REPAIR = "Repair"  # its Node was fenced: powered off, confirmed, recovered
DRIFTED = "Drifted"
EXPIRED = "Expired"
SCALE_DOWN = "ScaleDown"
# A provisioning pool's consolidation: no pod but DaemonSet ones, or its pods fit elsewhere for less.
EMPTY = "Empty"
UNDERUTILIZED = "Underutilized"
CONSOLIDATION = (EMPTY, UNDERUTILIZED)
REASONS = INTERRUPTIONS + (REPAIR, DRIFTED, EXPIRED, SCALE_DOWN) + CONSOLIDATION
# Reasons a budget can name (everything a pool chooses; forceful ones are counted, never held).
BUDGETED = (REBALANCE, SCHEDULED_CHANGE, STATUS_IMPAIRED, REPAIR, DRIFTED, EXPIRED, SCALE_DOWN) + CONSOLIDATION

# A spot instance is reclaimed two minutes after its warning.
SPOT_NOTICE_SECONDS = 120.0
# EC2's reads of an instance settle within this long of a state change: a stop is judged outlived only on a
# read at least this long after it, never on one that may predate it.
STOP_SETTLE_SECONDS = 60.0
_MAX_ANNOTATION = 1024
_MAX_ID = 128


@dataclass(frozen=True)
class Signal:
    reason: str
    at: dt.datetime  # when the signal was given (EC2's event time, or the pool's decision)
    deadline: dt.datetime | None = None  # when the instance goes anyway (spot: two minutes after the warning)
    id: str = ""  # the message or check it came from

    @property
    def forceful(self) -> bool:
        return self.reason in FORCEFUL

    def encode(self) -> str:
        out = {"reason": self.reason, "at": timefmt.fmt(self.at)}
        if self.deadline is not None:
            out["deadline"] = timefmt.fmt(self.deadline)
        if self.id:
            out["id"] = self.id
        return json.dumps(out, separators=(",", ":"), sort_keys=True)


def json_object(value, max_length: int = _MAX_ANNOTATION) -> dict | None:
    """The JSON object an annotation of ours holds, or None when it is absent, longer than ``max_length``,
    unreadable or not an object."""
    if not isinstance(value, str) or not value or len(value) > max_length:
        return None
    try:
        data = json.loads(value)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def parse(value, allowed: tuple[str, ...] = REASONS) -> Signal | None:
    """The signal an annotation carries, or None when it is absent, malformed or out of bounds."""
    data = json_object(value)
    if data is None or data.get("reason") not in allowed:
        return None
    at = timefmt.parse(data.get("at"))
    if at is None:
        return None
    deadline = timefmt.parse(data.get("deadline")) if data.get("deadline") is not None else None
    ident = data.get("id") if isinstance(data.get("id"), str) else ""
    return Signal(data["reason"], at, deadline, ident[:_MAX_ID])


def of(machine: dict, annotation: str) -> Signal | None:
    """The signal in one of a Machine's annotations (the Machine as hooks.machines.pool reads it, or raw)."""
    meta = machine.get("metadata") if isinstance(machine.get("metadata"), dict) else {}
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
    allowed = INTERRUPTIONS if annotation == INTERRUPTION_ANNOTATION else REASONS
    return parse(annotations.get(annotation), allowed)


def supersedes(new: Signal, old: Signal | None) -> bool:
    """Whether ``new`` is worth writing over ``old``: nothing there, or forceful over not forceful.

    A redelivered message, or a second signal for a Machine already going,
    changes nothing: the first signal's time is what the replacement is measured from.
    """
    if old is None:
        return True
    return new.forceful and not old.forceful


def outlived(signal: Signal | None, state, now: dt.datetime) -> bool:
    """Whether ``signal`` is a stop EC2 no longer agrees with: the instance is ``running`` (``state``, as
    DescribeInstances says now) at least STOP_SETTLE_SECONDS after the stop, so it was started again."""
    return signal is not None and signal.reason == INSTANCE_STOPPING and state == RUNNING \
        and (now - signal.at).total_seconds() >= STOP_SETTLE_SECONDS
