"""interruption: read what EC2 says is about to happen to this cluster's instances, and record it on their Machines.

CompositeController on InterruptionQueue (cluster-scoped: only cluster admins
name a queue), with no children, resynced about every second. Metacontroller
serialises the syncs of one object, so each queue has exactly one poller
however many hook replicas run; nothing is kept between calls (a message is
deleted only once what it caused is recorded, and SQS's visibility timeout
brings back one whose call crashed).

Each verified call (a body alone receives nothing: decide asks for
verification first):

1. ReceiveMessage: at most ``maxMessagesPerCall`` messages, long-polled at
   most ``waitSeconds``; each read by hooks.interruption.messages against
   the call's clock (a time out of range is malformed, never an exception).
2. Only when there is a claim to check, or status checks are due: the
   Machines listed from the API server, DescribeInstances for every instance
   named, DescribeSpotInstanceRequests for the spot instances of spot
   warnings whose deadline has passed, and every ``statusCheckInterval``
   DescribeInstanceStatus for the instances the Machines record.
3. hooks.interruption.judge: a claim is recorded only on the one Machine
   recording an instance that carries this cluster's tag and is that
   Machine's, and only when EC2 agrees now (a spot instance, a leaving state,
   a spot warning past its deadline reclaimed); a claim for an instance our
   tags give to a Machine that has not recorded it yet waits.
4. Per message, in order: the signal written on the Machine
   (``kube.annotate-machine``, checked against the Machine's uid and the
   signal already there), then the message deleted (``sqs.delete``) only if
   every write before it succeeded (the chain gate); a dropped message is
   deleted at once, a waiting one is left on the queue. Each message's
   outcome is counted in ``nodewarden_interruption_messages_total{kind,
   outcome}`` and the InterruptionQueue's status.

What the signal then causes (the replacement, the cordon, the drain within a
spot warning's two minutes) is the nodepool and machine controllers' to decide.
"""
from __future__ import annotations

import datetime as dt
import sys

from hooks import bounds, conditions, events, pipeline, runtime, timefmt
from hooks.aws import instance_health
from hooks.aws import sqs as sqs_calls
from hooks.config import Settings
from hooks.contract import HookRequest, RequestError, composite_response
from hooks.interruption import judge, messages, queue
from hooks.kube import fresh
from hooks.kube import machines as kube_machines
from hooks.plan import HELD, Action, Change, Gate, Outcome, Plan, error_text

NAME = "interruption"
FAILURE_REASON = events.INTERRUPTION_ACTION_FAILED
# status.lastPoll is refreshed at most this often: a write of the status every second would be an
# API server write, and a watch event, per poll.
LAST_POLL_EVERY_SECONDS = 60.0


# --------------------------------------------------------------------------- gather


def _status(request: HookRequest) -> dict:
    status = request.parent.get("status")
    return status if isinstance(status, dict) else {}


def _status_check_due(request: HookRequest, spec: queue.QueueSpec, now: dt.datetime) -> bool:
    if not spec.status_checks:
        return False
    last = _status(request).get("lastStatusCheck")
    since = timefmt.seconds_since(last if isinstance(last, str) else None, now)
    return since is None or since < 0 or since >= spec.status_check_interval


def _region(ctx: runtime.Context) -> str:
    try:
        return ctx.aws.region(ctx.settings.aws_region or None)
    except ValueError:
        return ""


def gather(request: HookRequest, ctx: runtime.Context, now: dt.datetime) -> dict:
    """The look-ups of a verified call; a body alone receives nothing (decide asks for verification)."""
    if not request.verified:
        return {}
    try:
        spec = queue.parse(request.parent)
    except RequestError:
        return {}
    observed: dict = {"region": _region(ctx)}
    try:
        client = ctx.aws.client("sqs", spec.region or None)
        observed["messages"] = sqs_calls.receive(client, spec.queue_url, spec.max_messages, spec.wait_seconds)
    except Exception as exc:  # noqa: BLE001 - recorded; nothing received is nothing decided
        observed["receiveError"] = error_text(exc)
        observed["messages"] = []
    claims = [c for c in (messages.parse(messages.message_id(m.get("id")), m.get("body"), observed["region"], now)
                          for m in observed["messages"]) if isinstance(c, messages.Claim)]
    checks_due = _status_check_due(request, spec, now)
    if not claims and not checks_due:
        return observed  # nothing to check: no cluster-wide list of Machines
    try:
        observed["machines"] = [judge.machine_summary(m) for m in kube_machines.listed(ctx.kube)]
    except Exception as exc:  # noqa: BLE001 - not listed is not proof of anything
        observed["machinesError"] = error_text(exc)
        return observed
    wanted = {iid for c in claims for iid in c.instances}
    if checks_due:
        recorded = sorted({m["instanceID"] for m in observed["machines"] if m["instanceID"]})
        try:
            observed["impaired"] = instance_health.impaired(_ec2(ctx), recorded)
            wanted |= set(observed["impaired"])
        except Exception as exc:  # noqa: BLE001
            observed["statusError"] = error_text(exc)
    if wanted:
        try:
            observed["instances"] = instance_health.describe(_ec2(ctx), sorted(wanted))
        except Exception as exc:  # noqa: BLE001 - not described is not proof of anything
            observed["instancesError"] = error_text(exc)
            return observed
    _spot_requests(ctx, claims, now, observed)
    return observed


def _spot_requests(ctx: runtime.Context, claims: list, now: dt.datetime, observed: dict) -> None:
    """For spot warnings past their deadline: each spot instance's request status, as ``spotRequest``."""
    described = observed.get("instances") or {}
    stale = sorted({iid for c in claims if judge.spot_status_needed(c, now) for iid in c.instances
                    if (described.get(iid) or {}).get("lifecycle") == "spot"})
    if not stale:
        return
    try:
        codes = instance_health.spot_requests(_ec2(ctx), stale)
    except Exception as exc:  # noqa: BLE001 - not asked is not reclaimed, nor proof it is not
        observed["spotRequestsError"] = error_text(exc)
        return
    for iid, code in codes.items():
        described[iid]["spotRequest"] = code


def _ec2(ctx: runtime.Context):
    return ctx.aws.client("ec2", ctx.settings.aws_region or None)


# --------------------------------------------------------------------------- decide


def _previous_counts(status: dict) -> dict:
    counts = status.get("messages") if isinstance(status.get("messages"), dict) else {}
    return {o: bounds.status_counter(counts, o) for o in messages.OUTCOMES}


def _base_status(request: HookRequest) -> dict:
    """The status as it was, each field read through a bounding parser."""
    previous = _status(request)
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


# --------------------------------------------------------------------------- verify, settle


needs_verification = pipeline.by_plan


def verify(request: HookRequest, ctx: runtime.Context) -> HookRequest:
    return fresh.same_parent(request, ctx.kube)


# Nothing received, nothing written: the status says why, and the next call tries again.
unverified = pipeline.in_status


def settle(request: HookRequest, plan: Plan, outcomes: list[Outcome], settings: Settings,
           now: dt.datetime) -> Plan:
    """A failed write or delete: the message comes back after its visibility timeout; the error is lastError."""
    return pipeline.failed_in_status(plan, outcomes, float(settings.error_backoff_seconds))


def sync(request: HookRequest, ctx: runtime.Context | None = None) -> dict:
    return pipeline.run(sys.modules[__name__], request, ctx)
