"""nodepool: keep ``replicas`` Machines, and terminate instances no Machine owns.

A pool without ``replicas`` provisions for pending pods: it keeps the
Machines it has (none is created or removed for a count).

CompositeController on NodePool with Machines as children (created with the
pool's owner reference by Metacontroller, so they are owned from the start).
Every call is decided on the NodePool read fresh from the API server, and on
its Machines as the API server lists them (Metacontroller's cache can be a
step behind its own deletes): scale-down removes exactly the surplus, Machines
not yet Registered first, then the oldest, never a replacement a disrupted
Machine waits for; each leaves through its own finalizer (cordon, drain,
terminate). Which Machine replaces which is on the new Machine
(``nodewarden.io/replaces``), so the pairing survives a lost status write.
Deleting the pool deletes every Machine and finishes once none is left and
no instance tagged for the pool remains.
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

from hooks import bounds, conditions, events, machine_names, pipeline, runtime, timefmt
from hooks.aws import instance_catalog, instances, pricing
from hooks.config import Settings
from hooks.contract import HookRequest, RequestError, composite_response
from hooks.kube import fencing_api, fresh, machine_api, provisioning_reads
from hooks.machines import budgets, disruption, pool, repair, signals, spec
from hooks.provisioning import consolidation, inputs, pods, rounds
from hooks.metrics import LAUNCH_PROVISIONING, LAUNCH_REPLACEMENT, LAUNCH_REPLICAS, PROVISIONING_DECISION_SECONDS
from hooks.plan import Action, Change, Orphaned, Outcome, Plan, SameObject, error_text

NAME = "nodepool"
FAILURE_REASON = events.MACHINE_ACTION_FAILED
log = logging.getLogger(__name__)


def customize(parent: dict, ctx: runtime.Context | None = None) -> dict:
    """The FencingRequests of nodewarden's namespace: not read from the request (each call lists them from the
    API server), but related so that Metacontroller syncs the pool when one changes, and a fenced Machine's
    replacement starts as soon as the power-off is confirmed rather than at the next resync."""
    namespace = (ctx.settings.namespace if ctx is not None else "") or "nodewarden-system"
    return {"relatedResources": [{"apiVersion": f"{machine_names.GROUP}/v1alpha1", "resource": "fencingrequests",
                                  "namespace": namespace}]}


def _machines(request: HookRequest) -> list[dict]:
    return pool.machines_of(request.children.of_kind(machine_names.MACHINE_KIND, machine_names.GROUP))


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
        listed = machine_api.listed(ctx.kube, request.name)
        observed["machineUIDs"] = sorted((m.get("metadata") or {}).get("uid") or "" for m in listed)
        observed["machines"] = [m for m in listed if _owned_by(m, request.meta.get("uid") or "")]
    except Exception as exc:  # noqa: BLE001
        observed["machinesError"] = error_text(exc)
    try:
        # Repair rests on nodewarden's own FencingRequests, read now: the Nodes' conditions prove nothing.
        observed["fencingRequests"] = fencing_api.fencing_requests(ctx.kube, ctx.settings.namespace)
    except Exception as exc:  # noqa: BLE001
        observed["fencingError"] = error_text(exc)
    _provisioning_reads(request, ctx, now, observed)
    if not ctx.settings.cluster_name or not _check_due(request, ctx.settings, now):
        return observed
    try:
        ec2 = ctx.aws.client("ec2", ctx.settings.aws_region or None)
        observed["instances"] = instances.of_pool(ec2, ctx.settings.cluster_name, request.name)
    except Exception as exc:  # noqa: BLE001
        observed["instancesError"] = error_text(exc)
    return observed


def _provisioning_due(request: HookRequest, settings: Settings, now: dt.datetime, raw_pending: list[dict]) -> bool:
    """A full round when pods wait for room, else now and then for the pool's status and consolidation."""
    if any(pods.is_provisionable(p) for p in raw_pending):
        return True
    previous = request.parent.get("status") if isinstance(request.parent.get("status"), dict) else {}
    shown = previous.get("provisioning") if isinstance(previous.get("provisioning"), dict) else {}
    since = timefmt.seconds_since(shown.get("lastRound"), now)
    return since is None or since < 0 or since >= settings.consolidation_check_seconds


