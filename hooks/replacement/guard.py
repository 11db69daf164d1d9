"""Whether a replacement may start: the policy's storm guard, the group's share of unhealthy members, and
the group's budget of replacements in flight (pure).

A group is what the owner replaces from: a Karpenter NodePool (its
NodeClaims), an Auto Scaling group, a Cluster API MachineSet (else its
MachineDeployment). A member is unhealthy while its Node is not Ready or it
is being deleted or replaced; a replacement is in flight while the owner is
deleting or replacing a member (NodeClaim or Machine deleting, instance
Unhealthy or Terminating, OwnerRemediated=False), and while another
FencingRequest asked for one whose member the group still lists as it was,
or has claimed a place in the budget to ask for one.

The claim is what keeps two requests decided at once within the budget: a
request records its claim (``status.replacement.claimTime``) on one call and
asks the owner on a later one only if, read after its claim was written, the
claims of the others still leave room. Of two that see each other's claims,
the later claim (then the higher uid) yields.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from hooks import owner_names
from hooks.fencing import storm
from hooks.fencing.policy import governing, parse_all
from hooks.replacement.owners import Owner, capi_group, condition_is, nodeclaim_pool
from hooks.replacement.spec import ReplacementSpec


@dataclass(frozen=True)
class GroupView:
    name: str
    total: int
    unhealthy: int
    replacing: int
    claimed_later: int = 0  # of ``replacing``: other requests' claims ordered after this request's own

    @property
    def replacing_before(self) -> int:
        """Replacements in flight that this request's claim does not take precedence over."""
        return self.replacing - self.claimed_later


def verdict(group: GroupView | None, spec: ReplacementSpec, storm_hold: str | None) -> str | None:
    """None when the replacement may start, else the reason it is held (owner_names.HELD_*).

    ``group`` None: the owner keeps its own budgets (a NodePool's repair), only the storm guard applies.
    """
    if storm_hold:
        return owner_names.HELD_STORM_GUARD
    if group is None:
        return None
    if group.unhealthy > spec.allowed_unhealthy(group.total):
        return owner_names.HELD_GROUP_UNHEALTHY
    if group.replacing >= spec.allowed_replacing(group.total):
        return owner_names.HELD_BUDGET
    return None


def storm_hold(policy_objs: list[dict], node_labels: dict, now: dt.datetime, max_age: float) -> str | None:
    """Why the storm guard of the policy governing the node holds (None when it does not), judged as
    node-fencing judges it: the guard True, or a count that is missing, stale or not of the current spec."""
    valid, _invalid = parse_all(policy_objs)
    policy = governing(valid, node_labels)
    if policy is None:
        return "no NodeFencingPolicy governs the node: there is no count to tell a storm by"
    judged = storm.count_verdict(policy, now, max_age)
    return None if judged.outcome == storm.ALLOWED else judged.message


def _meta(obj: dict) -> dict:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    return meta if isinstance(meta, dict) else {}


def _status(obj: dict) -> dict:
    status = obj.get("status") if isinstance(obj, dict) else None
    return status if isinstance(status, dict) else {}


