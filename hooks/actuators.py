"""Every side effect a controller can plan, by Action kind: one actuator each.

Controllers decide (pure) and put Actions in their Plan; ``act`` carries them
out here, idempotently, and reports one Outcome per action. A failure is an
Outcome with the error, never an exception: the controller's settle step
keeps what already happened and retries the rest.
"""
from __future__ import annotations

import logging
from typing import Callable

from hooks import runtime
from hooks.aws import elb, power
from hooks.aws.clients import describe_error as aws_error
from hooks.kube import fencing as kube_fencing
from hooks.kube import pods, taints
from hooks.kube.client import describe_error as kube_error
from hooks.metrics import record_action
from hooks.plan import Action, Outcome

log = logging.getLogger(__name__)
EVENT = "event"  # reported by the controller after acting, not an actuator


def _namespaced(target: str) -> tuple[str, str]:
    namespace, name = target.split("/", 1)
    return namespace, name


def _annotate_node(ctx: runtime.Context, a: Action) -> None:
    from lightkube.resources.core_v1 import Node

    ctx.kube.merge_patch(Node, a.target, {"metadata": {"annotations": a.params["annotations"]}})


ACTUATORS: dict[str, Callable[[runtime.Context, Action], object]] = {
    # ELBv2 target groups: one batched call per group with every port.
    "elbv2.deregister": lambda ctx, a: elb.deregister_targets(
        ctx.aws.client("elbv2", a.params.get("region")), a.target, a.params["instance"], a.params["ports"]),
    "elbv2.register": lambda ctx, a: elb.register_targets(
        ctx.aws.client("elbv2", a.params.get("region")), a.target, a.params["instance"], a.params["ports"]),
    # Classic ELBs.
    "elb.deregister": lambda ctx, a: elb.deregister_instance(
        ctx.aws.client("elb", a.params.get("region")), a.target, a.params["instance"]),
    "elb.register": lambda ctx, a: elb.register_instance(
        ctx.aws.client("elb", a.params.get("region")), a.target, a.params["instance"]),
    # EC2 power for fencing.
    "aws.stop": lambda ctx, a: power.stop(ctx.aws.client("ec2", a.params.get("region") or None), a.target),
    "aws.start": lambda ctx, a: power.start(ctx.aws.client("ec2", a.params.get("region") or None), a.target),
    # Kubernetes: what a hook response cannot change.
    "kube.taint": lambda ctx, a: taints.add(ctx.kube, a.target, a.params["key"], a.params["effect"],
                                            a.params.get("value"), uid=a.params.get("uid")),
    "kube.untaint": lambda ctx, a: taints.remove(ctx.kube, a.target, a.params["key"]),
    "kube.evict": lambda ctx, a: pods.evict(ctx.kube, *_namespaced(a.target)),
    "kube.annotate-node": _annotate_node,
    "kube.force-delete-pod": lambda ctx, a: kube_fencing.force_delete_pod(
        ctx.kube, *_namespaced(a.target), a.params.get("uid")),
    "kube.delete-volume-attachment": lambda ctx, a: kube_fencing.delete_volume_attachment(ctx.kube, a.target),
}


def act(controller: str, actions: list[Action], ctx: runtime.Context) -> list[Outcome]:
    """Run every non-event action in order; one Outcome each, errors as text."""
    outcomes = []
    for action in actions:
        if action.kind == EVENT:
            continue
        try:
            outcome = Outcome(action, True, result=ACTUATORS[action.kind](ctx, action))
        except Exception as exc:  # noqa: BLE001 - every failure becomes progress-preserving state
            message = kube_error(exc) if action.kind.startswith("kube.") else aws_error(exc)
            outcome = Outcome(action, False, error=message)
        outcomes.append(outcome)
        record_action(controller, action.kind, outcome.ok)
        log.info("action", extra={"controller": controller, "kind": action.kind, "target": action.target,
                                  "ok": outcome.ok, "error": outcome.error or None})
    return outcomes


def failure_text(outcomes: list[Outcome]) -> str:
    """The failed actions, for an annotation or status field."""
    return "; ".join(f"{o.action.kind} {o.action.target}: {o.error}" for o in outcomes if not o.ok)[:2000]