def _provisioning_reads(request: HookRequest, ctx: runtime.Context, now: dt.datetime, observed: dict) -> None:
    """A provisioning pool's round readings: every pending pod, every provisioning pool with its Machines
    and Nodes, the pods on them, the DaemonSets, and EC2's instance types, offerings and prices."""
    try:
        parsed = spec.pool(request.parent)
    except RequestError:
        return
    if parsed.provisioning is None or request.finalizing:
        return
    kube = ctx.kube
    try:
        raw_pending = provisioning_reads.pending(kube)
        if not _provisioning_due(request, ctx.settings, now, raw_pending):
            return
        pool_objects = provisioning_reads.provisioning_pools(kube)
        readings = {"pending": raw_pending, "bound": provisioning_reads.running_on_nodes(kube),
                    "nodes": provisioning_reads.pool_nodes(kube), "pools": pool_objects,
                    "machines": machine_api.listed(kube),
                    "daemonsets": provisioning_reads.daemonsets(kube)}
    except Exception as exc:  # noqa: BLE001
        observed["provisioningError"] = f"API server: {error_text(exc)}"
        return
    try:
        ec2 = ctx.aws.client("ec2", ctx.settings.aws_region or None)
        facts = instance_catalog.all_type_facts(ec2)
        specs = {**inputs.pools_of(pool_objects), request.name: parsed}
        spot = instance_catalog.spot_prices(ec2, inputs.spot_candidates(specs, facts))
        zones, own = {}, []
        for name, other in sorted(specs.items()):
            found = instances.subnets(ec2, list(other.template.subnets), other.template.subnet_selector)
            zones[name] = sorted({s["zone"] for s in found if s.get("zone")})
            if name == request.name:
                own = found
        readings.update(
            typeFacts=facts, zoneOfferings=instance_catalog.zone_offerings(ec2), zones=zones, subnets=own,
            prices={spec.ON_DEMAND: pricing.on_demand_prices(ctx.aws, ctx.settings.aws_region or ec2.meta.region_name),
                    spec.SPOT: [[t, z, p] for (t, z), p in sorted(spot.items())]})
    except Exception as exc:  # noqa: BLE001
        observed["provisioningError"] = f"EC2: {error_text(exc)}"
        return
    observed["provisioning"] = readings


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
    for shown in ("provisioning", "consolidation"):
        if isinstance(previous.get(shown), (dict, list)):
            status[shown] = previous[shown]
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
    actions: list[Action] = []
    provisioned = _provision(request, settings, now, observed, pool_spec, status, actions, said)
    if request.finalizing:
        children, created, removed = [], [], [m["metadata"]["name"] for m in machines
                                              if not m["metadata"]["deletionTimestamp"]]
    else:
        children, created, removed = _disrupt(request, settings, now, observed, pool_spec, machines, current,
                                              status, actions, said, provisioned)
    for name in created:
        said.append(events.normal(events.MACHINE_CREATED, f"Machine {name} created"))
    for name in removed:
        said.append(events.normal(events.MACHINE_REMOVED, f"Machine {name} removed"))
    actions += _leaks(request, settings, now, observed, machines + (current or []), status, said)
    if pool_spec.replicas is None:
        # A provisioning pool is ready to provision whatever its Machines are doing.
        ready = not request.finalizing
        kept, _ = conditions.set(previous, "Ready", "True" if ready else "False", "Provisioning",
                                 f"{counts['Initialized']} Machines initialized; Machines follow the pending pods",
                                 stamp)
    else:
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
    resync = settings.machine_poll_seconds if (request.finalizing or created or removed or status.get("disruptions")) \
        else min(settings.leaked_instance_check_seconds, _next_expiry(pool_spec, current or [], now))
    if provisioned is not None:
        # Pending pods are read, not watched: a provisioning pool looks again soon, sooner when a batch closes.
        resync = min(resync, provisioned.wait or settings.provisioning_poll_seconds, settings.provisioning_poll_seconds)
    return Plan(composite_response(status=status, children=children, resync_after=resync, finalized=finalized),
                actions, said)


