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

The candidates are every instance type in every subnet, in order of
preference. One action each, at most ``RUN_INSTANCES_PER_CALL`` a call, and
``Candidates`` runs them in turn: the next only while none launched, every
one before it was refused for capacity and the call's time allows. A
candidate refused for capacity is recorded (``status.launchRefusals``:
instance type, subnet, zone, capacity type, EC2's code, when) and not asked
for again for ``REFUSAL_MEMORY_SECONDS``, so the next call goes on with the
rest; a throttled or failed call is no refusal: the launch stops there and a
later call asks again. Once every candidate is refused, ``Launched`` is
False with the reason ``InsufficientCapacity``: the Machine has no capacity
and asks for none again, provisioning gives its pods to other Machines and
avoids the refused offerings while they are remembered, and liveness deletes
the Machine once they are forgotten.
"""
from __future__ import annotations

import datetime as dt

from hooks import conditions, events, machine_names, timefmt
from hooks.ec2_names import CAPACITY_ERRORS, GONE_STATES
from hooks.machines import capacity, spec
from hooks.machines.view import MachineView, Progress
from hooks.plan import DEFERRED, Action, Change, InstanceOf, Outcome, TimeAllowance

# A recorded launch request older than this is stale: it is stamped again before launching.
CALL_WINDOW_SECONDS = 30.0
# Most candidates one call plans (and so RunInstances calls it makes); the next call goes on with the rest.
RUN_INSTANCES_PER_CALL = 8
# How long a refused candidate is not asked for again, and its offering avoided by provisioning (as long as
# Karpenter keeps an offering unavailable after a capacity error).
REFUSAL_MEMORY_SECONDS = 180.0
# The next call after one that stamped a launch request, or whose candidates were all refused.
NEXT_CALL_SECONDS = 0.2
LAUNCH = "ec2.launch"
REFUSALS = "launchRefusals"
REFUSAL_KEYS = ("instanceType", "subnetID", "zone", "capacityType", "code", "at")
_RECORDED = ("instanceID", "providerID", "instanceType", "zone", "imageId")
_LAUNCHED_METRIC = ("metric.machine", "launched")


def record_instance(view: MachineView, progress: Progress, found: dict) -> None:
    recorded_before = bool(view.instance_id)
    for key in _RECORDED:
        if found.get(key):
            view.status[key] = found[key]
    if found.get("launchTime") and not view.status.get("launchedAt"):
        view.status["launchedAt"] = found["launchTime"]
    progress.condition(machine_names.LAUNCHED, "True", "InstanceLaunched",
                       f"instance {found['instanceID']} ({found.get('instanceType')}) in {found.get('zone')}")
    if not recorded_before:
        # Launched by an earlier call whose record was lost (a crash): found by the UID tag instead.
        progress.events.append(events.normal(events.INSTANCE_FOUND,
                                             f"instance {found['instanceID']} found by its "
                                             f"{machine_names.TAG_MACHINE_UID} tag and recorded"))


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


# --------------------------------------------------------------------------- refusals


def refusals(status: dict) -> list[dict]:
    """The Machine's recorded refusals; a malformed entry reads as none."""
    raw = status.get(REFUSALS) if isinstance(status, dict) else None
    if not isinstance(raw, list):
        return []
    return [dict(r) for r in raw if isinstance(r, dict) and all(isinstance(r.get(k), str) for k in REFUSAL_KEYS)
            and timefmt.parse(r["at"]) is not None]


def remembered(status: dict, now: dt.datetime) -> list[dict]:
    """The refusals of the last ``REFUSAL_MEMORY_SECONDS``."""
    return [r for r in refusals(status) if timefmt.seconds_since(r["at"], now) < REFUSAL_MEMORY_SECONDS]


def forgotten_in(status: dict, now: dt.datetime) -> float:
    """Seconds until the newest refusal is forgotten; 0 when none is remembered."""
    ages = [timefmt.seconds_since(r["at"], now) for r in remembered(status, now)]
    return max(0.0, REFUSAL_MEMORY_SECONDS - min(ages)) if ages else 0.0


def no_capacity(status: dict) -> bool:
    """EC2 refused every candidate of the Machine's launch for capacity, and it has no instance."""
    launched = conditions.find(status, machine_names.LAUNCHED) or {}
    return not status.get("instanceID") and launched.get("status") == "False" \
        and launched.get("reason") == events.INSUFFICIENT_CAPACITY


def refused(outcome: Outcome) -> bool:
    """RunInstances refused the outcome's candidate for capacity (not a throttled or failed call)."""
    return outcome.action.kind == LAUNCH and not outcome.ok and outcome.code in CAPACITY_ERRORS


def record_refusals(status: dict, outcomes: list[Outcome], now: dt.datetime) -> dict:
    """``status`` with the candidates this call's launch refused recorded (over an older entry for the same)."""
    new = []
    for outcome in outcomes:
        if refused(outcome):
            params = outcome.action.params
            candidate = params["candidate"]
            new.append({"instanceType": candidate["instanceType"], "subnetID": candidate.get("subnetID") or "",
                        "zone": candidate.get("zone") or "",
                        "capacityType": params.get("capacityType") or spec.ON_DEMAND,
                        "code": outcome.code, "at": timefmt.fmt(now)})
    if not new:
        return status
    again = {(r["instanceType"], r["subnetID"]) for r in new}
    kept = [r for r in refusals(status) if (r["instanceType"], r["subnetID"]) not in again]
    return {**status, REFUSALS: kept + new}


class Candidates(TimeAllowance):
    """A launch's RunInstances calls within one hook call, in order: the next candidate only while none
    launched and every one before was refused for capacity (a throttled or failed call stops the launch
    until a later call), and while the call's time allows; the first always runs. The launch's metric
    counts only a launch that happened."""

    def hold(self, action: Action, outcomes: list[Outcome], started: float) -> Outcome | None:
        tried = [o for o in outcomes if o.action.kind == LAUNCH]
        launched = any(o.ok for o in tried)
        if (action.kind, action.params.get("event")) == _LAUNCHED_METRIC:
            return None if launched else Outcome(action, False, "nothing launched", code=DEFERRED)
        if action.kind != LAUNCH:
            return None
        if launched:
            return Outcome(action, False, "not asked: another candidate launched", code=DEFERRED)
        stopped = next((o for o in tried if not refused(o)), None)
        if stopped is not None:
            return Outcome(action, False, f"put off to a later call: RunInstances failed ({stopped.code})",
                           code=DEFERRED)
        return super().hold(action, tried, started)


# --------------------------------------------------------------------------- the step


def step(view: MachineView, progress: Progress, settings, cluster_name: str) -> None:
    observed = view.observed
    _forget_refusals(view)
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
    if no_capacity(view.status):
        return  # every candidate refused: nothing is asked again, liveness deletes it once they are forgotten
    if not cluster_name:
        progress.error("NODEWARDEN_CLUSTER_NAME is not set: instances cannot be tagged for the cluster",
                       settings.error_backoff_max_seconds)
        return
    if not request_fresh(view.status, view.now):
        view.status["launchRequestedAt"] = timefmt.fmt(view.now)
        progress.condition(machine_names.LAUNCHED, "False", "Launching", "launching an instance")
        progress.events.append(events.normal(events.LAUNCH_REQUESTED, "launching an instance"))
        progress.again_in(NEXT_CALL_SECONDS)
        return
    if observed.get("userDataError"):
        progress.condition(machine_names.LAUNCHED, "False", events.INVALID_SPEC, observed["userDataError"])
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
    every = [{"instanceType": t, "subnetID": s["id"], "zone": s.get("zone") or ""}
             for t in view.spec.instance_types for s in subnets]
    refused_before = {(r["instanceType"], r["subnetID"]) for r in refusals(view.status)}
    candidates = [c for c in every if (c["instanceType"], c["subnetID"]) not in refused_before]
    if not candidates:
        _refused_everywhere(view, progress, settings, len(every))
        return
    params = {
        "region": settings.aws_region, "uid": view.uid, "launchRequestedAt": view.status["launchRequestedAt"],
        "tags": machine_names.instance_tags(cluster_name, view.pool, view.name, view.uid),
        "imageId": view.spec.image_id, "launchTemplate": view.spec.launch_template,
        "securityGroups": list(view.spec.security_groups), "instanceProfile": view.spec.instance_profile,
        "userData": observed["userData"], "capacityType": view.spec.capacity_type,
    }
    record = tuple(Change(("status", key), result=key) for key in _RECORDED) + (
        Change(("status", "launchedAt"), result="launchTime"),)
    for candidate in candidates[:RUN_INSTANCES_PER_CALL]:
        progress.actions.append(Action(LAUNCH, view.name, {**params, "candidate": candidate}, record=record,
                                       reports=events.normal(events.INSTANCE_LAUNCHED, "instance launched")))
    kind, event = _LAUNCHED_METRIC
    progress.actions.append(Action(kind, view.pool, {"event": event}))
    progress.gate = Candidates(settings.machine_launch_budget_seconds)
    progress.again_in(settings.machine_poll_seconds)


def _forget_refusals(view: MachineView) -> None:
    """Refusals older than the memory are dropped (and malformed ones)."""
    kept = remembered(view.status, view.now)
    if kept:
        view.status[REFUSALS] = kept
    else:
        view.status.pop(REFUSALS, None)


def _refused_everywhere(view: MachineView, progress: Progress, settings, count: int) -> None:
    last = sorted(refusals(view.status), key=lambda r: r["at"])[-1]  # of the same second, the last recorded
    message = (f"EC2 refused all {count} candidates (instance type and subnet) for capacity; last: "
               f"{last['instanceType']} in {last['subnetID']} ({last['zone']}): {last['code']}")
    progress.condition(machine_names.LAUNCHED, "False", events.INSUFFICIENT_CAPACITY, message)
    progress.events.append(events.warning(events.INSUFFICIENT_CAPACITY, message))
    progress.error(f"no capacity: {message}", settings.error_backoff_max_seconds)


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
