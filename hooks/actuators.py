"""Every side effect a controller can plan, by Action kind: one actuator each.

Controllers decide (pure) and put Actions in their Plan; ``act`` carries them
out here, idempotently, and reports one Outcome per action. Right before an
action runs, each of its preconditions is read again from AWS or the API
server; one that does not hold keeps the action from running. A failure is
an Outcome with the error, never an exception: the pipeline keeps what
already happened and the next call retries the rest.

``act_in_background`` carries a call's background actions on after it has
answered: their work starts on the caller's thread (a submitter hands it
over) or on one of a few background threads, where each is waited on,
reported, and its outcome handed to the caller's ``done``.
"""
from __future__ import annotations

import contextlib
import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Callable

from hooks import machine_names, runtime, timefmt
from hooks.aws import autoscaling, ec2_power, elb, gc, instances, rate_limits, sqs_messages
from hooks.aws.clients import error_code
from hooks.ec2_names import GONE_STATES, OFF_STATES, OWNED, cluster_tag, cluster_tagged
from hooks.fencing.node import request_to_make
from hooks.kube import (fencing_api, fresh, handover, interruptions, machine_api, node_timeline, nodes, owner_api, pods,
                        taints)
from hooks.machines.signals import CONSOLIDATION
from hooks.metrics import (CONSOLIDATIONS, INTERRUPTION_MESSAGES, MACHINE_EVENTS, MACHINES_DISRUPTED, MACHINES_LAUNCHED,
                           OWNER_REPLACEMENTS, PROVISIONED_PODS, PROVISIONED_REQUEST_RATIO,
                           REPLACEMENT_SECONDS, STORM_GUARD, record_action)
from hooks.owner_names import NODECLAIM_KIND
from hooks.plan import (DEFERRED, PRECONDITION, UNDER_WAY, Action, CapiMachineOf, ClusterInstance, Collectable, Gate, GroupMember,
                        InstanceOf, NodeClaimOf, Orphaned, Outcome, PoweredOff, SameObject, error_text)
from hooks.recent import Recent
from hooks.teardown.plan import verdict
from hooks.teardown.scope import COLLECT, Scope
from hooks.teardown.tasks import KIND_TASK

log = logging.getLogger(__name__)


def _namespaced(target: str) -> tuple[str, str]:
    namespace, name = target.split("/", 1)
    return namespace, name


def _annotate_node(ctx: runtime.Context, a: Action) -> None:
    from lightkube.resources.core_v1 import Node

    if a.params.get("uid"):  # only the Node of that uid; null (remove) is for the merge patch below
        nodes.annotate(ctx.kube, a.target, a.params["annotations"], a.params["uid"])
        return
    ctx.kube.merge_patch(Node, a.target, {"metadata": {"annotations": a.params["annotations"]}})


def start_fencing(ctx: runtime.Context, node_name: str, uid: str, decorator: str) -> str | None:
    """Make the node's FencingRequest now, exactly as its own next sync would, when that sync may be long in
    coming: a count that admits held nodes comes as the storm that held them ends, and the Node decorator's
    one queue then holds every recovering Node ahead of them. Returns the request's name when one was made.

    The decision is node-fencing's own (hooks/fencing/node.py), on the Node of this uid, every
    NodeFencingPolicy and the node's FencingRequest read from the API server alone: only a node that sync
    would fence now, with no request of this spell yet, gets one. It is made as the DecoratorController
    ``decorator`` makes the node's attachments (owned by the Node, claimed by the decorator), so the Node's
    next sync finds it as its own, fencing in flight; the conditions, taints and failover are left to that
    sync."""
    request = node_timeline.of_node(ctx.kube, node_name, uid, ctx.settings.namespace)
    made = request_to_make(request, ctx.settings, ctx.now())
    if made is None or not fencing_api.create_node_attachment(ctx.kube, made, request.parent, decorator):
        return None
    log.info("FencingRequest made for an admitted node", extra={"node": node_name, "request": made["metadata"]["name"]})
    return made["metadata"]["name"]


