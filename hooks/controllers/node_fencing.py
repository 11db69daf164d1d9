"""node-fencing: the Node Fencing KEP's timeline on every Node, and fast failover.

DecoratorController on Nodes. NodeFencingPolicies arrive as related objects
(customize); the node's FencingRequest is its attachment. Judged from the
NodeConditions only, each call moves the node to where it should be:

  healthy    nothing written; leftovers of an earlier fencing are cleared
             (conditions, taints) and the FencingRequest goes once it is done
  triaged    an unhealthy condition of the policy: FencingTriaged=True and the
             node.kubernetes.io/fencingtriaged PreferNoSchedule taint
  required   it lasted the policy's duration, the node is not control plane
             (unless allowed) and the storm guard allows: FencingRequired=True,
             the node.kubernetes.io/fencingrequired NoSchedule taint, and a
             FencingRequest; pods chosen for fast failover are force-deleted
  complete   the FencingRequest confirmed the power-off: FencingComplete=True

Conditions are written first and taints on the next call, so one call never
races Metacontroller's own status write on the same Node.

Fencing in flight is proven by our own record only: the node's FencingRequest
of this unhealthy spell. A FencingRequired condition is anyone's to write; a
finished request that fenced the node before it came back is left out (and so
deleted) to make way for this spell's.

Whatever the governing policy says, the node has an UnhealthyNode record (a
second attachment, hooks/fencing/records.py) while any policy selecting it may
count it as unhealthy (storm.flagged): the policies' counts relate those
records, never the Nodes.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from dataclasses import dataclass

import sys

from hooks import conditions, events, fields, pipeline, runtime, timefmt
from hooks.config import Settings
from hooks.contract import DECORATOR, HookRequest, ObjectGroups, RequestError, decorator_response, parse_request
from hooks.fencing import control_plane, failover, health, names, policy_cache, records, storm
from hooks.fencing import policy as policies
from hooks.fencing.health import Health
from hooks.fencing.policy import Policy
from hooks.kube import fresh, pods
from hooks.kube import fencing as kube_fencing
from hooks.plan import Action, Outcome, Plan, SameObject, backoff, error_text, failure_text, unverified_text

NAME = "node-fencing"
FAILURE_REASON = events.FENCING_ACTION_FAILED
log = logging.getLogger(__name__)
# After writing conditions, look again soon to lay the matching taints.
_TAINT_SETTLE_SECONDS = 1.0


# --------------------------------------------------------------------------- customize


def customize(parent: dict, ctx: runtime.Context | None = None) -> dict:
    """Every NodeFencingPolicy is related to every Node (there are few policies)."""
    return {"relatedResources": [{"apiVersion": names.API_VERSION, "resource": "nodefencingpolicies"}]}


# --------------------------------------------------------------------------- situation


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


def _our_request(request: HookRequest) -> dict | None:
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


def _fenced(fr: dict | None, request: HookRequest, state: Health) -> bool:
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


def _gate(request: HookRequest, policy: Policy, state: Health, now: dt.datetime,
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
    valid, _invalid = policies.parse_all(request.related.of_kind(names.POLICY_KIND, names.API_GROUP))
    policy = policies.governing(valid, request.labels)
    fencing_request = _our_request(request)
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
    hold_reason, hold_message = _gate(request, policy, state, now, settings)
    # Fencing in flight is never abandoned half-way, even if the guard now holds;
    # failover still waits for the gate.
    if in_flight is not None:
        fr_status = in_flight.get("status") if isinstance(in_flight.get("status"), dict) else {}
        complete = conditions.is_true(fr_status, names.FENCING_SUCCEEDED)
        failed = "" if complete or fr_status.get("phase") != names.FAILED else (
            f"{fr_status.get('errorReason', 'Failed')}: {fr_status.get('errorMessage', '')}".strip(": "))
        return Situation(policy, state, in_flight, required=True, complete=complete,
                         failed_message=failed, failover_hold=hold_reason,
                         fenced=_fenced(in_flight, request, state), flagged=True, counting=counting)
    if hold_reason:
        return Situation(policy, state, None, hold_reason=hold_reason, hold_message=hold_message,
                         failover_hold=hold_reason, flagged=True, counting=counting, replacing=replacing)
    return Situation(policy, state, None, required=True, flagged=True, counting=counting, replacing=replacing)


def needs_pods(sit: Situation) -> bool:
    """Pods are listed only for a node whose fencing is due: no payload grows with pods."""
    return sit.unhealthy and sit.required and not sit.failover_hold


# --------------------------------------------------------------------------- decide


def decide(request: HookRequest, settings: Settings, now: dt.datetime, observed: dict) -> Plan:
    sit = assess(request, now, settings)
    plan = _fence(request, sit, settings, now, observed) if sit.unhealthy else _release(request, sit, settings, now)
    return _recorded(request, sit, plan)


def _recorded(request: HookRequest, sit: Situation, plan: Plan) -> Plan:
    """The plan with the node's UnhealthyNode record among its attachments while it is flagged.

    The record holds the conditions this response leaves on the node, so a
    count reads our own FencingRequired and FencingComplete without waiting
    for another sync.
    """
    if not sit.flagged:
        return plan
    status = plan.response.get("status") or fields.mapping(request.parent, "status")
    record = records.build(request.name, request.meta.get("uid"), request.labels, status, list(sit.counting))
    return dataclasses.replace(plan, response={**plan.response,
                                               "attachments": [*plan.response["attachments"], record]})


def _status_changes(node_status: dict, desired: dict[str, tuple[str, str, str]], now: dt.datetime) -> dict | None:
    """The complete status with our conditions set, or None when nothing would change (no churn)."""
    status, changed = node_status, False
    for ctype, (value, reason, message) in desired.items():
        status, one = conditions.set(status, ctype, value, reason, message, timefmt.fmt(now), heartbeat=True)
        changed = changed or one
    return status if changed else None


def _taint_actions(request: HookRequest, want: dict[str, str]) -> list[Action]:
    present = {t.get("key"): t.get("effect") for t in fields.objects(request.parent, "spec", "taints")
               if isinstance(t.get("key"), str)}
    actions = []
    for key, effect in names.OUR_TAINTS.items():
        if key in want and present.get(key) != effect:
            actions.append(Action("kube.taint", request.name, {"key": key, "effect": effect}))
        elif key not in want and key in present:
            actions.append(Action("kube.untaint", request.name, {"key": key}))
    return actions


def _clear_error(request: HookRequest) -> dict:
    return {names.ERROR_ANNOTATION: None} if names.ERROR_ANNOTATION in request.annotations else {}


def _desired_request(request: HookRequest, sit: Situation, settings: Settings) -> dict:
    """The node's FencingRequest; an existing one keeps its spec (fencing in flight never changes course)."""
    existing = sit.fencing_request
    if existing is not None:
        meta = existing["metadata"]
        return {
            "apiVersion": names.API_VERSION,
            "kind": names.REQUEST_KIND,
            "metadata": {k: meta[k] for k in ("name", "namespace", "labels", "annotations") if meta.get(k)},
            "spec": dict(existing.get("spec") or {}),
        }
    return {
        "apiVersion": names.API_VERSION,
        "kind": names.REQUEST_KIND,
        "metadata": {
            "name": names.request_name(request.name),
            "namespace": settings.namespace,
            "labels": {names.MANAGED_BY_LABEL: names.MANAGED_BY},
            "annotations": {names.POLICY_ANNOTATION: sit.policy.name},
        },
        "spec": {
            "nodeRef": {"name": request.name, **({"uid": request.meta["uid"]} if request.meta.get("uid") else {})},
            "action": sit.policy.action,
            "recoveryStrategy": sit.policy.strategy,
            # The policy's word that control-plane nodes may be fenced; fencing-request refuses them otherwise,
            # on any evidence, whatever the Node's labels say.
            **({} if sit.policy.exclude_control_plane else {"allowControlPlane": True}),
        },
    }


