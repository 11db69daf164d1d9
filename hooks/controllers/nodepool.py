"""nodepool: keep ``replicas`` Machines, and terminate instances no Machine owns.

CompositeController on NodePool with Machines as children (created with the
pool's owner reference by Metacontroller, so they are owned from the start).
Every call is decided on the NodePool read fresh from the API server, and on
its Machines as the API server lists them (Metacontroller's cache can be a
step behind its own deletes): scale-down removes exactly the surplus, Machines
not yet Registered first, then the oldest; each leaves through its own
finalizer (cordon, drain, terminate). Deleting the pool deletes every Machine
and finishes once none is left and no instance tagged for the pool remains.
On a body alone nothing is looked up and the children are returned as they
are.

Leaked instances: tagged for this cluster and pool, with a Machine-UID tag
that names no Machine, recorded by no Machine, launched longer than
NODEWARDEN_LEAKED_INSTANCE_GRACE_SECONDS ago. Each is terminated only after
its tags, its age and the API server's Machines are read again right before
(the Orphaned precondition). An instance without our tags, or another
cluster's or pool's, is never a candidate.
"""
from __future__ import annotations

import datetime as dt
import logging
import sys

from hooks import bounds, conditions, events, pipeline, runtime, timefmt
from hooks.aws import instances
from hooks.aws.clients import describe_error as aws_error
from hooks.config import Settings
from hooks.contract import HookRequest, RequestError, composite_response
from hooks.kube import fresh
from hooks.kube import machines as kube_machines
from hooks.kube.client import describe_error as kube_error
from hooks.machines import names, pool, spec
from hooks.plan import Action, Change, Orphaned, Outcome, Plan

NAME = "nodepool"
FAILURE_REASON = events.MACHINE_ACTION_FAILED
log = logging.getLogger(__name__)


def _machines(request: HookRequest) -> list[dict]:
    return pool.machines_of(request.children.of_kind(names.MACHINE_KIND, names.GROUP))


def _check_due(request: HookRequest, settings: Settings, now: dt.datetime) -> bool:
    if request.finalizing:
        return True
    since = timefmt.seconds_since((request.parent.get("status") or {}).get("lastLeakCheck")
                                  if isinstance(request.parent.get("status"), dict) else None, now)
    return since is None or since < 0 or since >= settings.leaked_instance_check_seconds


def _owned_by(machine: dict, pool_uid: str) -> bool:
    refs = (machine.get("metadata") or {}).get("ownerReferences") or []
    return any(isinstance(r, dict) and r.get("uid") == pool_uid and r.get("controller") for r in refs)


def gather(request: HookRequest, ctx: runtime.Context, now: dt.datetime) -> dict:
    """The look-ups of a verified call; a body alone makes none (decide asks for verification)."""
    observed: dict = {}
    if not request.verified:
        return observed
    try:
        # What the pool has, as the API server says now: Metacontroller's cache may lag its own deletes.
        listed = kube_machines.listed(ctx.kube, request.name)
        observed["machineUIDs"] = sorted((m.get("metadata") or {}).get("uid") or "" for m in listed)
        observed["machines"] = [m for m in listed if _owned_by(m, request.meta.get("uid") or "")]
    except Exception as exc:  # noqa: BLE001
        observed["machinesError"] = kube_error(exc)
    if not ctx.settings.cluster_name or not _check_due(request, ctx.settings, now):
        return observed
    try:
        ec2 = ctx.aws.client("ec2", ctx.settings.aws_region or None)
        observed["instances"] = instances.of_pool(ec2, ctx.settings.cluster_name, request.name)
    except Exception as exc:  # noqa: BLE001
        observed["instancesError"] = aws_error(exc)
    return observed


def _status(request: HookRequest, machines: list[dict]) -> dict:
    previous = request.parent.get("status") if isinstance(request.parent.get("status"), dict) else {}
    status = {
        "observedGeneration": request.meta.get("generation") or 0,
        "replicas": sum(1 for m in machines if not m["metadata"]["deletionTimestamp"]),
        "machines": pool.by_phase(machines),
        "leakedInstancesTerminated": bounds.status_counter(previous, "leakedInstancesTerminated"),
    }
    if isinstance(previous.get("lastLeakCheck"), str):
        status["lastLeakCheck"] = previous["lastLeakCheck"]
    if isinstance(previous.get("conditions"), list):
        status["conditions"] = [c for c in previous["conditions"] if isinstance(c, dict) and c.get("type") == "Ready"]
    return status