def _send_within(ctx: runtime.Context, a: Action) -> float | None:
    """Seconds left before the action's ``sendBy`` (on the context's clock), after which it is not sent; None
    when it has none. Raises elb.NotSent once it has passed (a registration as a deregistration)."""
    send_by = timefmt.parse(a.params.get("sendBy"))
    if send_by is None:
        return None
    left = (send_by - ctx.now()).total_seconds()
    if left <= 0:
        raise elb.NotSent(f"{a.kind} {a.target}: its deadline to go out ({a.params['sendBy']}) had passed")
    return left


def _in_time(ctx: runtime.Context, a: Action, service: str, operation: str, call: Callable[[object], object]):
    """``call`` on the action's client, sent only before its ``sendBy``: its token is taken first and the
    deadline read again with it in hand, so a wait for tokens never sends it late."""
    client = ctx.aws.client(service, a.params.get("region"))
    left = _send_within(ctx, a)
    if left is None:
        return call(client)
    with contextlib.ExitStack() as paid:
        try:
            paid.enter_context(rate_limits.paid_ahead(client, operation, left))
        except rate_limits.Limited as exc:  # its token would come too late: never sent
            raise elb.NotSent.no_token(f"{a.kind} {a.target} (send by {a.params['sendBy']})", exc) from exc
        _send_within(ctx, a)
        return call(client)


def _deregister_instance(ctx: runtime.Context, a: Action):
    return _in_time(ctx, a, "elb", "DeregisterInstancesFromLoadBalancer",
                    lambda client: elb.deregister_instance(client, a.target, a.params["instance"]))


def _register_targets(ctx: runtime.Context, a: Action):
    return _in_time(ctx, a, "elbv2", "RegisterTargets",
                    lambda client: elb.register_targets(client, a.target, a.params["instance"], a.params["ports"]))


def _register_instance(ctx: runtime.Context, a: Action):
    return _in_time(ctx, a, "elb", "RegisterInstancesWithLoadBalancer",
                    lambda client: elb.register_instance(client, a.target, a.params["instance"]))


# Actuators that hand their work over and return a ticket (a callable that waits for the result): a run of
# such actions is handed over as a whole before any is waited on.
SUBMITTERS: dict[str, Callable[[runtime.Context, Action], Callable[[], object]]] = {
    # ELBv2 target groups: one batched call per group with every port, coalesced per target group with the
    # other nodes this process deregisters at the same time; a node's groups are called in parallel.
    "elbv2.deregister": lambda ctx, a: elb.DEREGISTRATIONS.submit(
        ctx.aws.client("elbv2", a.params.get("region")), a.params.get("region") or "", a.target,
        a.params["instance"], a.params["ports"], window=ctx.settings.deregister_batch_window_seconds,
        send_within=_send_within(ctx, a)),
}