def _disrupt(request: HookRequest, settings: Settings, now: dt.datetime, observed: dict, pool_spec: spec.PoolSpec,
             machines: list[dict], fresh_list: list[dict] | None, status: dict, actions: list[Action],
             said: list, provisioned: rounds.Round | None = None) -> tuple[list[dict], list[str], list[str]]:
    """The pool's children after its disruptions and scale-down, within the budgets; records and Events."""
    current = fresh_list if fresh_list is not None else machines
    by_uid = {m["metadata"]["uid"]: m for m in current}
    fencing_known = "fencingRequests" in observed
    fenced = repair.fenced_machines(current, observed.get("fencingRequests") or [], settings.namespace)
    if "fencingError" in observed:
        said.append(events.warning(events.MACHINE_ACTION_FAILED, f"FencingRequests: {observed['fencingError']}"))
    previous = disruption.records_of(request.parent.get("status") if isinstance(request.parent.get("status"), dict)
                                     else {})
    out = disruption.decide(current, previous, pool_spec.budgets, pool_spec.expire_after, fenced,
                            pool_spec.replicas, now, pool_spec.template_hash)
    if not fencing_known:
        # Without the FencingRequests a repaired Machine's recovery is not known: it stays.
        by_name = {r["machine"]: r for r in out.records}
        out.leaving = {n for n in out.leaving if by_name[n]["reason"] != signals.REPAIR}
    size = disruption.budget_size(current, out.records)
    _consolidate(request.name, pool_spec, current, provisioned, out, size, now, status, said)
    scale_down = budgets.allowed(pool_spec.budgets, signals.SCALE_DOWN, size, now)
    children, created, removed = pool.desired(
        request.name, str(request.meta.get("uid") or ""), pool_spec, machines, fresh_list, held=out.held,
        leaving=out.leaving, scale_down_limit=None if scale_down is None else scale_down - out.disrupting,
        kept=out.kept, replacing=[disruption.replaces(r) for r in out.needs],
        replacing_specs=[pool.like(by_uid.get(r["uid"]), pool_spec) for r in out.needs],
        provisioned=provisioned.machines if provisioned is not None else ())
    disruption.assign_replacements(out.needs, created)
    by_name = {m["metadata"]["name"]: m for m in current}
    for record in out.started:
        said.append(events.normal(events.DISRUPTION_STARTED,
                                  f"Machine {record['machine']}: {record['reason']} since {record['at']}"
                                  + (f"; replacement {record['replacement']}" if record.get("replacement") else "")))
        actions.append(Action("metric.disrupted", request.name, {
            "reason": record["reason"], "record": f"{record['uid']}/{record['reason']}/{record['at']}"}))
    for record in out.ready:
        seconds = max(0.0, (now - timefmt.parse(record["at"])).total_seconds())
        said.append(events.normal(events.REPLACEMENT_INITIALIZED,
                                  f"Machine {record['replacement']} replacing {record['machine']} ({record['reason']}) "
                                  f"initialized {seconds:.1f}s after the signal"))
        actions.append(Action("metric.replaced", request.name, {"reason": record["reason"], "seconds": seconds}))
    for record in out.records:
        machine = by_name.get(record["machine"])
        if machine is None or machine["metadata"]["uid"] != record["uid"] or record["reason"] in signals.FORCEFUL:
            continue
        shown = signals.of(machine, signals.DISRUPTION_ANNOTATION)
        if shown is None or shown.reason != record["reason"]:
            # The pool's choice, on the Machine: its controller shows it as Disrupted and on the Node.
            value = signals.Signal(record["reason"], timefmt.parse(record["at"])).encode()
            actions.append(Action("kube.mark-disrupted", record["machine"], {"uid": record["uid"], "value": value},
                                  requires=(SameObject(machine_names.MACHINE_KIND, record["machine"], record["uid"]),)))
    _launched(request.name, out.needs, created, provisioned, actions, said)
    status["disruptions"] = out.records
    # Only a provisioning pool consolidates: a static pool's status names the reasons it can have.
    reasons = signals.BUDGETED if pool_spec.replicas is None else \
        tuple(r for r in signals.BUDGETED if r not in signals.CONSOLIDATION)
    status["disruption"] = disruption.budget_status(pool_spec.budgets, size, out.disrupting, now, out.blocked,
                                                    reasons)
    return children, created, removed


