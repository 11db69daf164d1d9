"""Disrupted: why the Machine is going, shown, and a forceful EC2 notice acted on at once (pure).

- ``Disrupted=True`` with the reason, from the pool's choice
  (``nodewarden.io/disruption``) or a forceful EC2 notice
  (``nodewarden.io/interruption``); an Event when it turns True. The reason
  goes on the Node too, with the disrupted taint (hooks.machines.termination).
- A spot interruption warning, or the instance stopping or terminated outside
  our own termination, deletes the Machine at once: its instance goes
  whatever we do, so no budget holds it, and its finalizer cordons, detaches
  and drains within the notice (``drain_limit``). A stop while a
  FencingRequest of ours for the Node is under way is fencing's: the pool
  repairs the Machine once the Node's workloads are recovered.
- A stop EC2 no longer agrees with (``signals.outlived``: the instance the
  Machine records is running again, after a stop and start by fencing's
  Reboot or an operator) is retired: the annotation is removed in a patch
  that tests the Machine's uid and the annotation's text, so a later notice
  is recorded again, and ``Disrupted`` is taken off once no signal stands.
"""
from __future__ import annotations

from hooks import conditions, events, machine_names, timefmt
from hooks.ec2_names import GONE_STATES, LEAVING_STATES
from hooks.machines import signals
from hooks.machines.view import MachineView, Progress
from hooks.plan import Action, SameObject

# Kept from a spot notice for the instance's termination itself.
SPOT_TERMINATE_MARGIN_SECONDS = 20.0


def reason(view: MachineView) -> signals.Signal | None:
    """The signal the Machine goes for: a forceful EC2 notice first, else the pool's choice."""
    notice = signals.of(view.obj, signals.INTERRUPTION_ANNOTATION)
    if notice is not None and notice.forceful:
        return notice
    return signals.of(view.obj, signals.DISRUPTION_ANNOTATION)


def keeps_to_pod_budgets(machine: dict) -> bool:
    """Whether the Machine goes by its pool's own choice, which never terminates through a
    PodDisruptionBudget: not a forceful notice (the instance goes whatever we do), not a repair (its Node is
    powered off already), not a deletion by hand or a scale-down (no choice is marked: ``drainTimeout``
    bounds those)."""
    notice = signals.of(machine, signals.INTERRUPTION_ANNOTATION)
    if notice is not None and notice.forceful:
        return False
    choice = signals.of(machine, signals.DISRUPTION_ANNOTATION)
    return choice is not None and choice.reason != signals.REPAIR and not choice.forceful


def outlived(view: MachineView) -> str | None:
    """The interruption annotation, when it is a stop EC2 no longer agrees with about the instance the Machine
    records, as DescribeInstances answered in this call."""
    found = view.instance
    if found is None or view.observed.get("instanceError") or not view.instance_id \
            or found.get("instanceID") != view.instance_id:
        return None
    notice = signals.of(view.obj, signals.INTERRUPTION_ANNOTATION)
    if not signals.outlived(notice, found.get("state"), view.now):
        return None
    return view.obj["metadata"]["annotations"][signals.INTERRUPTION_ANNOTATION]


def step(view: MachineView, progress: Progress, deleting: bool) -> None:
    retired = None if deleting or not view.verified else outlived(view)
    if retired is not None:
        notice = signals.of(view.obj, signals.INTERRUPTION_ANNOTATION)
        progress.actions.append(Action(
            "kube.retire-interruption", view.name, {"uid": view.uid, "value": retired},
            requires=(SameObject(machine_names.MACHINE_KIND, view.name, view.uid),),
            reports=events.normal(events.INTERRUPTION_RETIRED,
                                  f"instance {view.instance_id} is running again after the {notice.reason} of "
                                  f"{timefmt.fmt(notice.at)}: the notice is retired")))
    why = signals.of(view.obj, signals.DISRUPTION_ANNOTATION) if retired is not None else reason(view)
    if why is None:
        # No signal stands (a stop retired, an annotation removed): nothing shows the Machine as going.
        kept, removed = conditions.remove(view.status, machine_names.DISRUPTED)
        if removed:
            view.status["conditions"] = kept["conditions"]
        return
    if progress.condition(machine_names.DISRUPTED, "True", why.reason, f"{why.reason} at {timefmt.fmt(why.at)}"):
        progress.events.append(events.normal(events.MACHINE_DISRUPTED, f"disrupted: {why.reason}"))
    if deleting or not why.forceful or not view.verified:
        return
    if why.reason == signals.INSTANCE_STOPPING:
        if view.observed.get("fencingInFlight") is not False:
            return  # fencing's stop, or not known: the pool repairs it after recovery
        found = view.instance
        if found is None or found.get("state") not in LEAVING_STATES or found.get("instanceID") != view.instance_id:
            return  # EC2 does not say so now: the notice alone is not enough
    elif (view.instance or {}).get("state") in GONE_STATES or not view.instance_id:
        return  # already gone: liveness deletes the Machine
    progress.actions.append(Action(
        "kube.delete-machine", view.name, {"uid": view.uid},
        requires=(SameObject(machine_names.MACHINE_KIND, view.name, view.uid),),
        reports=events.warning(events.MACHINE_INTERRUPTED,
                               f"{why.reason} for instance {view.instance_id} at {timefmt.fmt(why.at)}: "
                               f"deleting the Machine" + (f" before {timefmt.fmt(why.deadline)}"
                                                          if why.deadline else ""))))
    progress.actions.append(Action("metric.machine", view.pool, {"event": "interrupted"}))


def drain_limit(view: MachineView, started_seconds_ago: float | None) -> float:
    """How long termination may drain: ``drainTimeout``, cut short to end before a notice's deadline.

    A spot warning's deadline is when EC2 reclaims the instance (confirmed with EC2 when recorded late), so
    it always cuts the drain. A scheduled change's start that had already passed as the drain began, the
    instance still running, says nothing about when EC2 will act: the drain takes its usual time.
    """
    limit = view.spec.drain_timeout
    notice = signals.of(view.obj, signals.INTERRUPTION_ANNOTATION)
    if notice is None or notice.deadline is None:
        return limit
    elapsed = started_seconds_ago or 0.0
    before_deadline = elapsed + (notice.deadline - view.now).total_seconds() - SPOT_TERMINATE_MARGIN_SECONDS
    if before_deadline <= 0 and notice.reason != signals.SPOT_INTERRUPTION:
        return limit
    return max(0.0, min(limit, before_deadline))
