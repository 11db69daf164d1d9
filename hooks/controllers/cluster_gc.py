"""cluster-gc: a deleted cluster leaves nothing behind in AWS.

DecoratorController with a finalize hook on CAPA's ``AWSCluster`` and
``AWSManagedControlPlane`` (CAPA's external resource garbage collection
proposal). The load balancers, target groups and security groups that the
workload cluster's cloud controller made keep the VPC alive; the finalizer
holds the cluster object until they are gone.

sync changes nothing (the parent's status belongs to CAPA). finalize, on
every call:

0. re-reads the parent from the API server and goes on only if it is the
   same object, being deleted, with this controller's finalizer; everything
   below reads that copy, never the request body (``verify``);
1. decides whether to collect at all: the global switch, the opt-out
   annotation ``aws.cluster.x-k8s.io/external-resource-gc`` (Go boolean,
   absent means true), the tasks annotation, the cluster's name and region;
   a value it cannot read blocks deletion rather than guessing;
2. discovers what of the selected tasks is left (``hooks.aws.gc.discovery``);
3. deletes it in task order, within a time and work budget
   (``hooks.aws.gc.runner``), never waiting for AWS;
4. records what remains and the last error in annotations, emits an Event
   and asks for a resync, backing off while nothing moves.

``finalized: true`` only when discovery finds nothing of the selected tasks
left, so a crash at any point loses nothing: the next call finds the rest.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import logging
import re
import sys
from dataclasses import dataclass

from botocore.exceptions import BotoCoreError, ClientError

from hooks import events, fields, pipeline, timefmt
from hooks.aws.gc import discovery, runner
from hooks.aws.gc.resources import (
    DEFAULT_TASKS,
    KIND_TASK,
    TASK_ORDER,
    VOL,
    made_by,
)
from hooks.config import Settings
from hooks.contract import HookRequest, RequestError, decorator_finalizer, decorator_response
from hooks.kube import fresh
from hooks.plan import Action, Outcome, Plan, error_text, unverified_text

NAME = "cluster-gc"
FAILURE_REASON = None  # settle's ExternalResourceGCRetrying says what failed
log = logging.getLogger(__name__)

# Names CAPA uses for the opt-out, the task list and the cluster label.
GC_ANNOTATION = "aws.cluster.x-k8s.io/external-resource-gc"
TASKS_ANNOTATION = "aws.cluster.x-k8s.io/external-resource-tasks-gc"
CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"
MANAGED_CONTROL_PLANE = "AWSManagedControlPlane"
PARENT_KINDS = ("AWSCluster", MANAGED_CONTROL_PLANE)
# clusterctl move sets this on the objects it deletes from the source cluster
# after copying them: the cluster lives on elsewhere, its resources with it.
DELETE_FOR_MOVE = "clusterctl.cluster.x-k8s.io/delete-for-move"
# An AWS region's shape; anything else never reaches an endpoint name.
_REGION = re.compile(r"^[a-z]{2,8}(-[a-z0-9]{1,16}){1,4}$")

# Our progress, on the parent while it is held.
REMAINING = "cluster-gc.nodewarden.io/remaining"
LAST_ERROR = "cluster-gc.nodewarden.io/last-error"
STALLED_SINCE = "cluster-gc.nodewarden.io/stalled-since"
PROGRESS_ANNOTATIONS = (REMAINING, LAST_ERROR, STALLED_SINCE)

DELETE = "aws.delete"

SKIP = "skip"  # finalize at once, delete nothing
BLOCKED = "blocked"  # hold the cluster: something must be fixed first
COLLECT = "collect"

_MESSAGE_LIMIT = 1024


# --------------------------------------------------------------------- scope


@dataclass(frozen=True)
class Scope:
    decision: str
    reason: str = ""
    cluster_name: str = ""
    region: str = ""
    tasks: tuple[str, ...] = ()


def parse_go_bool(value: str) -> bool | None:
    """strconv.ParseBool, which CAPA uses for the opt-out annotation; None if unreadable."""
    if value in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if value in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    return None


def parse_tasks(value: str | None) -> tuple[tuple[str, ...], str]:
    """(tasks in TASK_ORDER, problem). Absent or empty means CAPA's default tasks."""
    if value is None or not value.strip():
        return DEFAULT_TASKS, ""
    asked = [item.strip() for item in value.split(",") if item.strip()]
    unknown = [item for item in asked if item not in TASK_ORDER]
    if unknown:
        return (), (
            f"annotation {TASKS_ANNOTATION}={value!r} names unknown task(s) {', '.join(unknown)}; "
            f"known: {', '.join(TASK_ORDER)}"
        )
    return tuple(task for task in TASK_ORDER if task in asked), ""