def _request_done(fr: dict) -> bool:
    """Finished, and no out-of-service taint of its own left to take off."""
    st = fr.get("status") or {}
    recovery = st.get("recovery") if isinstance(st.get("recovery"), dict) else {}
    return st.get("phase") in names.FINISHED_PHASES and recovery.get("outOfServiceTaint") != names.TAINT_APPLIED


def _release(request: HookRequest, sit: Situation, settings: Settings, now: dt.datetime) -> Plan:
    """Healthy (or no policy): take our conditions and taints away; the FencingRequest goes when done."""
    node_status = fields.mapping(request.parent, "status")
    ours = [c for c in names.OUR_CONDITIONS if conditions.find(node_status, c)]
    status = None
    if ours:
        status = node_status
        for ctype in ours:
            status, _ = conditions.remove(status, ctype)
    attachments: list[dict] = []
    resync = None
    fr = sit.fencing_request
    if fr is not None and not _request_done(fr):
        ready = conditions.find(node_status, "Ready") or {}
        healthy_for = timefmt.seconds_since(ready.get("lastTransitionTime"), now) \
            if ready.get("status") == "True" else None
        # A request that never finishes must not keep its node forever: its
        # finalize hook still takes the out-of-service taint off.
        if healthy_for is None or healthy_for < settings.fencing_release_timeout_seconds:
            attachments = [_desired_request(request, sit, settings)]
            resync = settings.fencing_resync_seconds
    actions: list[Action] = []
    said = []
    if ours:
        why = "no NodeFencingPolicy selects the node" if sit.policy is None else "the node is healthy again"
        said.append(events.normal(events.FENCING_CLEARED, f"Fencing conditions cleared: {why}"))
    else:
        actions.extend(_taint_actions(request, {}))
    if sit.policy is None and not sit.health.ready:
        # Policies are not related objects (no event when one is made): a node not Ready looks again for one.
        resync = min(resync or settings.fencing_resync_seconds, settings.fencing_resync_seconds)
    if status is not None and any(t.get("key") in names.OUR_TAINTS for t in fields.objects(request.parent, "spec", "taints")):
        resync = min(resync or _TAINT_SETTLE_SECONDS, _TAINT_SETTLE_SECONDS)
    return Plan(decorator_response(annotations=_clear_error(request), status=status, attachments=attachments,
                                   resync_after=resync), actions, said)


