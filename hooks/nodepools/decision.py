"""A NodePool's decision in one call: its round, its disruption pass, its children, its status (pure).

In order, on what gather read in this call (the pool and its Machines as
the API server has them now, our FencingRequests, a provisioning pool's
round readings, the instances tagged for the pool when a leak check is due):

1. a provisioning pool's round: where the pending pods go, and the Machines
   of its own to create for them (hooks.nodepools.provisioning);
2. the disruption pass: each method in order, within the budgets, then each
   record's fate (hooks.nodepools.disruption);
3. the children: what the pool keeps, lets go and makes, replacements first
   (hooks.nodepools.children);
4. leaked instances (hooks.nodepools.leaks), the status, the Events and
   when to look again.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from hooks import bounds, conditions, events, machine_names, timefmt
from hooks.config import Settings
from hooks.contract import HookRequest, composite_response
from hooks.machines import pool, repair, signals, spec
from hooks.nodepools import children, consolidation, disruption, leaks, provisioning, records, replacements
from hooks.nodepools.methods import expiry
from hooks.nodepools.state import PoolState
from hooks.plan import Action, Plan, SameObject
from hooks.provisioning import rounds

@dataclass
class Decision:
    plan: Plan
    provisioned: rounds.Round | None = None  # the round this call ran, for its measurement
    said: list = field(default_factory=list)


def status_of(request: HookRequest, machines: list[dict]) -> dict:
    """The pool's status as this call starts it: counts now, what it keeps of the previous one."""
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


def decide(request: HookRequest, pool_spec: spec.PoolSpec, settings: Settings, now: dt.datetime,
           observed: dict) -> Decision:
    """The pool's Plan for a verified call whose spec reads and whose Machines were listed."""
    machines = pool.machines_of(request.children.of_kind(machine_names.MACHINE_KIND, machine_names.GROUP))
    previous = request.parent.get("status") if isinstance(request.parent.get("status"), dict) else {}
    current = pool.machines_of(observed["machines"]) if "machines" in observed else None
    status = status_of(request, current if current is not None else machines)
    counts = status["machines"]
    said: list[events.Event] = []
    actions: list[Action] = []
    provisioned = None if request.finalizing else provisioning.round_of(request.name, pool_spec, observed,
                                                                         settings, now, said)
    if provisioned is not None and provisioned.status:
        status["provisioning"] = provisioned.status
    if request.finalizing:
        kept, created, removed = [], [], [m["metadata"]["name"] for m in machines
                                          if not m["metadata"]["deletionTimestamp"]]
    else:
        kept, created, removed = _disrupt(request, pool_spec, settings, now, observed, machines, current, status,
                                          actions, said, provisioned)
    for name in created:
        said.append(events.normal(events.MACHINE_CREATED, f"Machine {name} created"))
    for name in removed:
        said.append(events.normal(events.MACHINE_REMOVED, f"Machine {name} removed"))
    actions += _leaks(request, settings, now, observed, machines + (current or []), status, said)
    if pool_spec.replicas is None:
        # A provisioning pool is ready to provision whatever its Machines are doing.
        ready = not request.finalizing
        shown, _ = conditions.set(previous, "Ready", "True" if ready else "False", "Provisioning",
                                  f"{counts['Initialized']} Machines initialized; Machines follow the pending pods",
                                  timefmt.fmt(now))
    else:
        ready = counts["Initialized"] >= pool_spec.replicas and not request.finalizing
        shown, _ = conditions.set(previous, "Ready", "True" if ready else "False",
                                  "MachinesInitialized" if ready else "MachinesPending",
                                  f"{counts['Initialized']} of {pool_spec.replicas} Machines initialized",
                                  timefmt.fmt(now))
    status["conditions"] = [c for c in shown["conditions"] if c.get("type") == "Ready"]
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
    return Decision(Plan(composite_response(status=status, children=kept, resync_after=resync, finalized=finalized),
                         actions, said), provisioned)