_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"


def eks_cluster_name(name: str, namespace: str) -> str:
    """The EKS cluster name CAPA's webhook gives an AWSManagedControlPlane without one.

    ``<namespace>_<name>`` with dots as underscores; from 100 bytes on,
    ``capa_`` plus a 27-character base-36 digest (blake2b) of that string.
    """
    joined = f"{namespace}_{name.replace('.', '_')}"
    if len(joined.encode()) < 100:
        return joined
    digest = hashlib.blake2b(joined.encode(), digest_size=32 - len("capa_")).digest()
    return "capa_" + "".join(_BASE36[b % 36] for b in digest)


def cluster_name(parent: dict) -> tuple[str, str]:
    """(the workload cluster's name as its cloud controller tags it, problem)."""
    meta = parent["metadata"]
    if parent.get("kind") == MANAGED_CONTROL_PLANE:
        name = fields.string(parent, "spec", "eksClusterName")
        return name or eks_cluster_name(meta["name"], meta.get("namespace") or "default"), ""
    label = (meta.get("labels") or {}).get(CLUSTER_NAME_LABEL)
    if label:
        return label, ""
    for i, ref in enumerate(fields.objects(parent, "metadata", "ownerReferences")):
        where = f"parent.metadata.ownerReferences[{i}]"
        api_version = fields.item_string(ref, "apiVersion", where) or ""
        if fields.item_string(ref, "kind", where) == "Cluster" and api_version.startswith("cluster.x-k8s.io/"):
            owner = fields.item_string(ref, "name", where)
            if owner:
                return owner, ""
    return "", (
        f"cannot tell the workload cluster's name: no {CLUSTER_NAME_LABEL} label and no owning "
        f"cluster.x-k8s.io Cluster; set the label, or set {GC_ANNOTATION}=false to delete without collecting"
    )


def finalizer(settings: Settings) -> str:
    """The finalizer Metacontroller puts on the objects of this DecoratorController."""
    return decorator_finalizer(settings.gc_controller_name)


def resolve_scope(request: HookRequest, settings: Settings) -> Scope:
    """What this finalize call should do, from the request and settings alone.

    Raises RequestError for a mistyped field (spec.region, spec.eksClusterName,
    an ownerReferences item); ``scope_of`` turns that into a blocked deletion.
    """
    if not request.deleting:
        # finalize also runs when an object stops matching the selector: not a deletion.
        return Scope(SKIP, "")
    if not settings.external_resource_gc:
        return Scope(SKIP, "external resource GC is off (NODEWARDEN_EXTERNAL_RESOURCE_GC=false)")
    if DELETE_FOR_MOVE in request.annotations:
        return Scope(SKIP, f"being moved by clusterctl ({DELETE_FOR_MOVE}): the cluster lives on elsewhere, "
                           "nothing deleted")
    raw = request.annotations.get(GC_ANNOTATION)
    if raw is not None:
        enabled = parse_go_bool(raw)
        if enabled is None:
            return Scope(
                BLOCKED,
                f"annotation {GC_ANNOTATION}={raw!r} is not a boolean; set it to \"true\" to collect "
                f"or \"false\" to delete the cluster without collecting",
            )
        if not enabled:
            return Scope(SKIP, f"opted out ({GC_ANNOTATION}={raw}): nothing deleted")
    tasks, problem = parse_tasks(request.annotations.get(TASKS_ANNOTATION))
    if problem:
        return Scope(BLOCKED, problem)
    name, problem = cluster_name(request.parent)
    if problem:
        return Scope(BLOCKED, problem)
    region = fields.string(request.parent, "spec", "region") or settings.aws_region
    if not region:
        return Scope(BLOCKED, "no AWS region: spec.region is empty and AWS_REGION is not set")
    if not _REGION.match(region):
        return Scope(BLOCKED, f"region {region[:64]!r} (spec.region, else AWS_REGION) is not an AWS region")
    return Scope(COLLECT, "", name, region, tasks)


