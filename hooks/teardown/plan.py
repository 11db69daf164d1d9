"""What cluster-gc does with each resource tagged for a cluster: delete it, in order, or keep it, and why.

One verdict per resource, from its kind, tags and state and the call's
scope. finalize's targets (hooks.teardown.targets), the re-read right before
each delete, and the plan a user reads all come from ``verdict``, so they
never disagree.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from hooks.ec2_names import SHUTTING_DOWN, TERMINATED
from hooks.teardown.ownership import cni_recent, owner_of
from hooks.teardown.scope import Scope
from hooks.teardown.tasks import EC2_INSTANCE, EIP, ENI, KIND_TASK, VOL, deletion_order
from hooks.teardown_names import KEEP_GONE, KEEP_IN_USE, KEEP_RECENT, KEEP_TASK_OFF, WAITED_FOR

# The ``state`` of a resource record (hooks.aws.gc.discovery): EC2's own for volumes
# ("available", "in-use", …), ENIs ("available", "in-use", …) and instances ("running", …);
# for an Elastic IP, whether it has an association.
AVAILABLE = "available"
ASSOCIATED = "associated"
UNASSOCIATED = "unassociated"
# The state in which a resource of these kinds is free to delete; any other is waited for.
FREE_STATE = {VOL: AVAILABLE, ENI: AVAILABLE, EIP: UNASSOCIATED}


@dataclass(frozen=True)
class Verdict:
    task: str
    made_by: str  # who made it, "" when no controller of the cluster did
    keep: str  # "" to delete it now, else why it is kept (hooks.teardown_names.KEEP_*)

    @property
    def collected(self) -> bool:
        """cluster-gc deletes it, now or once it is free; the cluster is held for it until then."""
        return bool(self.made_by) and (not self.keep or self.keep in WAITED_FOR)


@dataclass
class GcPlan:
    """Every resource of a discovery: ``delete`` in the order they would go, ``keep`` as (resource, reason)."""

    delete: list[dict] = field(default_factory=list)
    keep: list[tuple[dict, str]] = field(default_factory=list)


def verdict(scope: Scope, resource: dict, now: dt.datetime) -> Verdict:
    """What a collecting ``scope`` does with one resource record (``{"kind", "id", "tags", "state"}``)."""
    kind, tags = resource["kind"], resource.get("tags") or {}
    task = KIND_TASK[kind]
    maker, reason = owner_of(kind, tags, scope.cluster_name, scope.include_lb_controller)
    if not maker:
        return Verdict(task, "", reason)
    if task not in scope.tasks:
        return Verdict(task, maker, KEEP_TASK_OFF)
    return Verdict(task, maker, _held_by_state(kind, tags, resource.get("state"), now))


def _held_by_state(kind: str, tags: dict, state: str | None, now: dt.datetime) -> str:
    """Why a resource of ours cannot be deleted yet ("" when it can)."""
    if kind == EC2_INSTANCE:
        if state == TERMINATED:
            return KEEP_GONE
        return KEEP_IN_USE if state == SHUTTING_DOWN else ""
    if kind in FREE_STATE and state != FREE_STATE[kind]:
        return KEEP_IN_USE  # attached, associated, or changing: freed when what holds it goes
    if kind == ENI and cni_recent(tags, now):
        return KEEP_RECENT
    return ""


def plan_of(scope: Scope, resources: list[dict], now: dt.datetime | None = None) -> GcPlan:
    """What a collecting ``scope`` does with every one of ``resources`` (discovery's records), changing nothing.

    ``delete``: task order, then kind, then id (the order finalize deletes in,
    over as many calls as its budget needs). ``keep``: every other one, with
    its reason; those ``WAITED_FOR`` are deleted once free. ``now`` (default:
    the current time) dates the VPC CNI's cooldown of its new ENIs.
    """
    now = now or dt.datetime.now(dt.timezone.utc)
    plan = GcPlan()
    for resource in sorted(resources, key=deletion_order):
        reason = verdict(scope, resource, now).keep
        if reason:
            plan.keep.append((resource, reason))
        else:
            plan.delete.append(resource)
    return plan
