"""Launch: exactly one instance per Machine, whatever crashes in between (pure).

The order that makes it hold:

1. Look for every instance tagged with the Machine's UID (gather does, on
   every call of the Machine's life). Found and none recorded yet: record the
   oldest. Any other tagged instance than the one recorded (two launches
   raced, or EC2 showed one late) is terminated.
2. None found and no launch request recorded in the last
   ``CALL_WINDOW_SECONDS``: record ``launchRequestedAt`` and launch on the
   next call. The stamp is how termination knows a launch may have happened
   that DescribeInstances cannot show yet (AWS is eventually consistent).
3. Otherwise RunInstances, tagged at creation, with a ClientToken per
   (Machine, launch request, candidate); the instance it returns is recorded.
   The user data was rendered by gather, for the Machine the API server
   confirmed, within a time and size bound (hooks/machines/userdata.py,
   hooks/template_sandbox.py).

A crash after RunInstances and before the record is step 1 on the next call.
"""
from __future__ import annotations

from hooks import events, timefmt
from hooks.ec2_names import GONE_STATES
from hooks.machines import capacity, names, spec
from hooks.machines.view import MachineView, Progress
from hooks.plan import Action, Change, InstanceOf

# A recorded launch request older than this is stale: it is stamped again before launching.
CALL_WINDOW_SECONDS = 30.0
_RECORDED = ("instanceID", "providerID", "instanceType", "zone", "imageId")


def record_instance(view: MachineView, progress: Progress, found: dict) -> None:
    recorded_before = bool(view.instance_id)
    for key in _RECORDED:
        if found.get(key):
            view.status[key] = found[key]
    if found.get("launchTime") and not view.status.get("launchedAt"):
        view.status["launchedAt"] = found["launchTime"]
    progress.condition(names.LAUNCHED, "True", "InstanceLaunched",
                       f"instance {found['instanceID']} ({found.get('instanceType')}) in {found.get('zone')}")
    if not recorded_before:
        # Launched by an earlier call whose record was lost (a crash): found by the UID tag instead.
        progress.events.append(events.normal(events.INSTANCE_FOUND,
                                             f"instance {found['instanceID']} found by its "
                                             f"{names.TAG_MACHINE_UID} tag and recorded"))


def request_fresh(status: dict, now) -> bool:
    """A launch request was recorded within the call window: this call may call RunInstances."""
    requested = timefmt.seconds_since(status.get("launchRequestedAt"), now)
    return requested is not None and 0 <= requested <= CALL_WINDOW_SECONDS


def terminate_duplicates(view: MachineView, progress: Progress, settings) -> None:
    """Terminate every instance tagged with the Machine's UID but the one it keeps (gather tells them apart)."""
    for extra in view.observed.get("duplicates") or []:
        if extra.get("state") in GONE_STATES:
            continue  # already going
        # Ours by tag (checked again right before), never the one recorded: a raced or late-shown launch.
        progress.actions.append(Action(
            "ec2.terminate", extra["instanceID"], {"region": settings.aws_region},
            requires=(InstanceOf(extra["instanceID"], view.uid, settings.aws_region or None),),
            reports=events.warning(events.DUPLICATE_INSTANCE,
                                   f"instance {extra['instanceID']} was a second launch for this Machine")))


def step(view: MachineView, progress: Progress, settings, cluster_name: str) -> None:
    observed = view.observed
    if observed.get("instanceError"):
        progress.error(f"instance look-up: {observed['instanceError']}", settings.error_backoff_seconds)
        return
    terminate_duplicates(view, progress, settings)
    if view.instance is not None:
        record_instance(view, progress, view.instance)
        _capacity(view, progress, settings)
        return
    if view.instance_id:
        return  # recorded before; liveness decides what its absence means
    if view.obj["metadata"].get("deletionTimestamp"):
        return
    if not cluster_name:
        progress.error("NODEWARDEN_CLUSTER_NAME is not set: instances cannot be tagged for the cluster",
                       settings.error_backoff_max_seconds)
        return
    if not request_fresh(view.status, view.now):
        view.status["launchRequestedAt"] = timefmt.fmt(view.now)
        progress.condition(names.LAUNCHED, "False", "Launching", "launching an instance")
        progress.events.append(events.normal(events.LAUNCH_REQUESTED, "launching an instance"))
        progress.again_in(0.2)
        return
    if observed.get("userDataError"):
        progress.condition(names.LAUNCHED, "False", events.INVALID_SPEC, observed["userDataError"])
        progress.error(observed["userDataError"], settings.error_backoff_max_seconds)
        return
    if not isinstance(observed.get("userData"), str):
        progress.error("the user data was not rendered", settings.error_backoff_seconds)
        return
    if observed.get("subnetsError"):
        progress.error(f"subnets: {observed['subnetsError']}", settings.error_backoff_seconds)
        return
    subnets = observed.get("subnets") or []
    if not subnets:
        progress.error("no subnet matches the Machine's subnets or subnetSelector", settings.error_backoff_max_seconds)
        return
    candidates = [{"instanceType": t, "subnetID": s["id"]} for t in view.spec.instance_types for s in subnets]
    params = {
        "region": settings.aws_region, "uid": view.uid, "launchRequestedAt": view.status["launchRequestedAt"],
        "candidates": candidates,
        "tags": names.instance_tags(cluster_name, view.pool, view.name, view.uid),
        "imageId": view.spec.image_id, "launchTemplate": view.spec.launch_template,
        "securityGroups": list(view.spec.security_groups), "instanceProfile": view.spec.instance_profile,
        "userData": observed["userData"],
    }
    if view.spec.capacity_type == spec.SPOT:
        params["capacityType"] = spec.SPOT
    record = tuple(Change(("status", key), result=key) for key in _RECORDED) + (
        Change(("status", "launchedAt"), result="launchTime"),)
    progress.actions.append(Action("ec2.launch", view.name, params, record=record,
                                   reports=events.normal(events.INSTANCE_LAUNCHED, "instance launched")))
    progress.actions.append(Action("metric.machine", view.pool, {"event": "launched"}))
    progress.again_in(settings.machine_poll_seconds)


def _capacity(view: MachineView, progress: Progress, settings) -> None:
    """Capacity and allocatable from the instance type: known before the Node exists."""
    if view.status.get("capacity") or not view.status.get("instanceType"):
        return
    facts = (view.observed.get("types") or {}).get(view.status["instanceType"])
    cap, alloc = capacity.resources(facts)
    if cap:
        view.status["capacity"], view.status["allocatable"] = cap, alloc
    elif view.observed.get("typesError"):
        progress.error(f"instance type: {view.observed['typesError']}", settings.error_backoff_seconds)