def scope_of(request: HookRequest, settings: Settings) -> Scope:
    """resolve_scope, with a field it cannot read blocking the deletion (and saying which)."""
    try:
        return resolve_scope(request, settings)
    except RequestError as exc:
        return Scope(BLOCKED, f"cannot read {exc}; fix the field, or set {GC_ANNOTATION}=false "
                              "to delete without collecting")


# ------------------------------------------------------------------- targets


@dataclass(frozen=True)
class Target:
    kind: str
    id: str
    task: str
    stage: int
    made_by: str
    state: str | None

    @property
    def deletable(self) -> bool:
        # A volume is deleted only once nothing uses it ("available").
        return self.kind != VOL or self.state == "available"

    @property
    def key(self) -> tuple[str, str]:
        return (self.kind, self.id)


def select_targets(scope: Scope, found: dict, settings: Settings) -> list[Target]:
    """What discovery found that this GC deletes, in task order."""
    targets = []
    for item in found.get("resources") or []:
        kind, tags = item.get("kind"), item.get("tags") or {}
        task = KIND_TASK.get(kind)
        if task not in scope.tasks:
            continue
        maker = made_by(kind, tags, scope.cluster_name, settings.gc_include_lb_controller)
        if maker:
            targets.append(Target(kind, item["id"], task, TASK_ORDER.index(task), maker, item.get("state")))
    return sorted(targets, key=lambda t: (t.stage, t.kind, t.id))


def plan_deletes(targets: list[Target], scope: Scope, settings: Settings) -> list[Action]:
    """Delete actions within the work budget; a task starts only once every earlier one is planned whole."""
    budget = settings.gc_max_deletes_per_call
    actions: list[Action] = []
    for stage in sorted({t.stage for t in targets}):
        in_stage = [t for t in targets if t.stage == stage]
        ready = [t for t in in_stage if t.deletable]
        for t in ready[: budget - len(actions)]:
            params = {"kind": t.kind, "task": t.task, "stage": t.stage, "region": scope.region, "madeBy": t.made_by}
            actions.append(Action(DELETE, t.id, params))
        if len(actions) >= budget or len(ready) < len(in_stage):
            break
    return actions


def summarize(targets: list[Target]) -> str:
    """``load-balancer=2,target-group=5`` in task order, or ``none``."""
    counts = {task: sum(1 for t in targets if t.task == task) for task in TASK_ORDER}
    return ",".join(f"{task}={n}" for task, n in counts.items() if n) or "none"


# -------------------------------------------------------------------- decide


def _cleared() -> dict:
    return {key: None for key in PROGRESS_ANNOTATIONS}


def _stall(request: HookRequest, settings: Settings, now: dt.datetime, message: str) -> tuple[dict, float]:
    """Annotations and resync while nothing moves: the wait doubles with the time stalled."""
    since = timefmt.parse(request.annotations.get(STALLED_SINCE))
    if since is None or since > now:  # ours, but anyone can write it: a future one would pin the backoff
        since = now
    elapsed = max(0.0, (now - since).total_seconds())
    resync = min(settings.error_backoff_max_seconds, max(settings.error_backoff_seconds, elapsed))
    return {LAST_ERROR: message[:_MESSAGE_LIMIT], STALLED_SINCE: timefmt.fmt(since)}, resync


