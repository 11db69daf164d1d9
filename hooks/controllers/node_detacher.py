"""node-detacher: a leaving Node leaves every load balancer before its pods stop.

DecoratorController on Nodes (sync + finalize) and on Pods (managed ingress
DaemonSets). Each call walks one step of hooks.detacher.assess's phases:

  exclude     label node.kubernetes.io/exclude-from-external-load-balancers,
              annotate, NodeBeingDetached=True (the label lands before any
              deregistration, so no controller registers the node again)
  deregister  one batched call per target group / classic ELB
  drain       poll target state until every target is gone or 'unused'
  shutdown    evict priority-annotated pods, highest priority first
  reattach    register exactly what was deregistered, remove what is ours

Progress lives in the Node's annotations, so a failed step never loses what
already happened and the next call resumes where this one stopped.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import logging

from hooks import actuators, bounds, conditions, fields, runtime, templates, timefmt
from hooks.aws import elb as elb_api
from hooks.aws.clients import describe_error as aws_error
from hooks.aws.lb_discovery import CACHE as LB_INDEX
from hooks.config import Settings
from hooks.contract import HookRequest, RequestError, decorator_response, parse_object
from hooks.detacher import assess as phases
from hooks.detacher import names, shutdown, targets
from hooks.detacher import pod_trigger
from hooks.detacher.pod_trigger import decide_pod, gather_pod
from hooks.kube import events, fresh, pods
from hooks.kube.client import describe_error as kube_error
from hooks.plan import Action, Outcome, Plan, backoff

CONTROLLER = "node-detacher"
log = logging.getLogger(__name__)

_REASONS = {
    "cordoned": "Cordoned",
    "deleting": "NodeDeleting",
    "daemonset-pod": "DaemonSetPodTerminating",
    "annotation": "DetachRequested",
}
# Pause before looking again for the label we just asked Metacontroller to apply.
_LABEL_SETTLE_SECONDS = 1.0


# --------------------------------------------------------------------------- decide


def decide(request: HookRequest, settings: Settings, now: dt.datetime, observed: dict,
           sit: phases.Situation | None = None) -> Plan:
    if request.parent.get("kind") == "Pod":
        return decide_pod(request, settings, observed, now)
    sit = sit or phases.assess(request, settings, now)
    return _DECIDERS[sit.phase](request, sit, settings, now, observed)


def _attachment(request: HookRequest, sit: phases.Situation, settings: Settings, observed: dict) -> list[dict]:
    """The desired Attachment: freshly discovered memberships, else the cached ones."""
    if sit.instance_id is None:
        return []
    discovery = observed.get("discovery")
    if discovery is not None:
        memberships = [tuple(m) for m in discovery["memberships"]]
        discovered_at = discovery["discoveredAt"]
    elif sit.attachment is not None:
        memberships = sit.memberships
        discovered_at = sit.attachment.get("discoveredAt")
    else:
        return []
    spec = targets.to_attachment_spec(memberships)
    return [
        templates.render(
            "attachment.json.j2",
            node=request.name,
            namespace=settings.namespace,
            instance_id=sit.instance_id,
            region=sit.region or "",
            targets=spec["awsTargets"],
            classic_elbs=[lb["name"] for lb in spec["awsLoadBalancers"]],
            discovered_at=discovered_at,
        )
    ]


def _event(request: HookRequest, reason: str, message: str) -> Action:
    return Action("event", request.name, {"reason": reason, "message": message})


def _clear_error(annotations: dict, request: HookRequest) -> None:
    for key in (names.ERROR, names.ATTEMPTS):
        if key in request.annotations:
            annotations[key] = None


def _deletion_deadline_passed(request: HookRequest, settings: Settings, now: dt.datetime) -> bool:
    """A deleting node is held at most NODEWARDEN_FINALIZE_DRAIN_TIMEOUT_SECONDS, whatever fails meanwhile."""
    if not request.finalizing:
        return False
    starts = [t for t in (timefmt.parse(request.meta.get("deletionTimestamp")),
                          timefmt.parse(request.annotations.get(names.SINCE))) if t is not None]
    return bool(starts) and (now - min(starts)).total_seconds() >= settings.finalize_drain_timeout_seconds


def _released(request: HookRequest, message: str, attachments: list[dict]) -> Plan:
    """A deleting node let go at its deadline: the node is leaving whatever is left undone."""
    return Plan(decorator_response(attachments=attachments, finalized=True),
                [Action("event", request.name, {"reason": "DetachAbandoned", "warning": True,
                                                "message": f"Deadline for a deleting node passed; letting it go: "
                                                           f"{message}"[:1024]})])


def _failure(request: HookRequest, settings: Settings, now: dt.datetime, message: str, attachments: list[dict],
             **extra) -> Plan:
    """A step that cannot proceed yet: say why on the node and retry with backoff."""
    if _deletion_deadline_passed(request, settings, now):
        return _released(request, message, attachments)
    attempt = bounds.counter(request.annotations, names.ATTEMPTS) + 1
    annotations = {names.ERROR: message, names.ATTEMPTS: str(attempt), **extra}
    return Plan(
        decorator_response(
            annotations=annotations,
            attachments=attachments,
            resync_after=backoff(settings, attempt),
            finalized=False if request.finalizing else None,
        ),
        [Action("event", request.name, {"reason": "DetachFailed", "message": message, "warning": True})],
    )


def _skip(request, sit, settings, now, observed) -> Plan:
    return Plan(decorator_response(attachments=[], finalized=True if request.finalizing else None))


def _idle(request, sit, settings, now, observed) -> Plan:
    attachments = _attachment(request, sit, settings, observed)
    if observed.get("discoveryError") and not attachments:
        return _failure(request, settings, now, f"load balancer discovery failed: {observed['discoveryError']}", [])
    annotations: dict = {}
    _clear_error(annotations, request)
    if observed.get("discoveryError"):
        log.warning("discovery failed; keeping the cached Attachment", extra={"node": request.name})
    resync = None
    if attachments and "discoveredAt" in attachments[0]["spec"]:
        age = timefmt.seconds_since(attachments[0]["spec"]["discoveredAt"], now) or 0
        resync = max(1.0, settings.discovery_refresh_seconds - age)
    return Plan(
        decorator_response(
            annotations=annotations,
            attachments=attachments,
            resync_after=resync,
            finalized=True if request.finalizing else None,
        )
    )


def _exclude(request, sit, settings, now, observed) -> Plan:
    reasons = ",".join(sit.reasons)
    labels = {} if names.EXCLUDE_LABEL in request.labels else {names.EXCLUDE_LABEL: names.EXCLUDE_VALUE}
    annotations = {
        names.DETACHING: "true",
        names.SINCE: request.annotations.get(names.SINCE) or timefmt.fmt(now),
        names.REASON: reasons,
    }
    reason = _REASONS.get(sit.reasons[0], "LeavingTaint")
    status = None
    node_status = fields.mapping(request.parent, "status")
    if conditions.differs(node_status, names.CONDITION, "True"):
        status = conditions.upsert(
            node_status,
            {"type": names.CONDITION, "status": "True", "reason": reason,
             "message": f"node-detacher is taking the node out of its load balancers ({reasons})"},
            timefmt.fmt(now),
            heartbeat=True,
        )
    return Plan(
        decorator_response(
            labels=labels,
            annotations=annotations,
            status=status,
            attachments=_attachment(request, sit, settings, observed),
            resync_after=_LABEL_SETTLE_SECONDS,
            finalized=False if request.finalizing else None,
        ),
        [_event(request, "Detaching", f"Leaving load balancers: {reasons}")],
    )


def _deregister(request, sit, settings, now, observed) -> Plan:
    attachments = _attachment(request, sit, settings, observed)
    if sit.instance_id is None:
        if request.finalizing:  # nothing we can act on; never hold a deletion forever
            return Plan(decorator_response(attachments=[], finalized=True),
                        [_event(request, "DetachSkipped", f"cannot detach: {sit.provider_error}")])
        return _failure(request, settings, now, f"cannot detach: {sit.provider_error}", attachments)
    if observed.get("discoveryError"):
        return _failure(request, settings, now, f"load balancer discovery failed: {observed['discoveryError']}", attachments)
    memberships = targets.from_attachment_spec(attachments[0]["spec"]) if attachments else []
    done = set(sit.deregistered or ())
    pending = [m for m in memberships if m not in done]
    actions = []
    for (lb_type, lb), ports in targets.group_by_load_balancer(pending).items():
        covered = [m for m in pending if (m[0], m[1]) == (lb_type, lb)]
        kind = "elbv2.deregister" if lb_type == "tg" else "elb.deregister"
        actions.append(Action(kind, lb, {"instance": sit.instance_id, "region": sit.region, "ports": ports,
                                         "memberships": [list(m) for m in covered]}))
    annotations = {names.DEREGISTERED: targets.encode(done | set(memberships))}
    _clear_error(annotations, request)
    actions.append(_event(request, "Deregistered",
                          f"Deregistered {sit.instance_id} from {len(actions)} load balancer(s)"))
    return Plan(
        decorator_response(
            annotations=annotations,
            attachments=attachments,
            resync_after=settings.drain_poll_seconds,
            finalized=False if request.finalizing else None,
        ),
        actions,
    )


def _drain(request, sit, settings, now, observed) -> Plan:
    attachments = _attachment(request, sit, settings, observed)
    waited = timefmt.seconds_since(request.annotations.get(names.SINCE), now) or 0
    limit = settings.finalize_drain_timeout_seconds if request.finalizing else settings.drain_timeout_seconds
    # The deadline is checked first: it fires whatever error reading the state gives meanwhile.
    timed_out = waited >= limit or _deletion_deadline_passed(request, settings, now)
    if observed.get("targetStatesError") and not timed_out:
        return _failure(request, settings, now, f"reading target state failed: {observed['targetStatesError']}",
                        attachments)
    states = observed.get("targetStates") or {}
    draining = sorted(k for k, state in states.items() if state not in elb_api.GONE_STATES)
    if observed.get("targetStatesError"):
        draining = draining or ["(state unreadable)"]
    if draining and not timed_out:
        return Plan(decorator_response(attachments=attachments, resync_after=settings.drain_poll_seconds,
                                       finalized=False if request.finalizing else None))
    annotations = {names.DETACHED_AT: timefmt.fmt(now)}
    _clear_error(annotations, request)
    message = "Every target finished draining" if not draining else \
        f"Gave up waiting for {len(draining)} draining target(s) after {waited:.0f}s"
    return Plan(
        decorator_response(annotations=annotations, attachments=attachments,
                           finalized=True if request.finalizing else None),
        [Action("event", request.name, {"reason": "Detached", "message": message, **({"warning": True} if draining else {})})],
    )


def _shutdown(request, sit, settings, now, observed) -> Plan:
    attachments = _attachment(request, sit, settings, observed)
    if request.finalizing:  # the node is going; its pods go with it
        return Plan(decorator_response(attachments=attachments, finalized=True))
    if not _node_leaving(sit):  # a DaemonSet roll or a bare request: the node stays, so do its pods
        # Our taint is for a leaving node only; kept here it would block the very
        # DaemonSet replacement a pod-triggered detach waits for.
        return Plan(decorator_response(attachments=attachments), _untaint_unless_leaving(request, sit))
    if observed.get("podsError"):
        return _failure(request, settings, now, f"listing pods failed: {observed['podsError']}", attachments)
    refs = shutdown.prioritized(observed.get("pods") or [], observed.get("daemonsets") or {})
    annotations: dict = {}
    _clear_error(annotations, request)
    if not refs:
        return Plan(decorator_response(annotations=annotations, attachments=attachments))
    priority, group = shutdown.next_group(refs)
    actions = []
    node_taints = fields.objects(request.parent, "spec", "taints")
    if not any(t.get("key") == names.DETACHING_TAINT for t in node_taints):
        # Keeps DaemonSet controllers from putting evicted pods straight back.
        actions.append(Action("kube.taint", request.name, {"key": names.DETACHING_TAINT, "effect": "NoSchedule"}))
    actions.extend(Action("kube.evict", r.key, {"priority": r.priority}) for r in group)
    if group:
        actions.append(_event(request, "EvictingPods",
                              f"Evicting {len(group)} pod(s) of deletion priority {priority}: "
                              + ", ".join(r.key for r in group)))
    return Plan(decorator_response(annotations=annotations, attachments=attachments,
                                   resync_after=settings.drain_poll_seconds), actions)


def _untaint_unless_leaving(request: HookRequest, sit: phases.Situation) -> list[Action]:
    if _node_leaving(sit) or not any(t.get("key") == names.DETACHING_TAINT
                                     for t in fields.objects(request.parent, "spec", "taints")):
        return []
    return [Action("kube.untaint", request.name, {"key": names.DETACHING_TAINT})]


def _node_leaving(sit: phases.Situation) -> bool:
    """Ordered pod shutdown is for nodes on their way out, not for DaemonSet rolls."""
    return any(r == "cordoned" or r.startswith("taint:") for r in sit.reasons)


def _reattach(request, sit, settings, now, observed) -> Plan:
    attachments = _attachment(request, sit, settings, observed)
    deregistered = set(sit.deregistered or ())
    if request.annotations.get(names.SINCE):
        # A deregistration may have happened whose record never landed (Metacontroller's
        # Node update lost a race with the uncordon): restore all the frozen Attachment
        # lists too. Registering a registered target changes nothing.
        deregistered |= set(sit.memberships or ())
    deregistered = sorted(deregistered)
    actions = []
    failing_for = timefmt.seconds_since(request.annotations.get(names.REATTACH_FAILING_SINCE), now)
    if failing_for is not None and failing_for >= settings.reattach_timeout_seconds:
        # Holding our exclude label any longer would keep the node out of every
        # load balancer for good; the controllers that register nodes take it from here.
        deregistered = []
        actions.append(Action("event", request.name, {
            "reason": "ReattachAbandoned", "warning": True,
            "message": f"Re-attaching failed for {failing_for:.0f}s "
                       f"({request.annotations.get(names.ERROR, 'unknown error')}); our exclude label comes off "
                       "and the load balancers' own controllers register the node"[:1024]}))
    if deregistered and sit.instance_id is None:
        return _failure(request, settings, now, f"cannot re-attach: {sit.provider_error}", attachments)
    for (lb_type, lb), ports in targets.group_by_load_balancer(deregistered).items():
        covered = [m for m in deregistered if (m[0], m[1]) == (lb_type, lb)]
        kind = "elbv2.register" if lb_type == "tg" else "elb.register"
        actions.append(Action(kind, lb, {"instance": sit.instance_id, "region": sit.region, "ports": ports,
                                         "memberships": [list(m) for m in covered]}))
    if any(t.get("key") == names.DETACHING_TAINT for t in fields.objects(request.parent, "spec", "taints")):
        actions.append(Action("kube.untaint", request.name, {"key": names.DETACHING_TAINT}))
    labels = {names.EXCLUDE_LABEL: None} if request.labels.get(names.EXCLUDE_LABEL) == names.EXCLUDE_VALUE else {}
    annotations = {key: None for key in names.OUR_ANNOTATIONS if key in request.annotations}
    node_status = fields.mapping(request.parent, "status")
    status = conditions.remove(node_status, names.CONDITION) if conditions.find(node_status, names.CONDITION) else None
    registered = sum(1 for a in actions if a.kind.endswith(".register"))
    actions.append(_event(request, "Reattached",
                          f"Registered again with {registered} load balancer(s)" if registered else "Back in service"))
    return Plan(
        decorator_response(labels=labels, annotations=annotations, status=status, attachments=attachments,
                           finalized=True if request.finalizing else None),
        actions,
    )


_DECIDERS = {
    phases.SKIP: _skip,
    phases.IDLE: _idle,
    phases.EXCLUDE: _exclude,
    phases.DEREGISTER: _deregister,
    phases.DRAIN: _drain,
    phases.SHUTDOWN: _shutdown,
    phases.REATTACH: _reattach,
}


# --------------------------------------------------------------------------- observe


def gather(request: HookRequest, ctx: runtime.Context, sit: phases.Situation | None = None) -> dict:
    """The look-ups this call's phase needs; failures are recorded, never raised."""
    if request.parent.get("kind") == "Pod":
        return gather_pod(request, ctx)
    settings = ctx.settings
    sit = sit or phases.assess(request, settings, ctx.now())
    observed: dict = {}
    if sit.needs_discovery:
        try:
            index = LB_INDEX.get(ctx.aws, sit.region or ctx.aws.region(), settings)
            observed["discovery"] = {
                "memberships": [list(m) for m in index.memberships(sit.instance_id)],
                "discoveredAt": timefmt.fmt(ctx.now()),
            }
        except Exception as exc:  # noqa: BLE001 - any AWS/transport failure is reported, not raised
            observed["discoveryError"] = aws_error(exc)
    if sit.phase == phases.DRAIN:
        try:
            observed["targetStates"] = _target_states(ctx, sit)
        except Exception as exc:  # noqa: BLE001
            observed["targetStatesError"] = aws_error(exc)
    if sit.phase == phases.SHUTDOWN and not request.finalizing and _node_leaving(sit):
        try:
            node_pods = pods.on_node(ctx.kube, request.name)
            daemonsets = {shutdown.daemonset_of(p) for p in node_pods} - {None}
            observed["pods"] = node_pods
            observed["daemonsets"] = pods.daemonset_annotations(ctx.kube, daemonsets) if daemonsets else {}
        except Exception as exc:  # noqa: BLE001
            observed["podsError"] = kube_error(exc)
    return observed