def _provision(request: HookRequest, settings: Settings, now: dt.datetime, observed: dict, pool_spec: spec.PoolSpec,
               status: dict, actions: list[Action], said: list) -> rounds.Round | None:
    """A provisioning pool's round, when gather read for one; its status and Events."""
    if pool_spec.provisioning is None or request.finalizing:
        return None
    if "provisioningError" in observed:
        said.append(events.warning(events.FAILED_PROVISIONING, f"provisioning round: {observed['provisioningError']}"))
        return rounds.Round(False, settings.error_backoff_seconds)
    if not isinstance(observed.get("provisioning"), dict):
        return rounds.Round(False, 0.0)
    readings = rounds.readings(observed["provisioning"])
    out = rounds.provision(request.name, pool_spec, readings, now, idle=settings.batch_idle_seconds,
                           maximum=settings.batch_max_seconds)
    status["provisioning"] = out.status
    said.extend(out.events)
    if out.ready:
        # A measurement of this very call, not a decision: taken here, where the time is spent.
        PROVISIONING_DECISION_SECONDS.observe(out.decision_seconds)
    return out


def _consolidate(name: str, pool_spec: spec.PoolSpec, current: list[dict], provisioned: rounds.Round | None,
                 out: disruption.Outcome, size: int, now: dt.datetime, status: dict, said: list) -> None:
    """A provisioning round's consolidation, on the readings the round itself ran on (read this call)."""
    if provisioned is None or provisioned.readings is None:
        return
    readings = provisioned.readings
    chosen = consolidation.decide(
        current, readings.nodes, inputs.pods_by_node(readings.bound), provisioned.placed_slots,
        provisioned.status.get("pendingPods", 0), pool_spec.provisioning,
        consolidation.records_of(status), consolidation.BudgetState(
            pool_spec.budgets, size, out.disrupting, frozenset(out.held)), now)
    by_uid = {m["metadata"]["uid"]: m for m in current}
    for removal in chosen.remove:
        machine = by_uid.get(removal.uid)
        if machine is not None:
            disruption.start(out, machine, removal.reason, removal.since, now)
    status["consolidation"] = chosen.candidates
    said.extend(events.normal(events.CONSOLIDATION, text) for text in chosen.events)


def _launched(name: str, needs: list[dict], created: list[str],
              provisioned: rounds.Round | None, actions: list[Action], said: list) -> None:
    """Events and metrics for the Machines this call created: replacements first, then one per claim."""
    replacements = min(len(needs), len(created))
    for machine in created[:replacements]:
        actions.append(Action("metric.launched", name, {"machine": machine, "reason": LAUNCH_REPLACEMENT}))
    rest = created[replacements:]
    if provisioned is None:
        for machine in rest:
            actions.append(Action("metric.launched", name, {"machine": machine, "reason": LAUNCH_REPLICAS}))
        return
    for machine, claim, ratios in zip(rest, provisioned.claims, provisioned.ratios):
        actions.append(Action("metric.launched", name, {
            "machine": machine, "reason": LAUNCH_PROVISIONING, "pods": len(claim.pods), "ratios": ratios}))
        said.append(events.normal(events.PROVISIONED, f"Machine {machine} created for {len(claim.pods)} pending pods "
                                  f"({', '.join(claim.instance_types[:3])}"
                                  f"{', ...' if len(claim.instance_types) > 3 else ''})"))
        said.extend(rounds.nominated(name, machine, claim, provisioned.pod_uids))


def _next_expiry(pool_spec: spec.PoolSpec, machines: list[dict], now: dt.datetime) -> float:
    """Seconds until the next Machine of the pool expires (infinity when none will; one expired already and
    held by a budget is looked at again when a Machine changes, or at the pool's resync)."""
    times = [disruption.expires_at(m, pool_spec.expire_after) for m in machines if not m["metadata"]["deletionTimestamp"]]
    left = [(t - now).total_seconds() for t in times if t is not None and t > now]
    return max(1.0, min(left)) if left else float("inf")


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
                                   f"instance {iid} (Machine uid {instance['tags'].get(machine_names.TAG_MACHINE_UID)}) "
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