ACTUATORS: dict[str, Callable[[runtime.Context, Action], object]] = {
    "elbv2.deregister": lambda ctx, a: SUBMITTERS["elbv2.deregister"](ctx, a)(),  # handed over, then waited on
    "elbv2.register": _register_targets,
    # Classic ELBs.
    "elb.deregister": _deregister_instance,
    "elb.register": _register_instance,
    # cluster-gc: one delete of a load balancer, target group, security group or volume.
    "aws.delete": lambda ctx, a: gc.delete(ctx.aws, a.params["kind"], a.params["region"], a.target),
    # EC2 power for fencing.
    "aws.stop": lambda ctx, a: ec2_power.stop(ctx.aws.client("ec2", a.params.get("region") or None), a.target),
    "aws.start": lambda ctx, a: ec2_power.start(ctx.aws.client("ec2", a.params.get("region") or None), a.target),
    # Kubernetes: what a hook response cannot change.
    "kube.taint": lambda ctx, a: taints.add(ctx.kube, a.target, a.params["key"], a.params["effect"],
                                            a.params.get("value"), uid=a.params.get("uid")),
    "kube.untaint": lambda ctx, a: taints.remove(ctx.kube, a.target, a.params["key"]),
    "kube.evict": lambda ctx, a: pods.evict(ctx.kube, *_namespaced(a.target)),
    "kube.annotate-node": _annotate_node,
    "kube.record-node": lambda ctx, a: nodes.record(ctx.kube, a.target, a.params["changes"], a.params["uid"]),
    "kube.label-node": lambda ctx, a: nodes.write_metadata(ctx.kube, a.target, a.params["uid"],
                                                           labels=a.params.get("labels"),
                                                           annotations=a.params.get("annotations"),
                                                           seen=a.params.get("seen")),
    "kube.force-delete-pod": lambda ctx, a: fencing_api.force_delete_pod(
        ctx.kube, *_namespaced(a.target), a.params.get("uid")),
    "kube.delete-volume-attachment": lambda ctx, a: fencing_api.delete_volume_attachment(ctx.kube, a.target),
    # An admitted node's FencingRequest, ahead of the node's own sync (node-fencing-policy asks for it).
    "kube.start-fencing": lambda ctx, a: start_fencing(ctx, a.target, a.params["uid"], a.params["decorator"]),
    # A Node handed over from the old DecoratorControllers: an attachment claimed (at the resourceVersion it
    # was read at), the old finalizers off (a JSON patch testing each entry).
    "kube.claim-attachment": lambda ctx, a: handover.claim(ctx.kube, a.params["kind"], a.params["name"],
                                                           a.params["namespace"], a.params["resourceVersion"],
                                                           a.params["controller"]),
    "kube.remove-finalizers": lambda ctx, a: handover.remove_finalizers(ctx.kube, a.target, a.params["patch"]),
    # Machines: launch (one candidate, tagged at creation), terminate, and what they do to their Node.
    "ec2.launch": lambda ctx, a: _launch(ctx, a),
    "ec2.terminate": lambda ctx, a: instances.terminate(ctx.aws.client("ec2", a.params.get("region") or None),
                                                        a.target),
    "kube.register-node": lambda ctx, a: machine_api.register_node(
        ctx.kube, a.target, a.params["uid"], a.params["labels"], a.params["annotations"], a.params["taints"]),
    "kube.cordon-disrupted": lambda ctx, a: machine_api.cordon_disrupted(ctx.kube, a.target, a.params["uid"],
                                                                           a.params.get("reason", "")),
    "kube.delete-node": lambda ctx, a: machine_api.delete_node(ctx.kube, a.target, a.params["uid"]),
    "kube.delete-machine": lambda ctx, a: machine_api.delete_machine(ctx.kube, a.target, a.params["uid"]),
    "kube.mark-disrupted": lambda ctx, a: machine_api.mark_disrupted(ctx.kube, a.target, a.params["uid"],
                                                                       a.params["value"]),
    # Interruptions: the signal on the Machine (only over none or a weaker one), then the message off the queue;
    # a stop EC2 no longer agrees with, off the Machine.
    "kube.annotate-machine": lambda ctx, a: interruptions.record(ctx.kube, a.target, a.params["uid"],
                                                                 a.params["interruption"], a.params.get("replaces")),
    "kube.retire-interruption": lambda ctx, a: interruptions.retire(ctx.kube, a.target, a.params["uid"],
                                                                    a.params["value"]),
    "sqs.delete": lambda ctx, a: sqs_messages.delete(ctx.aws.client("sqs", a.params.get("region") or None),
                                            a.params["queueURL"], a.params["receipt"]),
    # A fenced node's owner asked to replace it: Karpenter (its NodeClaim deleted), Cluster API (its Machine
    # marked for the owner's remediation), EC2 Auto Scaling (the instance Unhealthy, or in and out of Standby
    # around a reboot).
    "kube.delete-nodeclaim": lambda ctx, a: owner_api.delete_nodeclaim(ctx.kube, a.target, a.params["uid"]),
    "kube.remediate-capi-machine": lambda ctx, a: owner_api.mark_capi_remediation(
        ctx.kube, *_namespaced(a.target), a.params["uid"], a.params["message"], timefmt.fmt(ctx.now())),
    "asg.set-unhealthy": lambda ctx, a: autoscaling.set_unhealthy(
        ctx.aws.client("autoscaling", a.params.get("region") or None), a.target),
    "asg.replace-from-standby": lambda ctx, a: autoscaling.replace_from_standby(
        ctx.aws.client("autoscaling", a.params.get("region") or None), a.params["group"], a.target),
    "asg.enter-standby": lambda ctx, a: autoscaling.enter_standby(
        ctx.aws.client("autoscaling", a.params.get("region") or None), a.params["group"], a.target),
    "asg.exit-standby": lambda ctx, a: autoscaling.exit_standby(
        ctx.aws.client("autoscaling", a.params.get("region") or None), a.params["group"], a.target),
    # Metrics that follow a decision.
    "metric.storm-guard": lambda ctx, a: STORM_GUARD.labels(a.target).set(1 if a.params["active"] else 0),
    "metric.machine": lambda ctx, a: MACHINE_EVENTS.labels(a.target, a.params["event"]).inc(),
    "metric.interruption": lambda ctx, a: INTERRUPTION_MESSAGES.labels(a.target, a.params["outcome"]).inc(),
    "metric.disrupted": lambda ctx, a: _count_disruption(a),
    "metric.replaced": lambda ctx, a: REPLACEMENT_SECONDS.labels(a.target, a.params["reason"]).observe(
        a.params["seconds"]),
    "metric.launched": lambda ctx, a: _count_launch(a),
    "metric.owner-replacement": lambda ctx, a: _count_owner_replacement(a),
}


