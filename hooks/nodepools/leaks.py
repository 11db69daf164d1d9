"""Leaked instances: tagged for this cluster and pool, with a Machine-UID tag that names no Machine, recorded
by no Machine, launched longer than the grace ago (pure).

Only instances carrying our Machine-UID tag are ever candidates: an instance
without it was not launched by a Machine. A tag can be edited, a Machine's
own record cannot: an instance a Machine records is its own. Each is
terminated only after its tags, its age and the API server's Machines are
read again right before (the Orphaned precondition): the request's children
can lag behind a Machine just created.
"""
from __future__ import annotations

import datetime as dt

from hooks import events, machine_names, timefmt
from hooks.plan import Action, Change, Orphaned


def recorded_instances(machines: list[dict]) -> set[str]:
    """The instances the Machines record in status.instanceID."""
    return {m["status"]["instanceID"] for m in machines if isinstance(m["status"].get("instanceID"), str)}


def leaked(instances: list[dict], machine_uids: set[str], now: dt.datetime, grace_seconds: float,
           recorded: frozenset[str] | set[str] = frozenset()) -> list[dict]:
    """Instances of the pool whose Machine-UID tag names no Machine and that no Machine records, launched
    longer than the grace ago."""
    found = []
    for instance in instances:
        uid = (instance.get("tags") or {}).get(machine_names.TAG_MACHINE_UID)  # EC2's answer, not a request's
        if not uid or uid in machine_uids or instance.get("instanceID") in recorded:
            continue
        launched = timefmt.parse(instance.get("launchTime"))
        if launched is None or (now - launched).total_seconds() < grace_seconds:
            continue
        found.append(instance)
    return sorted(found, key=lambda i: i["instanceID"])


def terminations(pool_name: str, instances: list[dict], machines: list[dict], now: dt.datetime, grace: float,
                 cluster_name: str, region: str) -> list[Action]:
    """The actions that terminate the pool's leaked instances, each behind its Orphaned precondition."""
    uids = {m["metadata"]["uid"] for m in machines}
    actions = []
    for instance in leaked(instances, uids, now, grace, recorded_instances(machines)):
        iid = instance["instanceID"]
        actions.append(Action(
            "ec2.terminate", iid, {"region": region},
            requires=(Orphaned(iid, cluster_name, pool_name, grace, region or None),),
            record=(Change(("status", "leakedInstancesTerminated"), add=1),),
            reports=events.warning(events.LEAKED_INSTANCE_TERMINATED,
                                   f"instance {iid} (Machine uid {instance['tags'].get(machine_names.TAG_MACHINE_UID)}) "
                                   f"had no Machine: terminated")))
        actions.append(Action("metric.machine", pool_name, {"event": "leaked-instance-terminated"}))
    return actions
