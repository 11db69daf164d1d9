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
"""
from __future__ import annotations

from hooks import events, timefmt
from hooks.aws import instances
from hooks.machines import names, signals
from hooks.machines.view import MachineView, Progress
from hooks.plan import Action, SameObject

# Kept from a spot notice for the instance's termination itself.
SPOT_TERMINATE_MARGIN_SECONDS = 20.0
_STOPPING = ("stopping", "stopped", "shutting-down", "terminated")


def reason(view: MachineView) -> signals.Signal | None:
    """The signal the Machine goes for: a forceful EC2 notice first, else the pool's choice."""
    notice = signals.of(view.obj, signals.INTERRUPTION_ANNOTATION)
    if notice is not None and notice.forceful:
        return notice
    return signals.of(view.obj, signals.DISRUPTION_ANNOTATION)


def step(view: MachineView, progress: Progress, deleting: bool) -> None:
    why = reason(view)
    if why is None:
        return
    if progress.condition(names.DISRUPTED, "True", why.reason, f"{why.reason} at {timefmt.fmt(why.at)}"):
        progress.events.append(events.normal(events.MACHINE_DISRUPTED, f"disrupted: {why.reason}"))
    if deleting or not why.forceful or not view.verified:
        return
    if why.reason == signals.INSTANCE_STOPPING:
        if view.observed.get("fencingInFlight") is not False:
            return  # fencing's stop, or not known: the pool repairs it after recovery
        found = view.instance
        if found is None or found.get("state") not in _STOPPING or found.get("instanceID") != view.instance_id:
            return  # EC2 does not say so now: the notice alone is not enough
    elif (view.instance or {}).get("state") in instances.GONE_STATES or not view.instance_id:
        return  # already gone: liveness deletes the Machine
    progress.actions.append(Action(
        "kube.delete-machine", view.name, {"uid": view.uid},
        requires=(SameObject(names.MACHINE_KIND, view.name, view.uid),),
        reports=events.warning(events.MACHINE_INTERRUPTED,
                               f"{why.reason} for instance {view.instance_id} at {timefmt.fmt(why.at)}: "
                               f"deleting the Machine" + (f" before {timefmt.fmt(why.deadline)}"
                                                          if why.deadline else ""))))
    progress.actions.append(Action("metric.machine", view.pool, {"event": "interrupted"}))


def drain_limit(view: MachineView, started_seconds_ago: float | None) -> float:
    """How long termination may drain: ``drainTimeout``, cut short to end before a spot notice's deadline."""
    limit = view.spec.drain_timeout
    notice = signals.of(view.obj, signals.INTERRUPTION_ANNOTATION)
    if notice is None or notice.deadline is None:
        return limit
    elapsed = started_seconds_ago or 0.0
    left = (notice.deadline - view.now).total_seconds() - SPOT_TERMINATE_MARGIN_SECONDS
    return max(0.0, min(limit, elapsed + left))