def _fence(request: HookRequest, sit: Situation, settings: Settings, now: dt.datetime, observed: dict) -> Plan:
    node_status = fields.mapping(request.parent, "status")
    fr_name = names.request_name(request.name) if sit.fencing_request is None else sit.fencing_request["metadata"]["name"]
    desired = {names.TRIAGED: ("True", "UnhealthyCondition", sit.health.describe())}
    if sit.required:
        desired[names.REQUIRED] = ("True", "FencingRequested",
                                   f"FencingRequest {settings.namespace}/{fr_name} powers the node off")
        if sit.complete:
            desired[names.COMPLETE] = ("True", "PoweredOff", "the FencingRequest confirmed the power-off")
        elif sit.failed_message:
            desired[names.COMPLETE] = ("False", "FencingFailed", sit.failed_message)
        else:
            desired[names.COMPLETE] = ("False", "FencingInProgress", "waiting for the power-off to be confirmed")
    else:
        desired[names.REQUIRED] = ("False", sit.hold_reason, sit.hold_message)
        desired[names.COMPLETE] = ("False", "NotRequired", "fencing has not been required")
    status = _status_changes(node_status, desired, now)

    actions: list[Action] = []
    said = []
    if status is not None:
        said.extend(_transition_events(node_status, desired))
    else:
        # Conditions are settled: lay the taints that go with them.
        want = {names.TRIAGED_TAINT: "PreferNoSchedule"}
        if sit.required:
            want[names.REQUIRED_TAINT] = "NoSchedule"
        actions.extend(_taint_actions(request, want))

    annotations = _clear_error(request)
    resync = sit.health.seconds_until_due(now) if not sit.required and sit.hold_reason == "WaitingForDuration" else None
    if sit.required or sit.hold_reason in ("StormGuard", "PolicyCountPending"):
        resync = settings.fencing_resync_seconds
    if sit.required and sit.failover_hold == "WaitingForDuration":
        resync = min(resync, sit.health.seconds_until_due(now))  # pods may fail over then
    if needs_pods(sit):
        failover_actions, failover_error = _failover(request, sit, observed)
        actions.extend(failover_actions)
        if failover_error:
            if request.annotations.get(names.ERROR_ANNOTATION) != failover_error:
                annotations = {names.ERROR_ANNOTATION: failover_error}
                said.append(events.warning(events.FAILOVER_FAILED, failover_error))
            else:
                annotations = {}  # the same error again: no write, no new Event
            resync = backoff(settings, 1)
    if status is not None:
        resync = min(resync or _TAINT_SETTLE_SECONDS, _TAINT_SETTLE_SECONDS)
    # This spell's request is made once the one before it has gone (it has the same name).
    attachments = [_desired_request(request, sit, settings)] if sit.required and not sit.replacing else []
    return Plan(decorator_response(annotations=annotations, status=status, attachments=attachments,
                                   resync_after=max(resync, 1.0) if resync is not None else None), actions, said,
                verify=needs_pods(sit) and not request.verified)