def decide(request: HookRequest, settings: Settings, now: dt.datetime, observed: dict) -> Plan:
    if not request.finalizing:
        return Plan(decorator_response())  # sync: nothing to change while the cluster lives
    if request.deleting and settings.external_resource_gc and not request.verified:
        resolve_scope(request, settings)  # a body with a mistyped field is a 400, before anything is asked
        # Every decision (a move, the opt-out, the tasks, the name, the region)
        # is taken from the API server's copy, never from the body.
        return Plan(decorator_response(finalized=False), verify=True)
    scope = scope_of(request, settings)
    if scope.decision == SKIP:
        said = [events.normal(events.GC_SKIPPED, scope.reason)] if scope.reason else []
        return Plan(decorator_response(annotations=_cleared(), finalized=True), events=said)
    if scope.decision == BLOCKED:
        return _blocked(request, settings, now, scope.reason, events.GC_BLOCKED)
    found = observed.get("discovery") or {"error": "discovery did not run"}
    if found.get("error"):
        return _blocked(request, settings, now, f"discovery failed: {found['error']}", events.GC_RETRYING)
    targets = select_targets(scope, found, settings)
    if not targets:
        message = (
            f"nothing of cluster {scope.cluster_name}'s {', '.join(scope.tasks)} left in {scope.region} "
            f"(found by {found.get('method', '?')}); finalized"
        )
        return Plan(decorator_response(annotations=_cleared(), finalized=True),
                    events=[events.normal(events.RESOURCES_COLLECTED, message)])
    actions = plan_deletes(targets, scope, settings)
    # The response and Events if every delete succeeds; settle() redoes them
    # from the outcomes when one did not.
    planned = {(a.params["kind"], a.target) for a in actions}
    response, notices = progress_response(request, settings, now, scope, targets, planned, [])
    return Plan(response, actions, notices, basis=(scope, targets),
                gate=runner.StageGate(settings.gc_call_budget_seconds))


def _blocked(request: HookRequest, settings: Settings, now: dt.datetime, message: str, reason: str) -> Plan:
    annotations, resync = _stall(request, settings, now, message)
    said = []
    if request.annotations.get(LAST_ERROR) != annotations[LAST_ERROR]:
        said.append(events.warning(reason, message))
    return Plan(decorator_response(annotations=annotations, resync_after=resync, finalized=False), events=said)


def progress_response(
    request: HookRequest,
    settings: Settings,
    now: dt.datetime,
    scope: Scope,
    targets: list[Target],
    done: set[tuple[str, str]],
    failures: list[Outcome],
) -> tuple[dict, list[events.Event]]:
    """The response after deleting ``done`` (and failing ``failures``) of ``targets``, plus its Events."""
    left = [t for t in targets if t.key not in done]
    waiting = [t for t in left if not t.deletable]
    throttled = any(runner.classify(o) == runner.THROTTLED for o in failures)
    problem = ""
    if failures:
        first = failures[0]
        problem = f"{len(failures)} not deleted; first: {first.action.params['kind']} {first.action.target}: {first.error}"
    elif waiting:
        states = ", ".join(f"{t.id} ({t.state or 'unknown'})" for t in waiting[:5])
        problem = f"waiting for {len(waiting)} volume(s) to become available: {states}"
    annotations: dict = {REMAINING: summarize(left)}
    said: list[events.Event] = []
    if done:
        deleted = summarize([t for t in targets if t.key in done]).replace("=", " ")
        said.append(
            events.normal(events.EXTERNAL_RESOURCES_DELETED, f"deleted {len(done)} ({deleted}); remaining: {annotations[REMAINING]}")
        )
    if problem and (throttled or not done):
        stalled, resync = _stall(request, settings, now, problem)
        annotations.update(stalled)
        if done:  # throttled after some progress: slow down, but the stall starts now
            annotations[STALLED_SINCE] = timefmt.fmt(now)
            resync = settings.error_backoff_seconds
    else:
        annotations.update({LAST_ERROR: problem or None, STALLED_SINCE: None})
        resync = settings.gc_progress_resync_seconds
    if problem and request.annotations.get(LAST_ERROR) != annotations[LAST_ERROR]:
        said.append(events.warning(events.GC_RETRYING, problem))
    return decorator_response(annotations=annotations, resync_after=resync, finalized=False), said


