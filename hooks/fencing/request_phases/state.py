"""What every phase of a FencingRequest reads and writes in one call (``Step``), and the status it starts from."""
from __future__ import annotations

import copy
import datetime as dt

from hooks import conditions, events, fencing_names, fields, owner_names, timefmt
from hooks.config import Settings
from hooks.contract import HookRequest, composite_response
from hooks.fencing import request_rules
from hooks.plan import Action, Plan, backoff


def node_of(request: HookRequest, spec: request_rules.Spec, observed: dict | None = None) -> dict | None:
    """The Node from the request, else as the API server answered when the request lacked it."""
    return request.related.get("Node", spec.node_name) or (observed or {}).get("node")


def node_gone(observed: dict) -> bool:
    """Only the API server's 404 proves a Node is gone; its absence from one request does not."""
    return bool(observed.get("nodeGone"))


def recorded(status: dict, section: str) -> dict:
    value = status.get(section)
    return value if isinstance(value, dict) else {}


def reboots(status: dict, spec) -> bool:
    """Whether the request powers its node on again: a Reboot whose Auto Scaling Standby was not refused."""
    return spec.action == fencing_names.ACTION_REBOOT and \
        recorded(status, "replacement").get("standby") != owner_names.STANDBY_REFUSED


def own_status(parent: dict) -> dict:
    """A working copy of the status; a field of ours with the wrong type is dropped, never trusted."""
    status = copy.deepcopy(fields.mapping(parent, "status"))
    for key in ("providerStatus", "recovery", "replacement"):
        if key in status and not isinstance(status[key], dict):
            del status[key]
    if "conditions" in status and not isinstance(status["conditions"], list):
        del status["conditions"]
    for key in ("phase", "startTime", "completionTime", "errorReason", "errorMessage"):
        if key in status and not isinstance(status[key], str):
            del status[key]
    if status.get("phase") not in (None, *fencing_names.PHASES):
        del status["phase"]
    return status


def observed_generation(request: HookRequest) -> int:
    generation = request.meta.get("generation")
    return generation if isinstance(generation, int) and generation >= 0 else 0


# Our own timestamps that start a deadline or mark a step done. One that does
# not parse restarts from now: a deadline must still fire, never wait forever.
_DEADLINE_STAMPS = ((None, ("startTime", "completionTime")),
                    ("providerStatus", ("lastStopTime", "lastStartTime")),
                    ("recovery", ("startTime", "completionTime", "nodeReadyAgainTime")),
                    ("replacement", ("startTime", "requestedTime")))


def restamp(status: dict, now: dt.datetime) -> None:
    for section, keys in _DEADLINE_STAMPS:
        holder = status if section is None else recorded(status, section)
        for key in keys:
            if holder.get(key) and timefmt.parse(holder[key]) is None:
                holder[key] = timefmt.fmt(now)


def without_unverified(status: dict) -> dict:
    """The status without the record of calls the API server could not confirm."""
    if conditions.find(status, fencing_names.VERIFIED_CONDITION) or "unverifiedCalls" in status:
        status, _ = conditions.remove(status, fencing_names.VERIFIED_CONDITION)
        status.pop("unverifiedCalls", None)
    return status


class Step:
    """One call's walk through the phases: a working copy of the status, actions, Events, resyncs."""

    def __init__(self, request: HookRequest, spec: request_rules.Spec, settings: Settings, now: dt.datetime,
                 observed: dict):
        self.request, self.spec, self.settings, self.now, self.observed = request, spec, settings, now, observed
        self.status = own_status(request.parent)
        self.status["observedGeneration"] = observed_generation(request)
        restamp(self.status, now)
        self.node = node_of(request, spec, observed)
        self.actions: list[Action] = []
        self.events: list[events.Event] = []
        self.resyncs: list[float] = []
        # A step needs what only a verified call reads (gather reads it once the API server confirmed the body).
        self.verify = False

    @property
    def phase(self) -> str:
        return self.status.get("phase") or fencing_names.PENDING

    @phase.setter
    def phase(self, value: str) -> None:
        self.status["phase"] = value

    @property
    def provider(self) -> dict:
        return self.status.setdefault("providerStatus", {})

    @property
    def recovery(self) -> dict:
        return self.status.setdefault("recovery", {})

    @property
    def replacement(self) -> dict:
        return self.status.setdefault("replacement", {})

    def stamp(self) -> str:
        return timefmt.fmt(self.now)

    def resync(self, seconds: float) -> None:
        self.resyncs.append(max(1.0, seconds))

    def event(self, reason: str, message: str, warning: bool = False) -> None:
        self.events.append(events.Event(reason, message[:events.MESSAGE_LIMIT], warning))

    def condition(self, ctype: str, status: str, reason: str, message: str) -> None:
        self.status, _ = conditions.set(self.status, ctype, status, reason, message, self.stamp())

    def fail(self, reason: str, message: str) -> None:
        self.phase = fencing_names.FAILED
        self.status["errorReason"] = reason
        self.status["errorMessage"] = message
        self.status["completionTime"] = self.stamp()
        self.condition(fencing_names.FAILED_CONDITION, "True", reason, message)
        self.event("FencingFailed", f"{reason}: {message}", warning=True)

    def cannot_tell(self, reason: str, what: str, detail: str) -> None:
        """Wait for what a step needs to be readable, but not for ever: a power operation that cannot start
        or go on fails NODEWARDEN_FENCING_QUEUE_TIMEOUT_SECONDS after its last step (recovery has its own
        timeout)."""
        if self.phase == fencing_names.RECOVERING:
            return self.resync(backoff(self.settings, 1))
        provider, rec = recorded(self.status, "providerStatus"), recorded(self.status, "recovery")
        steps = [timefmt.parse(v) for v in (self.status.get("startTime"), provider.get("lastStopTime"),
                                            provider.get("lastStartTime"), rec.get("completionTime"))]
        last = max((m for m in steps if m is not None), default=None)
        waited = (self.now - last).total_seconds() if last else 0
        if waited >= self.settings.fencing_queue_timeout_seconds:
            return self.fail(reason, f"{what} for {waited:.0f}s: {detail}")
        self.resync(backoff(self.settings, 1))

    def succeed(self) -> None:
        self.phase = fencing_names.SUCCEEDED
        self.status["completionTime"] = self.stamp()
        what = "powered off, recovered" + (" and powered on again" if reboots(self.status, self.spec) else "")
        self.condition(fencing_names.COMPLETE_CONDITION, "True", "Fenced", f"node {self.spec.node_name} {what}")
        self.event("FencingComplete", f"Node {self.spec.node_name} {what}")

    def plan(self, finalized: bool | None = None) -> Plan:
        resync = min(self.resyncs) if self.resyncs else None
        if self.status.get("phase") in fencing_names.FINISHED_PHASES:
            self.status = without_unverified(self.status)
        return Plan(composite_response(status=self.status, resync_after=resync, finalized=finalized),
                    self.actions, self.events, verify=self.verify)