# A pool sync retried before its status (the record) was written decides the same start again.
_DISRUPTIONS_COUNTED = Recent(10_000)


def _count_disruption(a: Action) -> None:
    if _DISRUPTIONS_COUNTED.first(f"{a.target}/{a.params.get('record', '')}"):
        MACHINES_DISRUPTED.labels(a.target, a.params["reason"]).inc()
        if a.params["reason"] in CONSOLIDATION:
            CONSOLIDATIONS.labels(a.target, a.params["reason"]).inc()


# A pool sync retried before Metacontroller created its Machines asks for the same names again.
_LAUNCHES_COUNTED = Recent(10_000)


def _count_launch(a: Action) -> None:
    if not _LAUNCHES_COUNTED.first(f"{a.target}/{a.params['machine']}"):
        return
    MACHINES_LAUNCHED.labels(a.target, a.params["reason"]).inc()
    if a.params.get("pods"):
        PROVISIONED_PODS.labels(a.target).inc(a.params["pods"])
    for resource, ratio in (a.params.get("ratios") or {}).items():
        PROVISIONED_REQUEST_RATIO.labels(a.target, resource).observe(ratio)


# A FencingRequest sync retried before its status (the record) was written decides the same outcome again.
_OWNER_REPLACEMENTS_COUNTED = Recent(10_000)


def _count_owner_replacement(a: Action) -> None:
    """One count per request and outcome (``params["request"]``, its uid; without one, every call counts)."""
    request = a.params.get("request")
    if request and not _OWNER_REPLACEMENTS_COUNTED.first(f"{request}/{a.target}/{a.params['outcome']}"):
        return
    OWNER_REPLACEMENTS.labels(a.target, a.params["outcome"]).inc()


