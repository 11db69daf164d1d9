"""Where a node stands on the fencing timeline (``Situation``), read once per request before any side effect.

Fencing in flight is proven by our own record only: the node's FencingRequest
of this unhealthy spell. A FencingRequired condition is anyone's to write; a
finished request that fenced the node before it came back is left out (and so
deleted) to make way for this spell's.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from hooks import conditions, fields, timefmt
from hooks.config import Settings
from hooks.contract import HookRequest
from hooks.fencing import control_plane, health, names, storm
from hooks.fencing.health import Health
from hooks.fencing.policy import Policy, governing, parse_all


@dataclass(frozen=True)
class Situation:
    """Where a node stands on the timeline, before any side effect."""

    policy: Policy | None
    health: Health
    fencing_request: dict | None
    required: bool = False
    hold_reason: str = ""
    hold_message: str = ""
    complete: bool = False
    failed_message: str = ""
    # Why no pod may fail over now ("" when pods may): the same gate as a new
    # FencingRequired (due under its own rule, not an excluded control-plane
    # node, a fresh count that allows it), held even while fencing is in flight.
    failover_hold: str = ""
    # The power-off is proven for this node and this unhealthy spell, and the
    # instance is meant to stay off: single-writer pods may go.
    fenced: bool = False
    # The node should have its UnhealthyNode record: some policy may count it as unhealthy.
    flagged: bool = False
    # The valid policies not being deleted: whose selectors the record's labels serve.
    counting: tuple[Policy, ...] = ()
    # The node's FencingRequest is not this spell's (it fenced the node before it came back, or it names
    # another node): it goes first (Metacontroller deletes it), then this spell's is made.
    replacing: bool = False

    @property
    def unhealthy(self) -> bool:
        return self.policy is not None and self.health.unhealthy


def governing_policy(request: HookRequest) -> Policy | None:
    """The valid NodeFencingPolicy among the request's related objects that governs the node."""
    valid, _invalid = parse_all(request.related.of_kind(names.POLICY_KIND, names.API_GROUP))
    return governing(valid, request.labels)


def our_request(request: HookRequest) -> dict | None:
    """The node's FencingRequest among the request's attachments."""
    found = request.children.of_kind(names.REQUEST_KIND, names.API_GROUP)
    return found[0] if found else None


def _names_this_node(fr: dict, request: HookRequest) -> bool:
    """The request names this node, and this node's uid wherever it records one."""
    spec = fr.get("spec") if isinstance(fr.get("spec"), dict) else {}
    st = fr.get("status") if isinstance(fr.get("status"), dict) else {}
    ref = spec.get("nodeRef") if isinstance(spec.get("nodeRef"), dict) else {}
    provider = st.get("providerStatus") if isinstance(st.get("providerStatus"), dict) else {}
    if ref.get("name") != request.name:
        return False
    return all(recorded is None or recorded == request.meta.get("uid")
               for recorded in (ref.get("uid"), provider.get("nodeUID")))


def _of_an_earlier_spell(fr: dict, state: Health) -> bool:
    """Finished, with its power-off confirmed before this unhealthy spell began: the node came back since,
    and that request neither powers it off again nor proves it off."""
    st = fr.get("status") if isinstance(fr.get("status"), dict) else {}
    cond = conditions.find(st, names.FENCING_SUCCEEDED) or {}
    confirmed_at = timefmt.parse(cond.get("lastTransitionTime"))
    return st.get("phase") in names.FINISHED_PHASES and cond.get("status") == "True" and \
        confirmed_at is not None and state.since is not None and confirmed_at < state.since


def fenced(fr: dict | None, request: HookRequest, state: Health) -> bool:
    """Whether the FencingRequest proves this node cannot write now.

    FencingSucceeded=True alone is not enough: the request must name this
    node (and its uid where recorded), the power-off must have been confirmed
    during the current unhealthy spell (a node that came back after an
    earlier fence and went NotReady again is not powered off), and the
    instance must be meant to stay off (Recovering, or Succeeded with action
    Off; not a Reboot powering on, not a request that failed, say, because
    the instance runs again).
    """
    if fr is None or state.since is None:
        return False
    spec = fr.get("spec") if isinstance(fr.get("spec"), dict) else {}
    st = fr.get("status") if isinstance(fr.get("status"), dict) else {}
    ref = spec.get("nodeRef") if isinstance(spec.get("nodeRef"), dict) else {}
    provider = st.get("providerStatus") if isinstance(st.get("providerStatus"), dict) else {}
    uid = request.meta.get("uid")
    if ref.get("name") != request.name:
        return False
    for recorded in (ref.get("uid"), provider.get("nodeUID")):
        if recorded is not None and recorded != uid:
            return False
    cond = conditions.find(st, names.FENCING_SUCCEEDED) or {}
    confirmed_at = timefmt.parse(cond.get("lastTransitionTime"))
    if cond.get("status") != "True" or confirmed_at is None or confirmed_at < state.since:
        return False
    phase = st.get("phase")
    return phase == names.RECOVERING or (phase == names.SUCCEEDED and spec.get("action", names.ACTION_OFF) ==
                                         names.ACTION_OFF)