def _target_states(ctx: runtime.Context, sit: phases.Situation) -> dict[str, str]:
    states = {}
    client = None
    for (lb_type, arn), ports in targets.group_by_load_balancer(sit.deregistered or ()).items():
        if lb_type != "tg":
            continue  # classic ELBs stop sending at deregistration
        client = client or ctx.aws.client("elbv2", sit.region)
        for port, state in elb_api.target_states(client, arn, sit.instance_id, ports).items():
            states[f"{arn}|{port}"] = state
    return states


# --------------------------------------------------------------------------- act


def settle(request: HookRequest, plan: Plan, outcomes: list[Outcome], settings: Settings,
           now: dt.datetime | None = None) -> dict:
    """The response given what really happened: failed steps stay pending."""
    failed = [o for o in outcomes if not o.ok]
    response = plan.response
    if not failed:
        return response
    if now is not None and _deletion_deadline_passed(request, settings, now):
        return dict(response, finalized=True)  # a deleting node is never held past its deadline
    annotations = dict(response.get("annotations") or {})
    failed_memberships = {tuple(m) for o in failed for m in o.action.params.get("memberships", [])}
    if any(o.action.kind.endswith(".register") for o in failed):
        # Re-attach incomplete: keep detach state, remember what still needs registering.
        response = dict(response, labels={}, status=None)
        annotations = {names.DEREGISTERED: targets.encode(failed_memberships),
                       names.REATTACH_FAILING_SINCE: request.annotations.get(names.REATTACH_FAILING_SINCE)
                       or timefmt.fmt(now or runtime.utcnow())}
        if "finalized" in response:
            response["finalized"] = False
    elif names.DEREGISTERED in annotations:
        kept = set(targets.decode(annotations[names.DEREGISTERED]) or []) - failed_memberships
        annotations[names.DEREGISTERED] = targets.encode(kept)
    attempt = bounds.counter(request.annotations, names.ATTEMPTS) + 1
    annotations[names.ERROR] = actuators.failure_text(outcomes)
    annotations[names.ATTEMPTS] = str(attempt)
    response = dict(response, annotations=annotations, resyncAfterSeconds=backoff(settings, attempt))
    return response