def _transition_events(before: dict, desired: dict) -> list[events.Event]:
    events_out = []
    for ctype, (status, reason, message) in desired.items():
        previous = conditions.find(before, ctype) or {}
        if previous.get("status") == status and previous.get("reason") == reason:
            continue
        if ctype == names.TRIAGED and status == "True":
            events_out.append(events.normal(events.FENCING_TRIAGED, f"Node is unhealthy: {message}"))
        elif ctype == names.REQUIRED and status == "True":
            events_out.append(events.normal(events.FENCING_REQUIRED, message))
        elif ctype == names.REQUIRED and reason == "StormGuard":
            events_out.append(events.warning(events.FENCING_HELD_BACK, message))
        elif ctype == names.REQUIRED and reason == "ControlPlaneExcluded":
            events_out.append(events.normal(events.FENCING_SKIPPED, message))
        elif ctype == names.COMPLETE and status == "True":
            events_out.append(events.normal(events.NODE_FENCED, "Power-off confirmed; the node's workloads may recover"))
        elif ctype == names.COMPLETE and reason == "FencingFailed":
            events_out.append(events.warning(events.FENCING_FAILED, message))
    return events_out


def _failover(request: HookRequest, sit: Situation, observed: dict) -> tuple[list[Action], str]:
    if observed.get("podsError"):
        return [], f"listing the node's pods for failover failed: {observed['podsError']}"
    go, held = failover.select(observed.get("pods") or [], sit.policy, observed.get("claims") or {}, sit.fenced)
    actions = []
    for choice in go:
        meta = choice.pod["metadata"]
        target = failover.key(choice.pod)
        node_uid = request.meta.get("uid")
        actions.append(Action(
            "kube.force-delete-pod", target, {"uid": meta.get("uid"), "node": request.name},
            # The node the decision was about, still the same object when the pod goes.
            requires=(SameObject("Node", request.name, node_uid),) if node_uid else (),
            reports=events.normal(events.FAILED_OVER,
                                  f"Force-deleted from unhealthy node {request.name} ({sit.health.describe()}) "
                                  f"without waiting for fencing: {choice.why}",
                                  about=events.pod_ref(meta.get("namespace") or "", meta["name"], meta.get("uid")))))
    if held:
        log.info("failover held until the node is fenced",
                 extra={"node": request.name, "pods": [failover.key(c.pod) for c in held]})
    return actions, ""


