"""One SQS message from EventBridge: what it claims about which instances (pure, bounded).

EventBridge delivers an event to an SQS target as the event's JSON itself:
``{"version", "id", "detail-type", "source", "account", "time", "region",
"resources", "detail"}``. The kinds read here, and where they name the instance:

- ``aws.ec2`` / ``EC2 Spot Instance Interruption Warning``: ``detail.instance-id``;
  the instance is reclaimed two minutes after ``time``.
- ``aws.ec2`` / ``EC2 Instance Rebalance Recommendation``: ``detail.instance-id``.
- ``aws.ec2`` / ``EC2 Instance State-change Notification``: ``detail.instance-id``
  and ``detail.state``; only stopping, stopped, shutting-down and terminated
  mean the instance is going.
- ``aws.health`` / ``AWS Health Event`` with ``detail.service`` EC2 and
  ``detail.eventTypeCategory`` scheduledChange (a retirement, a maintenance
  reboot): ``detail.affectedEntities[].entityValue``, from ``detail.startTime``
  (when given, it must be a readable time).

Every time a message gives must lie within a range of the call's clock
(``EVENT_MAX_AGE_SECONDS`` before to ``EVENT_MAX_AHEAD_SECONDS`` after for the
event's ``time``, ``SCHEDULE_RANGE_SECONDS`` either side for a Health
``startTime``): a time outside it is no event EC2 sends, and one in it can be
computed with and written as nodewarden writes times (``hooks.timefmt``), so
such a message is malformed rather than a write that can never succeed.

A message is only a claim: what it names is checked against EC2 and the
Machines before anything is written (``hooks.interruption.judge``).
"""
from __future__ import annotations

import datetime as dt
import email.utils
import re
from dataclasses import dataclass

from hooks import bounds, timefmt
from hooks.contract import RequestError
from hooks.ec2_names import LEAVING_STATES, STATES
from hooks.machines import signals
from hooks.providerid import INSTANCE_ID

# SQS bodies are at most 256 KiB; EC2's events are a few hundred bytes, Health's a few KiB.
MAX_BODY = 64 * 1024
MAX_DEPTH = 8
# A Health event may name many instances; more than this in one message is not an event we trust.
MAX_INSTANCES = 100
_MESSAGE_ID = re.compile(r"[A-Za-z0-9-]{1,128}")

SPOT_WARNING = ("aws.ec2", "EC2 Spot Instance Interruption Warning")
REBALANCE = ("aws.ec2", "EC2 Instance Rebalance Recommendation")
STATE_CHANGE = ("aws.ec2", "EC2 Instance State-change Notification")
HEALTH = ("aws.health", "AWS Health Event")

# The times a message may give, around the call's clock. SQS keeps a message at most 14 days; EC2's and
# EventBridge's clocks are not ours, so an event may look a little ahead. A Health scheduled change is
# announced days to weeks ahead, and its window may have begun.
EVENT_MAX_AGE_SECONDS = 14 * 86400.0
EVENT_MAX_AHEAD_SECONDS = 300.0
SCHEDULE_RANGE_SECONDS = 366 * 86400.0

# What became of a message (the ``outcome`` label of nodewarden_interruption_messages_total).
RECORDED = "recorded"  # the signal is on the Machine
DUPLICATE = "duplicate"  # the Machine already carries this signal or a stronger one
IGNORED = "ignored"  # a kind we read that asks nothing of us (a state change to running)
UNKNOWN = "unknown"  # not a kind we read
MALFORMED = "malformed"  # unreadable, oversized, or missing what its kind must carry
FOREIGN = "foreign"  # another region's, or an instance no Machine of this cluster records
UNCONFIRMED = "unconfirmed"  # EC2 says otherwise now: not a spot instance, not leaving, a spot warning outlived
# Not deleted: the instance is a Machine's by its tags, but the Machine has not recorded it yet (counted each
# time the message is put back; it is received again after the visibility timeout).
WAITING = "waiting"
OUTCOMES = (RECORDED, DUPLICATE, IGNORED, UNKNOWN, MALFORMED, FOREIGN, UNCONFIRMED, WAITING)
# The ``kind`` label of a message no kind of ours was read from.
UNREAD = "unknown"


@dataclass(frozen=True)
class Claim:
    """What one message says: ``reason`` (a signals reason) for ``instances``, from ``at``."""

    message_id: str
    reason: str
    instances: tuple[str, ...]
    at: dt.datetime
    deadline: dt.datetime | None = None
    region: str = ""
    state: str = ""  # a state change's new state

    def signal(self) -> signals.Signal:
        return signals.Signal(self.reason, self.at, self.deadline, self.message_id)


@dataclass(frozen=True)
class Dropped:
    """A message nothing is done about, and why (an outcome)."""

    message_id: str
    outcome: str
    why: str
    kind: str = UNREAD


def message_id(raw) -> str:
    """The SQS message id, bounded (it becomes the signal's id)."""
    return raw if isinstance(raw, str) and _MESSAGE_ID.fullmatch(raw) else ""


def _within(moment: dt.datetime, now: dt.datetime, before: float, after: float) -> bool:
    return -after <= (now - moment).total_seconds() <= before


