"""Liveness: a Machine that cannot become a Node is deleted, so its pool replaces it (pure).

- Not Registered within ``registrationTTL`` of its launch (or of its
  creation, when the launch never succeeded).
- Its recorded instance is gone (terminated or unknown to EC2) outside our
  own termination, once it has been launched longer than the window in which
  EC2 may not show a new instance yet.

Deletion goes through the Machine's finalizer, which terminates the instance.
"""
from __future__ import annotations

from hooks import conditions, events, timefmt
from hooks.aws import instances
from hooks.machines import names
from hooks.machines.view import MachineView, Progress
from hooks.plan import Action, SameObject


def _delete(view: MachineView, progress: Progress, reason: str, message: str, metric: str) -> None:
    progress.actions.append(Action(
        "kube.delete-machine", view.name, {"uid": view.uid},
        requires=(SameObject(names.MACHINE_KIND, view.name, view.uid),),
        reports=events.warning(reason, message)))
    progress.actions.append(Action("metric.machine", view.pool, {"event": metric}))


def step(view: MachineView, progress: Progress, settings) -> None:
    if conditions.is_true(view.status, names.REGISTERED):
        return _instance_gone(view, progress, settings)
    started = timefmt.parse(view.status.get("launchedAt")) or view.created
    age = (view.now - started).total_seconds()
    ttl = view.spec.registration_ttl
    if age >= ttl:
        _delete(view, progress, events.REGISTRATION_TIMED_OUT,
                f"no Node registered within the registrationTTL of {ttl:g}s: deleting the Machine",
                "registration-timeout")
        return
    progress.again_in(max(0.5, ttl - age))
    _instance_gone(view, progress, settings)


def _instance_gone(view: MachineView, progress: Progress, settings) -> None:
    if not view.instance_id or view.observed.get("instanceError"):
        return
    found = view.instance
    if found is not None and found.get("state") not in instances.GONE_STATES:
        return
    launched = view.since("launchedAt")
    if launched is None or launched < settings.machine_launch_visibility_seconds:
        progress.again_in(settings.machine_poll_seconds)
        return  # too new to be sure EC2 would show it
    state = found.get("state") if found else "unknown to EC2"
    _delete(view, progress, events.INSTANCE_GONE,
            f"instance {view.instance_id} is {state}: deleting the Machine so its pool replaces it", "instance-gone")