def members(owner: Owner, read: dict) -> dict[str, tuple[bool, bool]]:
    """Each member of the owner's group as read: key -> (unhealthy, being replaced)."""
    found: dict[str, tuple[bool, bool]] = {}
    if owner.kind == owner_names.OWNER_NODECLAIM:
        not_ready = set((read.get("readiness") or {}).get("notReady") or [])
        for claim in read.get("nodeClaims") or []:
            if nodeclaim_pool(claim) != owner.group:
                continue
            deleting = bool(_meta(claim).get("deletionTimestamp"))
            node = _status(claim).get("nodeName")
            found[str(_meta(claim).get("name"))] = (deleting or not node or node in not_ready, deleting)
    elif owner.kind == owner_names.OWNER_ASG:
        # The group's own health lags: a running instance whose Node is not Ready is still Healthy to it.
        not_ready = set((read.get("readiness") or {}).get("notReadyInstances") or [])
        for instance in (read.get("group") or {}).get("instances") or []:
            state, health = str(instance.get("lifecycleState") or ""), instance.get("health")
            replacing = health == owner_names.ASG_UNHEALTHY or state.startswith("Terminating")
            unhealthy = replacing or health != owner_names.ASG_HEALTHY or state != owner_names.ASG_IN_SERVICE or \
                instance.get("instanceId") in not_ready
            found[str(instance.get("instanceId"))] = (unhealthy, replacing)
    elif owner.kind == owner_names.OWNER_CAPI_MACHINE:
        for machine in read.get("machines") or []:
            if capi_group(machine) != owner.group:
                continue
            status = _status(machine)
            deleting = bool(_meta(machine).get("deletionTimestamp"))
            replacing = deleting or condition_is(status, owner_names.CAPI_OWNER_REMEDIATED, "False")
            unhealthy = replacing or not condition_is(status, owner_names.CAPI_NODE_READY, "True") or \
                condition_is(status, owner_names.CAPI_HEALTH_CHECK_SUCCEEDED, "False")
            found[f"{_meta(machine).get('namespace')}/{_meta(machine).get('name')}"] = (unhealthy, replacing)
    return found


def _member_of(owner: Owner, other: dict) -> str:
    if owner.kind == owner_names.OWNER_ASG:
        return str(other.get("instanceID") or "")
    name = str(other.get("name") or "")
    return f"{other['namespace']}/{name}" if other.get("namespace") else name


def _claim_order(claim_time, uid) -> tuple:
    return (str(claim_time or ""), str(uid or ""))


def _others_in_group(owner: Owner, requests: list[dict], my_uid: str):
    """(request uid, its status.replacement, its member) of each other live FencingRequest of the owner's group."""
    for request in requests:
        meta = _meta(request)
        if meta.get("uid") == my_uid or meta.get("deletionTimestamp"):
            continue
        record = _status(request).get("replacement")
        record = record if isinstance(record, dict) else {}
        other = record.get("owner") if isinstance(record.get("owner"), dict) else {}
        if other.get("kind") == owner.kind and other.get("group") == owner.group:
            member = _member_of(owner, other)
            if member:
                yield meta.get("uid"), record, member


def claimed_elsewhere(owner: Owner, requests: list[dict], my_uid: str) -> dict[str, tuple]:
    """Members of the owner's group another live FencingRequest has claimed a place in the budget for and not
    asked yet: member -> the claim's order (claimTime, uid)."""
    return {member: _claim_order(record["claimTime"], uid)
            for uid, record, member in _others_in_group(owner, requests, my_uid)
            if record.get("claimTime") and not record.get("requestedTime") and not record.get("outcome")}


def requested_elsewhere(owner: Owner, requests: list[dict], my_uid: str) -> set[str]:
    """Members of the owner's group whose replacement another live FencingRequest has asked for."""
    return {member for _, record, member in _others_in_group(owner, requests, my_uid) if record.get("requestedTime")}


def group_view(owner: Owner, read: dict, requests: list[dict], my_uid: str, my_claim: str | None = None) \
        -> GroupView:
    """The owner's group as read now; this node's own member counts as unhealthy, never as in flight. Other
    requests' claims count as in flight; with ``my_claim`` (this request's claimTime), those ordered after it
    are told apart (``claimed_later``)."""
    listed = members(owner, read)
    asked = requested_elsewhere(owner, requests, my_uid)
    claimed = claimed_elsewhere(owner, requests, my_uid)
    mine = _claim_order(my_claim, my_uid) if my_claim else None
    unhealthy = sum(1 for key, (sick, _) in listed.items() if sick or key == owner.member)
    in_flight = [key for key, (_, going) in listed.items()
                 if key != owner.member and (going or key in asked or key in claimed)]
    later = sum(1 for key in in_flight if mine is not None and key in claimed and key not in asked
                and not listed[key][1] and claimed[key] > mine)
    return GroupView(owner.group, len(listed), unhealthy, len(in_flight), later)