def decide(request: HookRequest, settings: Settings, now: dt.datetime, observed: dict) -> Plan:
    machines = _machines(request)
    if not request.verified:
        # A body is a hint: the Machines stay as they are until the API server confirms the pool.
        return Plan(composite_response(status=_status(request, machines), children=[pool.keep(m) for m in machines],
                                       resync_after=settings.error_backoff_seconds,
                                       finalized=False if request.finalizing else None), verify=True)
    previous = request.parent.get("status") if isinstance(request.parent.get("status"), dict) else {}
    stamp = timefmt.fmt(now)
    current = pool.machines_of(observed["machines"]) if "machines" in observed else None
    status = _status(request, current if current is not None else machines)
    counts = status["machines"]
    said: list[events.Event] = []
    try:
        pool_spec = spec.pool(request.parent)
    except RequestError as exc:
        # Never removes a Machine over a spec it cannot read: the children stay as they are.
        kept, _ = conditions.set(previous, "Ready", "False", events.INVALID_SPEC, str(exc), stamp)
        status["conditions"] = kept["conditions"]
        children = [pool.keep(m) for m in machines] if not request.finalizing else []
        return Plan(composite_response(status=status, children=children,
                                       finalized=(not machines) if request.finalizing else None),
                    events=[events.warning(events.INVALID_SPEC, str(exc))])
    if observed.get("machinesError") and not request.finalizing:
        # Without the API server's count a scale-down could remove one Machine too many: change nothing.
        return Plan(composite_response(status=status, children=[pool.keep(m) for m in machines],
                                       resync_after=settings.error_backoff_seconds),
                    events=[events.warning(events.MACHINE_ACTION_FAILED, f"Machines: {observed['machinesError']}")])
    if request.finalizing:
        children, created, removed = [], [], [m["metadata"]["name"] for m in machines
                                              if not m["metadata"]["deletionTimestamp"]]
    else:
        children, created, removed = pool.desired(request.name, str(request.meta.get("uid") or ""), pool_spec,
                                                  machines, current)
    for name in created:
        said.append(events.normal(events.MACHINE_CREATED, f"Machine {name} created"))
    for name in removed:
        said.append(events.normal(events.MACHINE_REMOVED, f"Machine {name} removed"))
    actions = _leaks(request, settings, now, observed, machines + (current or []), status, said)
    ready = counts["Initialized"] >= pool_spec.replicas and not request.finalizing
    kept, _ = conditions.set(previous, "Ready", "True" if ready else "False",
                             "MachinesInitialized" if ready else "MachinesPending",
                             f"{counts['Initialized']} of {pool_spec.replicas} Machines initialized", stamp)
    status["conditions"] = [c for c in kept["conditions"] if c.get("type") == "Ready"]
    finalized = None
    if request.finalizing:
        # Done once no Machine is left and EC2 (asked just now) has no instance of the pool.
        finalized = not machines and "instances" in observed and not observed["instances"] \
            and not observed.get("machineUIDs") and not observed.get("machinesError")
    resync = settings.machine_poll_seconds if (request.finalizing or created or removed) \
        else settings.leaked_instance_check_seconds
    return Plan(composite_response(status=status, children=children, resync_after=resync, finalized=finalized),
                actions, said)


def _leaks(request: HookRequest, settings: Settings, now: dt.datetime, observed: dict, machines: list[dict],
           status: dict, said: list) -> list[Action]:
    if observed.get("instancesError"):
        said.append(events.warning(events.MACHINE_ACTION_FAILED, f"leaked-instance check: {observed['instancesError']}"))
        return []
    if "instances" not in observed:
        return []
    status["lastLeakCheck"] = timefmt.fmt(now)
    uids = {m["metadata"]["uid"] for m in machines}
    # A deleted pool has no Machine left to launch for it: no grace once its last Machine is gone.
    grace = 0.0 if request.finalizing and not machines else settings.leaked_instance_grace_seconds
    actions = []
    for instance in pool.leaked(observed["instances"], uids, now, grace, pool.recorded_instances(machines)):
        iid = instance["instanceID"]
        actions.append(Action(
            "ec2.terminate", iid, {"region": settings.aws_region},
            requires=(Orphaned(iid, settings.cluster_name, request.name, grace, settings.aws_region or None),),
            record=(Change(("status", "leakedInstancesTerminated"), add=1),),
            reports=events.warning(events.LEAKED_INSTANCE_TERMINATED,
                                   f"instance {iid} (Machine uid {instance['tags'].get(names.TAG_MACHINE_UID)}) "
                                   f"had no Machine: terminated")))
        actions.append(Action("metric.machine", request.name, {"event": "leaked-instance-terminated"}))
    return actions


needs_verification = pipeline.by_plan


def verify(request: HookRequest, ctx: runtime.Context) -> HookRequest:
    return fresh.same_parent(request, ctx.kube)


def unverified(request: HookRequest, plan: Plan, ctx: runtime.Context, reason: str) -> Plan:
    """The children as they are (decide on a body changes none), and nothing finalized."""
    response = dict(plan.response)
    response["finalized"] = False
    return Plan(response)


def settle(request: HookRequest, plan: Plan, outcomes: list[Outcome], settings: Settings,
           now: dt.datetime) -> Plan:
    response = dict(plan.response)
    if response.get("finalized"):
        response["finalized"] = False
    response["resyncAfterSeconds"] = float(settings.error_backoff_seconds)
    return Plan(response, plan.actions, plan.events, basis=plan.basis)


def sync(request: HookRequest, ctx: runtime.Context | None = None) -> dict:
    return pipeline.run(sys.modules[__name__], request, ctx)


def finalize(request: HookRequest, ctx: runtime.Context | None = None) -> dict:
    return pipeline.run(sys.modules[__name__], request, ctx)
