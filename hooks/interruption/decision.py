"""The interruption controller's decision over what one call read (pure): each message's writes on its
Machine, then its deletion, chained so a message is deleted only once what it caused is recorded; the
status checks' claims; the queue's status.
"""
from __future__ import annotations

import datetime as dt

from hooks import bounds, conditions, events, timefmt
from hooks.config import Settings
from hooks.contract import HookRequest, RequestError, composite_response
from hooks.interruption import judge, messages, queue
from hooks.plan import HELD, Action, Change, Gate, Outcome, Plan

# status.lastPoll is refreshed at most this often: a write of the status every second would be an
# API server write, and a watch event, per poll.
LAST_POLL_EVERY_SECONDS = 60.0


def recorded_status(request: HookRequest) -> dict:
    """The queue's status as the body has it ({} when it is none)."""
    status = request.parent.get("status")
    return status if isinstance(status, dict) else {}


def status_check_due(request: HookRequest, spec: queue.QueueSpec, now: dt.datetime) -> bool:
    """Whether this call checks the instances' status (every ``statusCheckInterval``)."""
    if not spec.status_checks:
        return False
    last = recorded_status(request).get("lastStatusCheck")
    since = timefmt.seconds_since(last if isinstance(last, str) else None, now)
    return since is None or since < 0 or since >= spec.status_check_interval


def _previous_counts(status: dict) -> dict:
    counts = status.get("messages") if isinstance(status.get("messages"), dict) else {}
    return {o: bounds.status_counter(counts, o) for o in messages.OUTCOMES}


def _base_status(request: HookRequest) -> dict:
    """The status as it was, each field read through a bounding parser."""
    previous = recorded_status(request)
    status: dict = {"observedGeneration": request.meta.get("generation") or 0,
                    "messages": _previous_counts(previous),
                    "statusImpaired": bounds.status_counter(previous, "statusImpaired")}
    for key in ("lastPoll", "lastStatusCheck"):
        if timefmt.parse(previous.get(key) if isinstance(previous.get(key), str) else None) is not None:
            status[key] = previous[key]
    ready = conditions.find(previous, "Ready")
    if ready is not None:
        status["conditions"] = [ready]
    return status


def _ready(status: dict, value: str, reason: str, message: str, now: dt.datetime) -> dict:
    updated, _ = conditions.set(status, "Ready", value, reason, message, timefmt.fmt(now))
    status["conditions"] = [c for c in updated["conditions"] if c.get("type") == "Ready"]
    return status


def decide(request: HookRequest, settings: Settings, now: dt.datetime, observed: dict) -> Plan:
    status = _base_status(request)
    if not request.verified:
        # A body is a hint: nothing is received until the API server confirms the queue.
        return Plan(composite_response(status=status, resync_after=settings.error_backoff_seconds), verify=True)
    try:
        spec = queue.parse(request.parent)
    except RequestError as exc:
        status["lastError"] = str(exc)[:2000]
        _ready(status, "False", events.INVALID_SPEC, str(exc), now)
        return Plan(composite_response(status=status, resync_after=settings.error_backoff_max_seconds),
                    events=[events.warning(events.INVALID_SPEC, str(exc))])
    region = observed.get("region") or settings.aws_region
    errors = [f"{what}: {observed[key]}" for key, what in (
        ("receiveError", "ReceiveMessage"), ("machinesError", "Machines"), ("instancesError", "DescribeInstances"),
        ("statusError", "DescribeInstanceStatus"), ("spotRequestsError", "DescribeSpotInstanceRequests"))
        if observed.get(key)]
    actions: list[Action] = []
    book = judge.Book(observed.get("machines") or [])
    for index, raw in enumerate(observed.get("messages") or []):
        actions += _message_actions(f"m{index}", raw, spec, region, book, observed, settings, now)
    if "impaired" in observed and (not observed["impaired"] or "instances" in observed):
        status["lastStatusCheck"] = timefmt.fmt(now)
        for claim in judge.status_claims(observed["impaired"], now):
            for verdict in judge.judge(claim, book, observed.get("instances") or {}, settings.cluster_name, now):
                if verdict.outcome == messages.RECORDED:
                    actions += _record(f"s-{verdict.instance}", verdict,
                                       (Change(("status", "statusImpaired"), add=1),))
    said = []
    if errors:
        status["lastError"] = "; ".join(errors)[:2000]
        _ready(status, "False", "PollFailed", status["lastError"], now)
        said.append(events.warning(events.INTERRUPTION_POLL_FAILED, status["lastError"]))
    else:
        status.pop("lastError", None)
        _ready(status, "True", "Polling", f"polling {spec.queue_url}", now)
        since = timefmt.seconds_since(status.get("lastPoll"), now)
        if since is None or since < 0 or since >= LAST_POLL_EVERY_SECONDS:
            status["lastPoll"] = timefmt.fmt(now)
    resync = settings.error_backoff_seconds if errors else spec.poll_interval
    return Plan(composite_response(status=status, resync_after=resync), actions, said, gate=ChainGate())