def _disrupt(request: HookRequest, pool_spec: spec.PoolSpec, settings: Settings, now: dt.datetime, observed: dict,
             machines: list[dict], fresh_list: list[dict] | None, status: dict, actions: list[Action],
             said: list, provisioned: rounds.Round | None) -> tuple[list[dict], list[str], list[str]]:
    """The pool's children after its disruption pass, within the budgets; records and Events."""
    current = fresh_list if fresh_list is not None else machines
    if "fencingError" in observed:
        said.append(events.warning(events.MACHINE_ACTION_FAILED, f"FencingRequests: {observed['fencingError']}"))
    state = PoolState(
        name=request.name, uid=str(request.meta.get("uid") or ""), spec=pool_spec, machines=current,
        known=frozenset(m["metadata"]["name"] for m in machines),
        fenced=repair.fenced_machines(current, observed.get("fencingRequests") or [], settings.namespace),
        now=now, fencing_known="fencingRequests" in observed,
        provisioned=provisioned if provisioned is not None and provisioned.readings is not None else None,
        consolidation=tuple(consolidation.records_of(status)))
    out = disruption.run(state, records.records_of(request.parent.get("status")
                                                   if isinstance(request.parent.get("status"), dict) else {}))
    if out.consolidation is not None:
        status["consolidation"] = out.consolidation
    said.extend(events.normal(events.CONSOLIDATION, text) for text in out.messages + consolidation.report(state, out))
    replacing = replacements.plan(state, out, said)
    if provisioned is not None and provisioned.status:
        provisioned = provisioning.within_limits(state, provisioned, out.needs, replacing)
        status["provisioning"] = provisioned.status
    claims = provisioned.machines if provisioned is not None else []
    kept, created, removed = children.desired(state, out, replacing + list(claims))
    records.assign_replacements(out.needs, created)
    by_name = {m["metadata"]["name"]: m for m in current}
    for entry in out.started:
        said.append(events.normal(events.DISRUPTION_STARTED,
                                  f"Machine {entry['machine']}: {entry['reason']} since {entry['at']}"
                                  + (f"; replacement {entry['replacement']}" if entry.get("replacement") else "")))
        actions.append(Action("metric.disrupted", request.name, {
            "reason": entry["reason"], "record": f"{entry['uid']}/{entry['reason']}/{entry['at']}"}))
    for entry in out.ready:
        seconds = max(0.0, (now - timefmt.parse(entry["at"])).total_seconds())
        said.append(events.normal(events.REPLACEMENT_INITIALIZED,
                                  f"Machine {entry['replacement']} replacing {entry['machine']} ({entry['reason']}) "
                                  f"initialized {seconds:.1f}s after the signal"))
        actions.append(Action("metric.replaced", request.name, {"reason": entry["reason"], "seconds": seconds}))
    for entry in out.records:
        machine = by_name.get(entry["machine"])
        if machine is None or machine["metadata"]["uid"] != entry["uid"] or entry["reason"] in signals.FORCEFUL:
            continue
        shown = signals.of(machine, signals.DISRUPTION_ANNOTATION)
        if shown is None or shown.reason != entry["reason"]:
            # The pool's choice, on the Machine: its controller shows it as Disrupted and on the Node.
            value = signals.Signal(entry["reason"], timefmt.parse(entry["at"])).encode()
            actions.append(Action("kube.mark-disrupted", entry["machine"], {"uid": entry["uid"], "value": value},
                                  requires=(SameObject(machine_names.MACHINE_KIND, entry["machine"], entry["uid"]),)))
    _launched(request.name, out.needs, created, provisioned, actions, said)
    status["disruptions"] = out.records
    # Only a provisioning pool consolidates: a static pool's status names the reasons it can have.
    reasons = signals.BUDGETED if pool_spec.replicas is None else \
        tuple(r for r in signals.BUDGETED if r not in signals.CONSOLIDATION)
    status["disruption"] = records.budget_status(pool_spec.budgets, out.size, out.disrupting, now, out.blocked,
                                                 reasons)
    return kept, created, removed


def _launched(name: str, needs: list[dict], created: list[str], provisioned: rounds.Round | None,
              actions: list[Action], said: list) -> None:
    """Events and metrics for the Machines this call created: replacements first, then one per claim."""
    replacements = min(len(needs), len(created))
    for machine in created[:replacements]:
        actions.append(Action("metric.launched", name, {"machine": machine, "reason": machine_names.LAUNCH_REPLACEMENT}))
    rest = created[replacements:]
    if provisioned is None:
        for machine in rest:
            actions.append(Action("metric.launched", name, {"machine": machine, "reason": machine_names.LAUNCH_REPLICAS}))
        return
    for machine, claim, ratios in zip(rest, provisioned.claims, provisioned.ratios):
        actions.append(Action("metric.launched", name, {
            "machine": machine, "reason": machine_names.LAUNCH_PROVISIONING, "pods": len(claim.pods), "ratios": ratios}))
        said.append(events.normal(events.PROVISIONED, f"Machine {machine} created for {len(claim.pods)} pending pods "
                                  f"({', '.join(claim.instance_types[:3])}"
                                  f"{', ...' if len(claim.instance_types) > 3 else ''})"))
        said.extend(rounds.nominated(name, machine, claim, provisioned.pod_uids))


def _next_expiry(pool_spec: spec.PoolSpec, machines: list[dict], now: dt.datetime) -> float:
    """Seconds until the next Machine of the pool expires (infinity when none will; one expired already and
    held by a budget is looked at again when a Machine changes, or at the pool's resync)."""
    times = [expiry.expires_at(m, pool_spec.expire_after) for m in machines if not m["metadata"]["deletionTimestamp"]]
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
    # A deleted pool has no Machine left to launch for it: no grace once its last Machine is gone.
    grace = 0.0 if request.finalizing and not machines else settings.leaked_instance_grace_seconds
    return leaks.terminations(request.name, observed["instances"], machines, now, grace, settings.cluster_name,
                              settings.aws_region)
