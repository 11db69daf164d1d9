"""Liveness: a Machine that cannot become (or stay) a Node is deleted, so its pool replaces it (pure).

- Never registered within ``registrationTTL`` of its launch (or of its
  creation, when the launch never succeeded: a launch that is only slow, or
  that keeps failing for another reason than capacity, ends there).
  Registered means joined to the Node that names its instance; Initialized
  is not part of it.
- EC2 refused every candidate of its launch for capacity (hooks.machines.launch),
  once its refusals are forgotten: until then they kept its offerings from
  the pool's new Machines.
- Registered once, and the API server says its recorded Node is gone (a 404,
  or another uid under that name) with no Node naming its instance in its
  place: deleting the Node deletes the Machine, as with Karpenter. A Node
  merely not seen in one call is not gone.
- Its recorded instance is gone (terminated or unknown to EC2) outside our
  own termination, once it has been launched longer than the window in which
  EC2 may not show a new instance yet.

Deletion goes through the Machine's finalizer, which terminates the instance.
"""
from __future__ import annotations

from hooks import conditions, events, machine_names, timefmt
from hooks.ec2_names import GONE_STATES
from hooks.machines import launch
from hooks.machines.registration import Sight
from hooks.machines.view import MachineView, Progress
from hooks.plan import Action, SameObject


def _delete(view: MachineView, progress: Progress, reason: str, message: str, metric: str) -> None:
    progress.actions.append(Action(
        "kube.delete-machine", view.name, {"uid": view.uid},
        requires=(SameObject(machine_names.MACHINE_KIND, view.name, view.uid),),
        reports=events.warning(reason, message)))
    progress.actions.append(Action("metric.machine", view.pool, {"event": metric}))


def step(view: MachineView, progress: Progress, seen: Sight, settings) -> None:
    if seen.lost and seen.node is None:
        _delete(view, progress, events.NODE_GONE,
                f"Node {view.status.get('nodeName')} ({view.status.get('nodeUID')}) is gone: deleting the Machine",
                "node-gone")
        return
    if conditions.is_true(view.status, machine_names.REGISTERED) or view.status.get("nodeUID"):
        return _instance_gone(view, progress, settings)
    started = timefmt.parse(view.status.get("launchedAt")) or view.created
    age = (view.now - started).total_seconds()
    ttl = view.spec.registration_ttl
    if age >= ttl:
        _delete(view, progress, events.REGISTRATION_TIMED_OUT,
                f"no Node registered within the registrationTTL of {ttl:g}s: deleting the Machine",
                "registration-timeout")
        return
    if launch.no_capacity(view.status):
        left = launch.forgotten_in(view.status, view.now)
        if left <= 0:
            _delete(view, progress, events.INSUFFICIENT_CAPACITY,
                    "EC2 had no capacity for any of its instance types and subnets: deleting the Machine so its "
                    "pool replaces it", "no-capacity")
            return
        progress.again_in(left)
    progress.again_in(max(0.5, ttl - age))
    _instance_gone(view, progress, settings)


def _instance_gone(view: MachineView, progress: Progress, settings) -> None:
    if not view.instance_id or view.observed.get("instanceError"):
        return
    found = view.instance
    if found is not None and found.get("state") not in GONE_STATES:
        return
    launched = view.since("launchedAt")
    if launched is None or launched < settings.machine_launch_visibility_seconds:
        progress.again_in(settings.machine_poll_seconds)
        return  # too new to be sure EC2 would show it
    state = found.get("state") if found else "unknown to EC2"
    _delete(view, progress, events.INSTANCE_GONE,
            f"instance {view.instance_id} is {state}: deleting the Machine so its pool replaces it", "instance-gone")