def _emit(request: HookRequest, plan: Plan, outcomes: list[Outcome], ctx: runtime.Context) -> None:
    failed = [o for o in outcomes if not o.ok]
    subject = request.parent
    if request.parent.get("kind") == "Pod":  # pod-triggered detaches are reported on the Node
        subject = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": plan.actions[0].target if plan.actions else ""}}
    if failed:
        events.emit(ctx.kube, subject, "DetachFailed", actuators.failure_text(outcomes), warning=True,
                    component=CONTROLLER)
        return
    for action in plan.actions:
        if action.kind == "event":
            events.emit(ctx.kube, subject, action.params["reason"], action.params["message"],
                        warning=action.params.get("warning", False), component=CONTROLLER)


# --------------------------------------------------------------------------- hooks


# Steps that take a node out of service: decided again on the Node as the API server has it.
_VERIFIED_KINDS = ("elbv2.deregister", "elb.deregister", "kube.evict", "kube.taint", "kube.annotate-node")


def verify(request: HookRequest, ctx: runtime.Context) -> HookRequest:
    """The request with its parent (Node or Pod) re-read from the API server: same uid, or Unverified."""
    parent = fresh.same_object(ctx.kube, request.parent)
    try:
        return dataclasses.replace(request, parent=parse_object(parent, "parent"))
    except RequestError as exc:
        raise fresh.Unverified(f"{request.parent.get('kind')} {request.name} as the API server has it: {exc}") from None