def _message_actions(chain: str, raw: dict, spec: queue.QueueSpec, region: str, book: judge.Book,
                     observed: dict, settings: Settings, now: dt.datetime) -> list[Action]:
    """The writes a message causes, then its deletion and its count; nothing while a look-up it needs failed."""
    receipt = raw.get("receipt") if isinstance(raw, dict) else None
    if not isinstance(receipt, str) or not receipt or len(receipt) > 4096:
        return []  # nothing to delete it with: it comes back, and is read again then
    parsed = messages.parse(messages.message_id(raw.get("id")), raw.get("body"), region, now)
    if isinstance(parsed, messages.Dropped):
        verdicts = [judge.Verdict(parsed.message_id, parsed.kind, parsed.outcome, parsed.why)]
    elif "instances" not in observed:
        return []  # EC2 or the API server not asked, or not answering: the message comes back
    elif observed.get("spotRequestsError") and judge.spot_status_needed(parsed, now):
        return []  # EC2 not asked whether it reclaims the instance: the message comes back
    else:
        verdicts = judge.judge(parsed, book, observed["instances"], settings.cluster_name, now)
    waiting = [v for v in verdicts if v.outcome == messages.WAITING]
    if waiting:
        # Not deleted: it comes back after the visibility timeout. Each wait is counted.
        return [Action("metric.interruption", v.kind, {"outcome": messages.WAITING, "chain": chain},
                       record=(Change(("status", "messages", messages.WAITING), add=1),)) for v in waiting]
    actions: list[Action] = []
    for verdict in verdicts:
        if verdict.outcome == messages.RECORDED:
            actions += _record(chain, verdict, ())
    dropped = [v for v in verdicts if v.outcome != messages.RECORDED]
    params = {"queueURL": spec.queue_url, "receipt": receipt, "region": spec.region, "chain": chain}
    if dropped:  # why, for `nodewarden replay` and the fixtures
        params["dropped"] = [f"{v.outcome}: {v.why}"[:300] for v in dropped]
    actions.append(Action("sqs.delete", verdicts[0].message_id or "(no id)", params,
                          record=tuple(Change(("status", "messages", v.outcome), add=1) for v in dropped)))
    for verdict in dropped:
        actions.append(Action("metric.interruption", verdict.kind, {"outcome": verdict.outcome, "chain": chain}))
    return actions


def _record(chain: str, verdict: judge.Verdict, extra: tuple) -> list[Action]:
    signal = verdict.signal
    deadline = f", deadline {timefmt.fmt(signal.deadline)}" if signal.deadline else ""
    counted = (Change(("status", "messages", messages.RECORDED), add=1),) if not extra else extra
    params = {"uid": verdict.machine_uid, "interruption": signal.encode(), "chain": chain}
    if verdict.replaces is not None:
        params["replaces"] = verdict.replaces  # a stop EC2 no longer agrees with
    return [
        Action("kube.annotate-machine", verdict.machine, params,
               record=counted,
               reports=events.normal(events.INTERRUPTION_RECORDED,
                                     f"Machine {verdict.machine} (instance {verdict.instance}): {signal.reason} "
                                     f"at {timefmt.fmt(signal.at)}{deadline}, from {signal.id}")),
        Action("metric.interruption", signal.reason, {"outcome": messages.RECORDED, "chain": chain}),
    ]


class ChainGate(Gate):
    """An action runs only if every earlier action of its message (its ``chain``) succeeded.

    So a message is deleted only once what it caused is on its Machines, and a
    failed write leaves the message on the queue for the next call.
    """

    def hold(self, action: Action, outcomes: list[Outcome], started: float) -> Outcome | None:
        chain = action.params.get("chain")
        failed = [o for o in outcomes if not o.ok and o.action.params.get("chain") == chain]
        if chain is None or not failed:
            return None
        return Outcome(action, False, f"not done: {failed[0].action.kind} {failed[0].action.target} failed",
                       code=HELD)