def gate(request: HookRequest, policy: Policy, state: Health, now: dt.datetime,
         settings: Settings) -> tuple[str, str]:
    """(reason, message) that holds new fencing and failover, or ("", "") when both may go."""
    if not state.due(now):
        return "WaitingForDuration", f"{state.describe()}; fencing falls due at {timefmt.fmt(state.due_at)}"
    if policy.exclude_control_plane and control_plane.of_node(request.parent, where="parent"):
        return "ControlPlaneExcluded", f"NodeFencingPolicy {policy.name} never fences control-plane nodes"
    verdict = storm.verdict(policy, request.name, now, settings.fencing_count_max_age_seconds)
    if verdict.outcome == storm.HOLD:
        return "StormGuard", verdict.message
    if verdict.outcome == storm.PENDING:
        return "PolicyCountPending", verdict.message
    return "", ""


def assess(request: HookRequest, now: dt.datetime, settings: Settings) -> Situation:
    """Where the node stands at ``now``: one reading per request, shared by gather and decide."""
    return request.reading(("node-fencing", id(settings), now), lambda: _assess(request, now, settings))


def _assess(request: HookRequest, now: dt.datetime, settings: Settings) -> Situation:
    node_status = fields.mapping(request.parent, "status")
    valid, _invalid = parse_all(request.related.of_kind(names.POLICY_KIND, names.API_GROUP))
    policy = governing(valid, request.labels)
    fencing_request = our_request(request)
    counting = tuple(p for p in valid if not p.deleting)
    flagged = storm.flagged(list(counting), request.labels, node_status, now)
    if policy is None:
        return Situation(None, Health(False, ready=health.is_ready(node_status)), fencing_request, flagged=flagged,
                         counting=counting)
    state = health.assess(node_status, policy.rules, now)
    if not state.unhealthy:
        return Situation(policy, state, fencing_request, flagged=flagged, counting=counting)

    # Only our own record proves fencing in flight: the node's FencingRequest, naming this node, of this
    # spell. A FencingRequired condition is anyone's to write (the kubelet, node-problem-detector, any
    # nodes/status writer), so it proves nothing.
    replacing = fencing_request is not None and (
        not _names_this_node(fencing_request, request) or _of_an_earlier_spell(fencing_request, state))
    in_flight = None if replacing else fencing_request
    hold_reason, hold_message = gate(request, policy, state, now, settings)
    # Fencing in flight is never abandoned half-way, even if the guard now holds;
    # failover still waits for the gate.
    if in_flight is not None:
        fr_status = in_flight.get("status") if isinstance(in_flight.get("status"), dict) else {}
        complete = conditions.is_true(fr_status, names.FENCING_SUCCEEDED)
        failed = "" if complete or fr_status.get("phase") != names.FAILED else (
            f"{fr_status.get('errorReason', 'Failed')}: {fr_status.get('errorMessage', '')}".strip(": "))
        return Situation(policy, state, in_flight, required=True, complete=complete,
                         failed_message=failed, failover_hold=hold_reason,
                         fenced=fenced(in_flight, request, state), flagged=True, counting=counting)
    if hold_reason:
        return Situation(policy, state, None, hold_reason=hold_reason, hold_message=hold_message,
                         failover_hold=hold_reason, flagged=True, counting=counting, replacing=replacing)
    return Situation(policy, state, None, required=True, flagged=True, counting=counting, replacing=replacing)


def needs_pods(sit: Situation) -> bool:
    """Pods are listed only for a node whose fencing is due: no payload grows with pods."""
    return sit.unhealthy and sit.required and not sit.failover_hold