def _launch(ctx: runtime.Context, a: Action) -> dict:
    p = a.params
    candidate = p["candidate"]
    return instances.run_instance(
        ctx.aws.client("ec2", p.get("region") or None), uid=p["uid"], launch_request=p["launchRequestedAt"],
        candidate=instances.Candidate(candidate["instanceType"], candidate.get("subnetID")),
        tag_list=p["tags"], image_id=p.get("imageId"), launch_template=p.get("launchTemplate"),
        security_groups=p.get("securityGroups") or [], instance_profile=p.get("instanceProfile"),
        user_data=p["userData"], spot=p.get("capacityType") == "spot")


def _precondition_failure(ctx: runtime.Context, requirement) -> str:
    """Why a precondition does not hold right now ("" when it does), read fresh from AWS or the API server."""
    if isinstance(requirement, PoweredOff):
        try:
            state = ec2_power.state(ctx.instances, requirement.region, requirement.instance_id)
        except Exception as exc:  # noqa: BLE001 - unreadable is not powered off
            return f"power state of {requirement.instance_id} not confirmed: {error_text(exc)}"
        if state not in OFF_STATES:
            return f"instance {requirement.instance_id} is {state}, not powered off"
        return ""
    if isinstance(requirement, SameObject):
        try:
            fresh.expect(ctx.kube, requirement.kind, requirement.name, requirement.namespace, requirement.uid)
        except fresh.Unverified as exc:
            return str(exc)
        return ""
    if isinstance(requirement, InstanceOf):
        return _instance_of(ctx, requirement)
    if isinstance(requirement, Orphaned):
        return _orphaned(ctx, requirement)
    if isinstance(requirement, ClusterInstance):
        return _cluster_instance(ctx, requirement)
    if isinstance(requirement, NodeClaimOf):
        return _nodeclaim_of(ctx, requirement)
    if isinstance(requirement, CapiMachineOf):
        return _capi_machine_of(ctx, requirement)
    if isinstance(requirement, GroupMember):
        return _group_member(ctx, requirement)
    if isinstance(requirement, Collectable):
        return _collectable(ctx, requirement)
    return f"unknown precondition {requirement!r}"


def _nodeclaim_of(ctx: runtime.Context, requirement: NodeClaimOf) -> str:
    try:
        claim = fresh.read(ctx.kube, NODECLAIM_KIND, requirement.name)
    except fresh.Unverified as exc:
        return str(exc)
    if claim is None:
        return ""  # gone: its delete answers so, and deletes nothing else
    uid = (claim.get("metadata") or {}).get("uid")
    if uid != requirement.uid:
        return f"NodeClaim {requirement.name} is uid {uid}, not the {requirement.uid} expected"
    status = claim.get("status") if isinstance(claim.get("status"), dict) else {}
    if status.get("providerID") != requirement.provider_id:
        return f"NodeClaim {requirement.name} is for {status.get('providerID')!r}, not {requirement.provider_id!r}"
    if status.get("nodeName") != requirement.node_name:
        return f"NodeClaim {requirement.name} names node {status.get('nodeName')!r}, not {requirement.node_name!r}"
    return ""


def _capi_machine_of(ctx: runtime.Context, requirement: CapiMachineOf) -> str:
    where = f"{requirement.namespace}/{requirement.name}"
    try:
        machine = owner_api.capi_machine(ctx.kube, requirement.namespace, requirement.name)
    except Exception as exc:  # noqa: BLE001 - unreadable proves nothing
        return f"Cluster API Machine {where} not read: {error_text(exc)}"
    if machine is None:
        return ""  # gone: its mark answers so, and marks nothing else
    uid = (machine.get("metadata") or {}).get("uid")
    if uid != requirement.uid:
        return f"Cluster API Machine {where} is uid {uid}, not the {requirement.uid} expected"
    status = machine.get("status") if isinstance(machine.get("status"), dict) else {}
    node = status.get("nodeRef").get("name") if isinstance(status.get("nodeRef"), dict) else None
    if node != requirement.node_name:
        return f"Cluster API Machine {where} holds node {node!r}, not {requirement.node_name!r}"
    return ""