# --------------------------------------------------------------------------- observe


def gather(request: HookRequest, ctx: runtime.Context, now: dt.datetime) -> dict:
    """Pods (and their claims) only for a node whose fencing is due, as the API server has it (decide asks
    for verification when it needs them)."""
    sit = assess(request, now, ctx.settings)
    if not needs_pods(sit) or not request.verified:
        return {}
    observed: dict = {}
    try:
        node_pods = [failover.summarize(p) for p in pods.on_node(ctx.kube, request.name)]
        observed["pods"] = node_pods
        claims = {}
        for pod in node_pods:
            if failover.chosen(pod, sit.policy) is None:
                continue
            for key in failover.claim_keys(pod):
                if key in claims:
                    continue
                namespace, name = key.split("/", 1)
                try:
                    claims[key] = {"accessModes": kube_fencing.claim_access_modes(ctx.kube, namespace, name)}
                except Exception as exc:  # noqa: BLE001 - unknown counts as single-writer
                    claims[key] = {"error": error_text(exc)}
        observed["claims"] = claims
    except Exception as exc:  # noqa: BLE001
        observed = {"podsError": error_text(exc)}
    return observed


# --------------------------------------------------------------------------- act


def settle(request: HookRequest, plan: Plan, outcomes: list[Outcome], settings: Settings, now: dt.datetime) -> Plan:
    """A failed action: the error on the node, and a backoff; conditions already decided stay."""
    message = failure_text(outcomes)
    annotations = dict(plan.response.get("annotations") or {})
    if request.annotations.get(names.ERROR_ANNOTATION) != message:
        annotations[names.ERROR_ANNOTATION] = message
    else:
        annotations.pop(names.ERROR_ANNOTATION, None)  # same error: no write, no hot loop
    return dataclasses.replace(plan, response=dict(plan.response, annotations=annotations,
                                                   resyncAfterSeconds=backoff(settings, 1)))


# --------------------------------------------------------------------------- hooks


def verify(request: HookRequest, ctx: runtime.Context) -> HookRequest:
    """The request rebuilt from the API server: the Node, every NodeFencingPolicy, the node's FencingRequest.

    A force delete rests on all three (the node unhealthy for long enough, a
    policy whose fresh count allows it, the power-off for a single-writer
    pod), so all three are read again; the body only says which node.
    """
    node = fresh.same_parent(request, ctx.kube).parent
    try:
        policies_now = policy_cache.read_all(ctx.kube)
    except Exception as exc:  # noqa: BLE001 - no policies read, no proof
        raise fresh.Unverified(f"cannot list NodeFencingPolicies: {error_text(exc)}") from exc
    fr_name = names.request_name(request.name)
    fencing_request = fresh.read(ctx.kube, names.REQUEST_KIND, fr_name, ctx.settings.namespace)
    children = {f"{names.REQUEST_KIND}.{names.API_VERSION}": {f"{ctx.settings.namespace}/{fr_name}": fencing_request}} \
        if fencing_request else {}
    try:
        verified = dataclasses.replace(
            request, parent=node,
            related=ObjectGroups.parse(policy_cache.related(policies_now), "related"),
            children=ObjectGroups.parse(children, "children"))
    except RequestError as exc:
        raise fresh.Unverified(f"an object as the API server has it: {exc}") from None
    seen, now_governing = _governing(request), _governing(verified)
    if seen is not None and now_governing is not None and \
            (seen.name, seen.uid) != (now_governing.name, now_governing.uid):
        raise fresh.Unverified(f"the NodeFencingPolicy governing the node is {now_governing.name} "
                               f"(uid {now_governing.uid}) on the API server, not the request's {seen.name} "
                               f"(uid {seen.uid})")
    return verified


def _governing(request: HookRequest) -> Policy | None:
    valid, _invalid = policies.parse_all(request.related.of_kind(names.POLICY_KIND, names.API_GROUP))
    return policies.governing(valid, request.labels)