def _plan(request: HookRequest, ctx: runtime.Context, now: dt.datetime):
    sit = None if request.parent.get("kind") == "Pod" else phases.assess(request, ctx.settings, now)
    observed = gather(request, ctx, sit)
    return decide(request, ctx.settings, now, observed, sit)


def _unverified(request: HookRequest, plan: Plan, settings: Settings, reason: str) -> dict:
    """Nothing disruptive without the API server's word; the Attachment stays (omitting it would delete it)."""
    log.warning("node-detacher did not act", extra={"object": request.name, "reason": reason})
    attachments = plan.response.get("attachments") or []
    return decorator_response(attachments=attachments, resync_after=backoff(settings, 1),
                              finalized=False if request.finalizing else None)


def _serve(request: HookRequest, ctx: runtime.Context | None) -> dict:
    ctx = ctx or runtime.current()
    now = ctx.now()
    pod_request_end = None
    if request.parent.get("kind") != "Pod":
        request, pod_request_end = pod_trigger.end_of_node_request(request, ctx, now)
    plan = _plan(request, ctx, now)
    if any(a.kind in _VERIFIED_KINDS for a in plan.actions):
        try:
            request = verify(request, ctx)
        except fresh.Unverified as exc:
            return _unverified(request, plan, ctx.settings, str(exc))
        if pod_request_end is None and request.parent.get("kind") != "Pod":
            request, pod_request_end = pod_trigger.end_of_node_request(request, ctx, now)
        plan = _plan(request, ctx, now)
    if pod_request_end is not None:
        plan = pod_trigger.withdraw_node_request(request, plan, pod_request_end)
    outcomes = actuators.act(CONTROLLER, plan.actions, ctx)
    if request.parent.get("kind") == "Pod":
        # Never annotate users' pods with our errors: just try again later.
        failed = any(not o.ok for o in outcomes)
        response = decorator_response(resync_after=backoff(ctx.settings, 1)) if failed else plan.response
    else:
        response = settle(request, plan, outcomes, ctx.settings, now)
        response = pod_trigger.keep_node_request_clock(request, response, ctx.settings, now)
    if any(a.kind == "event" for a in plan.actions) or any(not o.ok for o in outcomes):
        _emit(request, plan, outcomes, ctx)
    return response


def sync(request: HookRequest, ctx: runtime.Context | None = None) -> dict:
    return _serve(request, ctx)


def finalize(request: HookRequest, ctx: runtime.Context | None = None) -> dict:
    return _serve(request, ctx)