def _group_member(ctx: runtime.Context, requirement: GroupMember) -> str:
    try:
        found = autoscaling.describe_instance(ctx.aws.client("autoscaling", requirement.region or None),
                                              requirement.instance_id)
    except Exception as exc:  # noqa: BLE001 - unreadable proves nothing
        return f"Auto Scaling group of {requirement.instance_id} not confirmed: {error_text(exc)}"
    if found is not None and found["group"] != requirement.group:
        return f"instance {requirement.instance_id} is in Auto Scaling group {found['group']}, not {requirement.group}"
    return ""  # in the group, or in none any more: the step answers that it is gone


def _collectable(ctx: runtime.Context, requirement: Collectable) -> str:
    """cluster-gc's verdict on the resource as EC2 has it now: still ours, and free to delete."""
    kind, ident = requirement.kind, requirement.resource_id
    try:
        found = gc.read_one(ctx.aws, kind, requirement.region, ident)
    except Exception as exc:  # noqa: BLE001 - unreadable proves nothing
        return f"{kind} {ident} not confirmed: {error_text(exc)}"
    if found is None:
        return ""  # EC2 no longer knows it: its delete finds it gone
    scope = Scope(COLLECT, "", requirement.cluster_name, requirement.region, (KIND_TASK[kind],),
                  requirement.include_lb_controller)
    reason = verdict(scope, found, ctx.now()).keep
    return f"{kind} {ident} is kept now: {reason}" if reason else ""


def _cluster_instance(ctx: runtime.Context, requirement: ClusterInstance) -> str:
    """This cluster's only if its tags say so now; unreadable or gone proves nothing."""
    try:
        found = ec2_power.describe(ctx.instances, requirement.region, requirement.instance_id)
    except Exception as exc:  # noqa: BLE001 - unreadable is not ours
        return f"tags of {requirement.instance_id} not confirmed: {error_text(exc)}"
    if not cluster_tagged(found["tags"], requirement.cluster_name):
        return f"instance {requirement.instance_id} is not tagged for cluster {requirement.cluster_name!r}"
    return ""


def _instance_of(ctx: runtime.Context, requirement: InstanceOf) -> str:
    try:
        found = ctx.instances.fresh_by_id(requirement.region or "", requirement.instance_id)
    except Exception as exc:  # noqa: BLE001 - unreadable proves nothing
        return f"tags of {requirement.instance_id} not confirmed: {error_text(exc)}"
    if found is None:
        return ""  # EC2 no longer knows it: acting on it cannot harm anything
    if machine_names.machines_instance(found["tags"], requirement.machine_uid, requirement.cluster_name):
        return ""
    return f"instance {requirement.instance_id} is not tagged for Machine uid {requirement.machine_uid}"


def _orphaned(ctx: runtime.Context, requirement: Orphaned) -> str:
    """A leak only if the instance's tags, its age and the API server's Machines all say so, read now."""
    try:
        found = ctx.instances.fresh_by_id(requirement.region or "", requirement.instance_id)
    except Exception as exc:  # noqa: BLE001
        return f"instance {requirement.instance_id} not confirmed: {error_text(exc)}"
    if found is None or found["state"] in GONE_STATES:
        return f"instance {requirement.instance_id} is already gone"
    tags = found["tags"]
    if tags.get(cluster_tag(requirement.cluster_name)) != OWNED \
            or tags.get(machine_names.TAG_POOL) != requirement.pool or not tags.get(machine_names.TAG_MACHINE_UID):
        return f"instance {requirement.instance_id} is not tagged for pool {requirement.pool} of this cluster"
    launched = timefmt.parse(found.get("launchTime"))
    if launched is None or (ctx.now() - launched).total_seconds() < requirement.min_age_seconds:
        return f"instance {requirement.instance_id} is younger than {requirement.min_age_seconds:g}s"
    try:
        uids, recorded = machine_api.claims(ctx.kube)
    except Exception as exc:  # noqa: BLE001 - no list, no proof
        return f"Machines not listed: {error_text(exc)}"
    if tags[machine_names.TAG_MACHINE_UID] in uids:
        return f"Machine uid {tags[machine_names.TAG_MACHINE_UID]} exists"
    if requirement.instance_id in recorded:
        return f"a Machine records instance {requirement.instance_id}"
    return ""