def needs_verification(request: HookRequest, plan: Plan) -> bool:
    """A taint, a force delete or a new FencingRequest rests on the node, the policies and the FencingRequest:
    all read fresh first; so does a call that needs the node's pods."""
    if plan.actions or plan.verify:
        return True
    existing = {c["metadata"].get("name") for c in request.children.of_kind(names.REQUEST_KIND, names.API_GROUP)}
    return any(a.get("kind") == names.REQUEST_KIND and (a.get("metadata") or {}).get("name") not in existing
               for a in plan.response.get("attachments") or [])


def unverified(request: HookRequest, plan: Plan, ctx: runtime.Context, reason: str) -> Plan:
    """Nothing is decided on a body the API server did not confirm: no taint, no pod, no condition, and the
    attachments stay exactly as they are (none made, none deleted). The error annotation says why."""
    message = unverified_text(reason)[:1024]
    log.warning("node-fencing did not act", extra={"node": request.name, "reason": reason})
    # Said once per cause: the same failure again writes nothing.
    annotations = {names.ERROR_ANNOTATION: message} if request.annotations.get(names.ERROR_ANNOTATION) != message \
        else {}
    kept = [as_it_is(child) for kind in (names.REQUEST_KIND, records.KIND)
            for child in request.children.of_kind(kind, names.API_GROUP)]
    return Plan(decorator_response(annotations=annotations, attachments=kept,
                                   resync_after=backoff(ctx.settings, 1)))


def as_it_is(child: dict) -> dict:
    """An attachment asked for exactly as it exists: Metacontroller neither changes nor deletes it.
    (Its own annotations, such as the last applied configuration, are Metacontroller's to write.)"""
    meta = child.get("metadata") if isinstance(child.get("metadata"), dict) else {}
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
    labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
    kept = {"name": meta.get("name"), "namespace": meta.get("namespace"), "labels": labels,
            "annotations": {k: v for k, v in annotations.items() if not k.startswith("metacontroller.k8s.io/")}}
    return {"apiVersion": child.get("apiVersion"), "kind": child.get("kind"),
            "metadata": {k: v for k, v in kept.items() if v}, "spec": dict(child.get("spec") or {})}


def sync(request: HookRequest, ctx: runtime.Context | None = None) -> dict:
    return pipeline.run(sys.modules[__name__], request, ctx)


def start_now(ctx: runtime.Context, node_name: str, uid: str, decorator: str) -> str | None:
    """Make the node's FencingRequest now, exactly as its own next sync would, when that sync may be long in
    coming: a count that admits held nodes comes as the storm that held them ends, and the Node decorator's
    one queue then holds every recovering Node ahead of them. Returns the request's name when one was made.

    The decision is node-fencing's own, on the request ``verify`` rebuilds from the API server alone (the
    Node of this uid, every NodeFencingPolicy, the node's FencingRequest): only a node that sync would fence
    now, with no request of this spell yet, gets one. It is made as the DecoratorController ``decorator``
    makes the node's attachments (owned by the Node, claimed by the decorator), so the Node's next sync finds
    it as its own, fencing in flight; the conditions, taints and failover are left to that sync."""
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node_name, "uid": uid}}
    request = dataclasses.replace(verify(parse_request({"object": body, "attachments": {}}, DECORATOR), ctx),
                                  verified=True)
    plan = decide(request, ctx.settings, ctx.now(), {})
    existing = {(c.get("metadata") or {}).get("name") for c in request.children.of_kind(names.REQUEST_KIND,
                                                                                         names.API_GROUP)}
    made = [a for a in plan.response.get("attachments") or []
            if a.get("kind") == names.REQUEST_KIND and a["metadata"]["name"] not in existing]
    if not made or not kube_fencing.create_node_attachment(ctx.kube, made[0], request.parent, decorator):
        return None
    log.info("FencingRequest made for an admitted node", extra={"node": node_name, "request": made[0]["metadata"]["name"]})
    return made[0]["metadata"]["name"]