def settle(request: HookRequest, plan: Plan, outcomes: list[Outcome], settings: Settings, now: dt.datetime) -> Plan:
    """The response and Events from what the deletes did."""
    scope, targets = plan.basis
    done = {(o.action.params["kind"], o.action.target) for o in outcomes if o.ok}
    failures = [o for o in outcomes if not o.ok and runner.classify(o) in (runner.IN_USE, runner.THROTTLED,
                                                                            runner.FAILED)]
    response, said = progress_response(request, settings, now, scope, targets, done, failures)
    return dataclasses.replace(plan, response=response, events=said)


# ----------------------------------------------------------------------- act


def gather(request: HookRequest, ctx, now: dt.datetime) -> dict:
    """The look-ups this call needs (read-only): ``{"discovery": …}`` when collecting, else nothing.

    Nothing is looked up for a deletion before the API server has confirmed it.
    A failed discovery is recorded as ``{"error": …}``, never raised.
    """
    if request.deleting and ctx.settings.external_resource_gc and not request.verified:
        return {}
    scope = scope_of(request, ctx.settings)
    if scope.decision != COLLECT:
        return {}
    query = discovery.Query(
        cluster_name=scope.cluster_name,
        region=scope.region,
        tasks=scope.tasks,
        include_lb_controller=ctx.settings.gc_include_lb_controller,
        use_tagging_api=ctx.settings.gc_use_tagging_api,
    )
    try:
        found = discovery.discover(ctx.aws, query)
    except (ClientError, BotoCoreError) as exc:
        return {"discovery": {"error": error_text(exc)}}
    if found.get("fallback") and ctx.settings.gc_use_tagging_api:
        log.info("tagging API unavailable; listed instead", extra={"reason": found["fallback"]})
    return {"discovery": found}


needs_verification = pipeline.by_plan


def verify(request: HookRequest, ctx) -> HookRequest:
    """The request with the parent as the API server has it now; Unverified unless it really is going.

    A body proves nothing (anyone reaching the hook port can send one): the
    object must exist with the body's uid, be deleting, and carry this
    controller's finalizer, and everything after this (the cluster's name,
    region, opt-out and tasks) is read from the fresh copy.
    """
    if request.parent.get("kind") not in PARENT_KINDS:
        raise fresh.Unverified(f"cluster-gc finalizes only {' and '.join(PARENT_KINDS)}, "
                               f"not {request.parent.get('kind')!r}")
    request = fresh.same_parent(request, ctx.kube)
    meta = request.meta
    label = f"{request.parent.get('kind')} {meta.get('namespace')}/{meta.get('name')}"
    if not meta.get("deletionTimestamp"):
        raise fresh.Unverified(f"{label} is not being deleted")
    ours = finalizer(ctx.settings)
    finalizers = meta.get("finalizers")
    if not isinstance(finalizers, list) or ours not in finalizers:
        raise fresh.Unverified(f"{label} does not carry the finalizer {ours}")
    return request


def unverified(request: HookRequest, plan: Plan, ctx, reason: str) -> Plan:
    """Hold the finalizer and look again later; no Event, since the object may not exist at all."""
    log.warning("cluster-gc refused to delete", extra={"parent": f"{request.meta.get('namespace')}/{request.name}",
                                                       "reason": reason})
    annotations, resync = _stall(request, ctx.settings, ctx.now(), unverified_text(reason))
    return Plan(decorator_response(annotations=annotations, resync_after=resync, finalized=False))


def sync(request: HookRequest, ctx=None) -> dict:
    return pipeline.run(sys.modules[__name__], request, ctx)


def finalize(request: HookRequest, ctx=None) -> dict:
    return pipeline.run(sys.modules[__name__], request, ctx)