def _unmet(ctx: runtime.Context, action: Action) -> Outcome | None:
    for requirement in action.requires:
        problem = _precondition_failure(ctx, requirement)
        if problem:
            return Outcome(action, False, f"not done: {problem}", code=PRECONDITION)
    return None


def _failed(action: Action, exc: Exception) -> Outcome:
    # Not sent before its deadline: put off to a later call, which decides it again on a fresher reading.
    code = DEFERRED if isinstance(exc, elb.NotSent) else error_code(exc)
    return Outcome(action, False, error=error_text(exc), code=code)


def _run_one(ctx: runtime.Context, action: Action) -> Outcome:
    unmet = _unmet(ctx, action)
    if unmet is not None:
        return unmet
    try:
        return Outcome(action, True, result=ACTUATORS[action.kind](ctx, action))
    except Exception as exc:  # noqa: BLE001 - every failure becomes progress-preserving state
        return _failed(action, exc)


class _Answer:
    """A handed-over action's Outcome once its ticket answers: called, it waits for it; ``when_done`` has it
    handed to a function instead, on the thread that made the call, so nothing waits meanwhile."""

    def __init__(self, action: Action, ticket):
        self._action, self._ticket = action, ticket

    def __call__(self) -> Outcome:
        try:
            return Outcome(self._action, True, result=self._ticket())
        except Exception as exc:  # noqa: BLE001
            return _failed(self._action, exc)

    def when_done(self, then: Callable[[Outcome], None]) -> None:
        self._ticket.when_done(lambda: then(self()))


def _submitted(ctx: runtime.Context, action: Action):
    """The action handed over: a callable answering its Outcome once its work is done. A ``carry_on`` action
    whose work waits to go out answers UNDER_WAY at once instead, ``later`` being that wait (none for a
    renewal: whoever asked first waits)."""
    unmet = _unmet(ctx, action)
    if unmet is not None:
        return lambda: unmet
    try:
        ticket = SUBMITTERS[action.kind](ctx, action)
    except Exception as exc:  # noqa: BLE001
        failed = _failed(action, exc)
        return lambda: failed
    answer = _Answer(action, ticket)
    if not action.carry_on:
        return answer
    under_way = Outcome(action, False, "under way: its call waits to go out, carried on after this call",
                        code=UNDER_WAY, later=None if ticket.renewal else answer)
    if ticket.queued:
        return lambda: under_way

    def unless_queued() -> Outcome:
        try:
            return Outcome(action, True, result=ticket.unless_queued())
        except elb.Queued:
            return under_way
        except Exception as exc:  # noqa: BLE001
            return _failed(action, exc)
    return unless_queued


def _report(controller: str, outcome: Outcome) -> None:
    action = outcome.action
    record_action(controller, action.kind, outcome.ok)
    log.info("action", extra={"controller": controller, "kind": action.kind, "target": action.target,
                              "ok": outcome.ok, "error": outcome.error or None})