def parse(ident: str, body, region: str, now: dt.datetime) -> Claim | Dropped:
    """The claim of one message body, or why it is dropped; ``region`` is ours (another's is foreign),
    ``now`` the call's clock, which every time the message gives must lie near."""
    if not ident:
        return Dropped("", MALFORMED, "no readable message id")
    if not isinstance(body, str):
        return Dropped(ident, MALFORMED, "no body")
    try:
        event = bounds.json_value(body, "message", max_bytes=MAX_BODY, max_depth=MAX_DEPTH)
    except RequestError as exc:
        return Dropped(ident, MALFORMED, str(exc))
    if not isinstance(event, dict):
        return Dropped(ident, MALFORMED, "not a JSON object")
    key = (event.get("source"), event.get("detail-type"))
    reason = {SPOT_WARNING: signals.SPOT_INTERRUPTION, REBALANCE: signals.REBALANCE,
              STATE_CHANGE: signals.INSTANCE_STOPPING, HEALTH: signals.SCHEDULED_CHANGE}.get(key)
    if reason is None:
        return Dropped(ident, UNKNOWN, f"source {str(key[0])[:64]!r} detail-type {str(key[1])[:64]!r}")
    detail = event.get("detail")
    at = timefmt.parse(event.get("time")) if isinstance(event.get("time"), str) else None
    if not isinstance(detail, dict) or at is None:
        return Dropped(ident, MALFORMED, "no detail or no readable time", reason)
    if not _within(at, now, EVENT_MAX_AGE_SECONDS, EVENT_MAX_AHEAD_SECONDS):
        return Dropped(ident, MALFORMED, f"time {event['time'][:40]!r} is out of range", reason)
    at = at.replace(microsecond=0)  # to the second, as it is written
    event_region = event.get("region")
    if not isinstance(event_region, str) or not event_region:
        return Dropped(ident, MALFORMED, "no region", reason)
    if region and event_region != region:
        return Dropped(ident, FOREIGN, f"region {event_region[:32]!r}, not {region!r}", reason)
    if key == HEALTH:
        return _health(ident, detail, at, event_region, now)
    instance = detail.get("instance-id")
    if not isinstance(instance, str) or not INSTANCE_ID.fullmatch(instance):
        return Dropped(ident, MALFORMED, "no readable detail.instance-id", reason)
    if key == STATE_CHANGE:
        state = detail.get("state")
        if state not in STATES:
            return Dropped(ident, MALFORMED, f"state {str(state)[:32]!r}", reason)
        if state not in LEAVING_STATES:
            return Dropped(ident, IGNORED, f"instance {instance} is {state}", reason)
        return Claim(ident, reason, (instance,), at, None, event_region, state)
    deadline = at + dt.timedelta(seconds=signals.SPOT_NOTICE_SECONDS) if key == SPOT_WARNING else None
    return Claim(ident, reason, (instance,), at, deadline, event_region)


def _health(ident: str, detail: dict, at: dt.datetime, region: str, now: dt.datetime) -> Claim | Dropped:
    """An AWS Health scheduled change for EC2 instances; any other Health event asks nothing of us."""
    reason = signals.SCHEDULED_CHANGE
    if detail.get("service") != "EC2" or detail.get("eventTypeCategory") != "scheduledChange":
        return Dropped(ident, IGNORED, f"Health {str(detail.get('service'))[:16]} "
                                       f"{str(detail.get('eventTypeCategory'))[:32]} event", reason)
    entities = detail.get("affectedEntities")
    if not isinstance(entities, list) or len(entities) > MAX_INSTANCES:
        return Dropped(ident, MALFORMED, "affectedEntities missing or too many", reason)
    found = []
    for entity in entities:
        value = entity.get("entityValue") if isinstance(entity, dict) else None
        if isinstance(value, str) and INSTANCE_ID.fullmatch(value) and value not in found:
            found.append(value)
    if not found:
        return Dropped(ident, MALFORMED, "no instance among affectedEntities", reason)
    given = detail.get("startTime")
    start = health_time(given)
    if given is not None and (start is None or not _within(start, now, SCHEDULE_RANGE_SECONDS,
                                                           SCHEDULE_RANGE_SECONDS)):
        return Dropped(ident, MALFORMED, f"startTime {str(given)[:64]!r} is not a time in range", reason)
    return Claim(ident, reason, tuple(found), at, start.replace(microsecond=0) if start else None, region)


def health_time(value) -> dt.datetime | None:
    """Health's ``startTime``: RFC 1123 (``Sat, 05 Jun 2021 20:00:00 GMT``) in events, ISO 8601 in some tools."""
    if not isinstance(value, str) or len(value) > 64:
        return None
    parsed = timefmt.parse(value)
    if parsed is not None:
        return parsed
    try:
        moment = email.utils.parsedate_to_datetime(value)
        if moment is None:
            return None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=dt.timezone.utc)
        return moment.astimezone(dt.timezone.utc)
    except (TypeError, ValueError, IndexError, OverflowError):  # OverflowError: a year 9999 shifted past it
        return None