def act(controller: str, actions: list[Action], ctx: runtime.Context, gate: Gate | None = None,
        started: float = 0.0) -> list[Outcome]:
    """Run the actions in order, each after its preconditions are read again; one Outcome each, errors as text.

    A run of consecutive actions with a submitter is handed over whole, then waited on in order, before
    the next action (or the gate's next look) sees their outcomes.
    """
    outcomes: list[Outcome] = []
    waiting: list = []

    def collect() -> None:
        for outcome in waiting:
            outcomes.append(outcome())
            if outcomes[-1].code != UNDER_WAY:  # reported once it answers (carry_on)
                _report(controller, outcomes[-1])
        waiting.clear()

    for action in actions:
        if action.kind in SUBMITTERS and gate is None:
            waiting.append(_submitted(ctx, action))
            continue
        collect()
        held = gate.hold(action, outcomes, started) if gate is not None else None
        if held is not None:
            outcomes.append(held)
            continue
        outcomes.append(_run_one(ctx, action))
        _report(controller, outcomes[-1])
    collect()
    return outcomes


# Where background actions are waited on and recorded: few threads, since the work itself (a submitter's
# call) runs elsewhere; a run waits here only for its tickets, each with its own deadline.
BACKGROUND_THREADS = 16
_BACKGROUND = ThreadPoolExecutor(BACKGROUND_THREADS, thread_name_prefix="background")
_RUNNING: set = set()
_RUNNING_LOCK = threading.Lock()


def act_in_background(controller: str, actions: list[Action], ctx: runtime.Context,
                      done: Callable[[list[Outcome]], None]) -> None:
    """Carry ``actions`` on after the call has answered: a submitter's work is handed over now, before this
    returns; the rest runs, and every outcome is reported, on a background thread, which then calls
    ``done(outcomes)``. Preconditions are read again right before each, as in ``act``."""
    carry_on(controller, [_submitted(ctx, action) if action.kind in SUBMITTERS
                          else (lambda action=action: _run_one(ctx, action)) for action in actions], done)


def carry_on(controller: str, waits: list[Callable[[], Outcome]], done: Callable[[list[Outcome]], None]) -> None:
    """Each of ``waits`` waited on and its Outcome reported, then ``done(outcomes)``, on a background thread.
    When every one is a ticket's answer, none holds a thread while it waits: the last to answer hands the
    outcomes over. Each wait ends: a submitter's call has its own deadline."""
    if waits and all(isinstance(w, _Answer) for w in waits):
        answered: list[Outcome | None] = [None] * len(waits)
        left = [len(waits)]
        lock = threading.Lock()
        finished: Future = Future()  # what drain_background waits for meanwhile
        _running(finished)

        def one(index: int, outcome: Outcome) -> None:
            with lock:
                answered[index] = outcome
                left[0] -= 1
                last = left[0] == 0
            if last:
                _finish_in_background(controller, lambda: list(answered), done).add_done_callback(
                    lambda _: finished.set_result(None))

        for index, wait_for in enumerate(waits):
            wait_for.when_done(lambda outcome, index=index: one(index, outcome))
        return
    _finish_in_background(controller, lambda: [wait_for() for wait_for in waits], done)


def _finish_in_background(controller: str, outcomes_of: Callable[[], list[Outcome]],
                          done: Callable[[list[Outcome]], None]) -> Future:
    def finish() -> None:
        outcomes = outcomes_of()
        for outcome in outcomes:
            _report(controller, outcome)
        try:
            done(outcomes)
        except Exception:  # noqa: BLE001 - a thread of its own: nobody else would hear of it
            log.exception("recording background actions failed", extra={"controller": controller})

    return _running(_BACKGROUND.submit(finish))


def _running(future: Future) -> Future:
    with _RUNNING_LOCK:
        _RUNNING.add(future)
    future.add_done_callback(_finished)
    return future


def _finished(future) -> None:
    with _RUNNING_LOCK:
        _RUNNING.discard(future)


def drain_background(timeout: float) -> bool:
    """Wait at most ``timeout`` seconds for the background runs handed over so far (a worker stopping lets
    them finish and record); True when none is left."""
    with _RUNNING_LOCK:
        running = list(_RUNNING)
    return not wait(running, timeout=timeout).not_done if running else True

