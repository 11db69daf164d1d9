"""Replacement: once the node is fenced and recovered, its owner is asked to replace it (spec.replacement).

Runs on a finished request whose recovery is done (``Recovered=True``):
with action Off at once; with action Reboot only if the node is not Ready
again within ``rebootTimeout`` of the recovery's end (when the start was
first issued), and after a group's instance has left Standby. The owner is
proven from what it holds, read fresh (hooks/replacement/owners.py), only
for the Node this request fenced (not a namesake), and asked only while no
guard holds (hooks/replacement/guard.py), on a call after the one that
claimed its place in the group's budget; each action carries the facts it
rests on, read again right before it runs (for a node left powered off, that
its instance still is). Every wait
ends NODEWARDEN_REPLACEMENT_TIMEOUT_SECONDS after the replacement started
(``Abandoned``).

Also the Auto Scaling Standby around a Reboot (``standby_before_stop``,
called by power): a group counts a stopped instance as unhealthy and
replaces it, so its instance enters Standby before the stop and leaves it
once the node is Ready again.
"""
from __future__ import annotations

from typing import Callable

from hooks import conditions, events, fencing_names, owner_names, providerid, timefmt
from hooks.aws_rate_buckets import THROTTLE_CODES
from hooks.ec2_names import RUNNING
from hooks.fencing import health
from hooks.fencing.request_phases import authority, ownership
from hooks.fencing.request_phases.state import Step, node_gone, reboots, recorded
from hooks.plan import (PRECONDITION, TRANSPORT, Action, CapiMachineOf, Change, ClusterInstance, GroupMember,
                        NodeClaimOf, Outcome, PoweredOff, SameObject, backoff)
from hooks.replacement import guard, owners

# Final outcomes besides the owner's replacement itself.
_FINAL = (*owner_names.DONE_REASONS, owner_names.DISABLED, owner_names.UNATTRIBUTED, owner_names.ABANDONED,
          owner_names.NOT_NEEDED)
# What says "not now" rather than "no", so an EnterStandby failing so is tried again: AWS slowing us down or
# failing, or not reached at all (the call may have landed; the next call finds the Standby it made).
_TRY_AGAIN = (*THROTTLE_CODES, TRANSPORT, "ServiceUnavailable", "InternalFailure", "InternalError",
              "ResourceContention")
# The kinds of the actions this phase (and the standby steps) plans; settle reads their failures.
ACTION_KINDS = ("kube.delete-nodeclaim", "kube.remediate-capi-machine", "kube.delete-machine", "asg.set-unhealthy",
                "asg.replace-from-standby", "asg.enter-standby", "asg.exit-standby", "ec2.terminate")


# --------------------------------------------------------------------------- when


def _rec(step: Step) -> dict:
    return step.replacement


def due(status: dict, spec) -> bool:
    """Recovered, and the request finished (a Reboot powered on again, or failing to); what the replacement
    still has to do is not final yet."""
    rec = recorded(status, "replacement")
    finished = status.get("phase") in fencing_names.FINISHED_PHASES
    if finished and rec.get("standby") == owner_names.STANDBY_ENTERED:
        return True  # a Standby entered is left whatever else happened
    if not spec.replacement.declared or not conditions.is_true(status, fencing_names.RECOVERED) or not finished:
        return False
    if spec.replacement.mode == owner_names.REPLACE_NONE and spec.action != fencing_names.ACTION_REBOOT:
        return not conditions.find(status, owner_names.OWNER_REPLACEMENT)
    cond = conditions.find(status, owner_names.OWNER_REPLACEMENT) or {}
    return not (rec.get("outcome") in _FINAL and cond.get("reason") == rec.get("outcome"))


def needs_proofs(status: dict, spec, node: dict | None, now) -> bool:
    """Whether this call attributes the node and weighs the guards: gather reads the owners then."""
    if not due(status, spec) or spec.replacement.mode == owner_names.REPLACE_NONE:
        return False
    rec = recorded(status, "replacement")
    if rec.get("outcome"):
        return False
    if rec.get("standby") == owner_names.STANDBY_ENTERED and not reboots(status, spec):
        return False  # the Standby is left first
    return not reboots(status, spec) or _reboot_waited_out(status, spec, node, now)


def needs_standby_check(status: dict, spec) -> bool:
    """Before a Reboot's first stop: whether a group holds the instance (it then enters Standby first)."""
    provider = recorded(status, "providerStatus")
    return spec.replacement.declared and spec.action == fencing_names.ACTION_REBOOT and \
        not provider.get("stopAttempts") and \
        status.get("phase") in (None, fencing_names.PENDING, fencing_names.POWERING_OFF) and \
        not recorded(status, "replacement").get("standby")


def _ready_again(status: dict, node: dict | None) -> bool:
    """Ready, and turned Ready after the power-off (a Ready from before it is stale)."""
    if node is None:
        return False
    node_status = node.get("status") if isinstance(node.get("status"), dict) else {}
    if not health.is_ready(node_status):
        return False
    since = timefmt.parse((conditions.find(node_status, "Ready") or {}).get("lastTransitionTime"))
    off = timefmt.parse(recorded(status, "providerStatus").get("poweredOffTime"))
    return since is None or off is None or since >= off


def _reboot_waited_out(status: dict, spec, node: dict | None, now) -> bool:
    if _ready_again(status, node):
        return False
    waited = timefmt.seconds_since(recorded(status, "recovery").get("completionTime"), now) or 0.0
    return waited >= spec.replacement.reboot_timeout


# --------------------------------------------------------------------------- the phase


def replace(step: Step) -> None:
    """One step towards the owner's replacement of the fenced node."""
    if not due(step.status, step.spec):
        return
    rec = _rec(step)
    if rec.get("outcome") == owner_names.ABANDONED:
        return _conclude(step, owner_names.ABANDONED, rec.get("message") or "")
    if rec.get("standby") == owner_names.STANDBY_ENTERED and \
            not conditions.is_true(step.status, fencing_names.RECOVERED):
        _exit_standby(step, f"fencing failed: {step.status.get('errorReason') or 'Failed'}")
        return
    if rec.get("outcome"):
        return _conclude(step, rec["outcome"], rec.get("message") or "")
    if reboots(step.status, step.spec):
        if not _reboot_settled(step):
            return
    elif rec.get("standby") == owner_names.STANDBY_ENTERED:
        _exit_standby(step, "the reboot was not attempted")
        return
    if step.spec.replacement.mode == owner_names.REPLACE_NONE:
        return _conclude(step, owner_names.DISABLED, "spec.replacement.mode is None: the owner is not asked")
    if not reboots(step.status, step.spec) and _ready_again(step.status, _fenced(step)):
        # Powered off, then started again by someone: a node that serves again is not replaced.
        return _conclude(step, owner_names.NOT_NEEDED, f"node {step.spec.node_name} is Ready again since its "
                                                       "power-off: its owner is not asked to replace it")
    rec.setdefault("startTime", step.stamp())
    waited = timefmt.seconds_since(rec.get("startTime"), step.now) or 0.0
    if waited >= step.settings.replacement_timeout_seconds:
        message = f"gave up after {waited:.0f}s: {rec.get('heldReason') or rec.get('lastError') or 'not requested'}"
        if _in_standby(step):
            message += f"; instance {step.provider.get('instanceID')} is left in Standby in Auto Scaling group " \
                       f"{rec.get('standbyGroup')}"
        step.event(events.OWNER_REPLACEMENT_ABANDONED, f"Node {step.spec.node_name}: {message}", warning=True)
        return _conclude(step, owner_names.ABANDONED, message)
    proofs = step.observed.get("replacement")
    if not isinstance(proofs, dict):
        return step.resync(step.settings.fencing_poll_seconds)  # due since this call began: read on the next
    if step.node is None and not node_gone(step.observed):
        return _wait(step, step.observed.get("nodeError") or f"Node {step.spec.node_name} could not be read")
    owner = _attributed(step, _fenced(step), proofs)
    if owner is False:
        return
    if owner is None:
        return _unattributed(step, proofs)
    rec["owner"] = owner.to_dict()
    if owner.kind == owner_names.OWNER_MACHINE and step.spec.action == fencing_names.ACTION_OFF:
        # The NodePool replaces a Machine fenced with action Off by itself (hooks/machines/repair.py).
        return _conclude(step, owner_names.REPAIRED_BY_NODEPOOL,
                         f"Machine {owner.name}: its NodePool {owner.group} replaces it (repair)")
    if not _cleared(step, owner, proofs):
        return
    _request(step, owner, _fenced(step))


def _fenced(step: Step) -> dict | None:
    """The Node, while it is the one this request fenced (its uid, its instance); a namesake that joined since
    is another node, none of this request's business."""
    node = step.node
    if node is None:
        return None
    uid = step.provider.get("nodeUID")
    if uid and (node.get("metadata") or {}).get("uid") != uid:
        return None
    try:
        pid = providerid.parse((node.get("spec") or {}).get("providerID"))
    except providerid.ProviderIDError:
        return None
    known = step.provider.get("instanceID")
    return None if known and pid.instance_id != known else node


def _wait(step: Step, why: str) -> None:
    """What the replacement needs cannot be read now: said (reason Error) and read again, within the timeout."""
    _rec(step)["lastError"] = str(why)[:1000]
    step.condition(owner_names.OWNER_REPLACEMENT, "False", owner_names.ERROR, _rec(step)["lastError"])
    step.resync(backoff(step.settings, 1))


def _attributed(step: Step, node: dict | None, proofs: dict):
    """The proven owner of the fenced ``node``, None when none is proven (or the node is gone), False when that
    cannot be told yet (waiting). An owner this request recorded that its proof no longer shows is gone: that
    counts as done."""
    rec = _rec(step)
    try:
        owner = owners.attribute(node, proofs.get("proofs") or {}) if node is not None else None
    except owners.Unreadable as exc:
        _wait(step, f"the node's owner could not be read: {exc}")
        return False
    known = rec.get("owner") if isinstance(rec.get("owner"), dict) else None
    if known and (owner is None or owner.kind != known.get("kind")):
        reason = _DONE_BY_KIND.get(known.get("kind"), owner_names.REPAIRED_BY_NODEPOOL)
        _conclude(step, reason, f"{known.get('kind')} {known.get('name')} is already gone")
        return False
    return owner


_DONE_BY_KIND = {owner_names.OWNER_NODECLAIM: owner_names.NODECLAIM_DELETED,
                 owner_names.OWNER_ASG: owner_names.INSTANCE_MARKED_UNHEALTHY,
                 owner_names.OWNER_CAPI_MACHINE: owner_names.REMEDIATION_REQUESTED,
                 owner_names.OWNER_MACHINE: owner_names.REPAIRED_BY_NODEPOOL}


def _held(step: Step, reason: str, message: str) -> None:
    rec = _rec(step)
    before = conditions.find(step.status, owner_names.OWNER_REPLACEMENT) or {}
    if before.get("reason") != reason:
        step.event(events.OWNER_REPLACEMENT_HELD, f"Node {step.spec.node_name}: {message}", warning=True)
    rec["heldReason"] = reason
    step.condition(owner_names.OWNER_REPLACEMENT, "False", reason, message)
    step.resync(step.settings.fencing_resync_seconds)


def _storm(step: Step, proofs: dict) -> str | None:
    if proofs.get("policiesError"):
        return f"NodeFencingPolicies could not be read: {proofs['policiesError']}"
    labels = ((step.node or {}).get("metadata") or {}).get("labels") or {}
    return guard.storm_hold(proofs.get("policies") or [], labels, step.now,
                            step.settings.fencing_count_max_age_seconds)


def _cleared(step: Step, owner: owners.Owner | None, proofs: dict) -> bool:
    """No guard holds (else held, with the reason, and looked at again later)."""
    storm = _storm(step, proofs)
    view = None
    if owner is not None and owner.kind != owner_names.OWNER_MACHINE and not storm:
        error = proofs.get("groupError") or proofs.get("requestsError")
        if error or "group" not in proofs or "requests" not in proofs:
            _wait(step, f"the owner's group could not be read: {error or 'not read'}")
            return False
        view = guard.group_view(owner, proofs["group"], proofs["requests"],
                                str(step.request.meta.get("uid") or ""), _rec(step).get("claimTime"))
    held = guard.verdict(view, step.spec.replacement, storm)
    rec = _rec(step)
    if held is None and view is not None and not rec.get("claimTime"):
        # A place in the group's budget is claimed first, and taken on a later call only if the others'
        # claims, read once this one is written, still leave room (hooks/replacement/guard.py).
        rec.pop("heldReason", None)
        rec["claimTime"] = step.stamp()
        step.resync(step.settings.fencing_poll_seconds)
        return False
    if held is None:
        rec.pop("heldReason", None)
        return True
    if held == owner_names.HELD_BUDGET and rec.get("claimTime") and \
            view.replacing_before < step.spec.replacement.allowed_replacing(view.total):
        # Only later claims stand in the way: they yield to this one, which keeps its place and waits.
        step.resync(step.settings.fencing_poll_seconds)
        return False
    rec.pop("claimTime", None)
    if held == owner_names.HELD_STORM_GUARD:
        message = f"storm guard: {storm}"
    elif held == owner_names.HELD_GROUP_UNHEALTHY:
        message = (f"{view.unhealthy} of the {view.total} members of {owner.kind} group {view.name} are unhealthy; "
                   f"at most {step.spec.replacement.allowed_unhealthy(view.total)} may be "
                   f"(maxUnhealthy {step.spec.replacement.max_unhealthy})")
    else:
        message = (f"{view.replacing} replacement(s) already in flight in {owner.kind} group {view.name}; at most "
                   f"{step.spec.replacement.allowed_replacing(view.total)} "
                   f"(maxReplacing {step.spec.replacement.max_replacing})")
    _held(step, held, message)
    return False


def _request(step: Step, owner: owners.Owner, fenced: dict | None) -> None:
    """The owner's replacement action, recorded (and said) only once it succeeded."""
    node = step.spec.node_name
    if _in_standby(step) and owner.kind != owner_names.OWNER_ASG:
        _exit_standby(step, f"its owner, {owner.kind} {owner.name}, replaces node {node}")
        return
    provider_id = ((fenced or {}).get("spec") or {}).get("providerID") or ""
    if owner.kind == owner_names.OWNER_NODECLAIM:
        reason, action = owner_names.NODECLAIM_DELETED, Action(
            "kube.delete-nodeclaim", owner.name, {"uid": owner.uid},
            requires=(NodeClaimOf(owner.name, owner.uid, provider_id, node),))
        said = f"Deleted NodeClaim {owner.name} (NodePool {owner.group}): Karpenter replaces node {node}"
    elif owner.kind == owner_names.OWNER_ASG and _in_standby(step):
        # Out of Standby and Unhealthy in one step: in service and stopped, the group replaces it anyway.
        reason, action = owner_names.INSTANCE_MARKED_UNHEALTHY, Action(
            "asg.replace-from-standby", owner.instance_id, {"group": owner.group, "region": owner.region or None},
            requires=(GroupMember(owner.instance_id, owner.group, owner.region or None),))
        said = f"Took instance {owner.instance_id} out of Standby and set it Unhealthy in Auto Scaling group " \
               f"{owner.group}: the group replaces node {node}"
        return _ask(step, action, reason, said,
                    Change(("status", "replacement", "standby"), owner_names.STANDBY_EXITED))
    elif owner.kind == owner_names.OWNER_ASG:
        reason, action = owner_names.INSTANCE_MARKED_UNHEALTHY, Action(
            "asg.set-unhealthy", owner.instance_id, {"group": owner.group, "region": owner.region or None},
            requires=(GroupMember(owner.instance_id, owner.group, owner.region or None),))
        said = f"Set instance {owner.instance_id} Unhealthy in Auto Scaling group {owner.group}: the group " \
               f"replaces node {node}"
    elif owner.kind == owner_names.OWNER_CAPI_MACHINE:
        message = f"node {node} fenced by nodewarden (FencingRequest {step.request.meta.get('namespace')}/" \
                  f"{step.request.name}): powered off"
        reason, action = owner_names.REMEDIATION_REQUESTED, Action(
            "kube.remediate-capi-machine", f"{owner.namespace}/{owner.name}", {"uid": owner.uid, "message": message},
            requires=(CapiMachineOf(owner.namespace, owner.name, owner.uid, node),))
        said = f"Marked Cluster API Machine {owner.namespace}/{owner.name} for remediation: its owner " \
               f"({owner.group.split('/', 1)[-1]}) replaces node {node}"
    else:  # a nodewarden Machine after a Reboot that did not come back: deleted, its NodePool replaces it
        reason, action = owner_names.REPAIRED_BY_NODEPOOL, Action(
            "kube.delete-machine", owner.name, {"uid": owner.uid},
            requires=(SameObject("Machine", owner.name, owner.uid),))
        said = f"Deleted Machine {owner.name}: its NodePool {owner.group} replaces node {node}"
    if not reboots(step.status, step.spec):
        # Left powered off: the owner is asked only while the instance still is, read right before.
        instance, region = step.provider.get("instanceID") or owner.instance_id, step.provider.get("region") or None
        action = Action(action.kind, action.target, action.params,
                        requires=(*action.requires, PoweredOff(instance, region)))
    _ask(step, action, reason, said)


def _in_standby(step: Step) -> bool:
    return _rec(step).get("standby") == owner_names.STANDBY_ENTERED


def _ask(step: Step, action: Action, reason: str, said: str, *also: Change) -> None:
    step.actions.append(Action(
        action.kind, action.target, action.params, requires=action.requires,
        record=(Change(("status", "replacement", "outcome"), reason),
                Change(("status", "replacement", "message"), said),
                Change(("status", "replacement", "requestedTime"), step.stamp()), *also),
        reports=events.normal(events.OWNER_REPLACEMENT_REQUESTED, said)))
    step.resync(step.settings.fencing_poll_seconds)


def _unattributed(step: Step, proofs: dict) -> None:
    node = step.spec.node_name
    instance = step.provider.get("instanceID")
    if step.spec.replacement.unattributed == owner_names.UNATTRIBUTED_KEEP:
        message = f"no owner of node {node} is proven: instance {instance} is left powered off"
        step.event(events.NODE_UNATTRIBUTED, message, warning=True)
        return _conclude(step, owner_names.UNATTRIBUTED, message)
    if not instance or not step.settings.cluster_name:
        message = f"no owner of node {node} is proven, and its instance cannot be proven this cluster's: kept"
        step.event(events.NODE_UNATTRIBUTED, message, warning=True)
        return _conclude(step, owner_names.UNATTRIBUTED, message)
    if not _cleared(step, None, proofs):
        return
    region = step.provider.get("region") or None
    said = f"No owner of node {node} is proven (unattributed: Terminate): terminated instance {instance}"
    _ask(step, Action("ec2.terminate", instance, {"region": region},
                      requires=(PoweredOff(instance, region),
                                ClusterInstance(instance, step.settings.cluster_name, region))),
         owner_names.INSTANCE_TERMINATED, said)


def _conclude(step: Step, outcome: str, message: str) -> None:
    """The final word: the outcome, the condition, and the metric, each once."""
    rec = _rec(step)
    rec["outcome"] = outcome
    rec["message"] = message[:1000]
    rec.pop("heldReason", None)
    cond = conditions.find(step.status, owner_names.OWNER_REPLACEMENT) or {}
    status = "True" if outcome in owner_names.DONE_REASONS else "False"
    if cond.get("reason") == outcome and cond.get("status") == status:
        return
    step.condition(owner_names.OWNER_REPLACEMENT, status, outcome, rec["message"])
    if outcome != owner_names.DISABLED:
        kind = (rec.get("owner") or {}).get("kind") or "None"
        step.actions.append(Action("metric.owner-replacement", kind,
                                   {"outcome": outcome, "request": step.request.meta.get("uid") or ""}))


# --------------------------------------------------------------------------- Reboot and Standby


def _reboot_settled(step: Step) -> bool:
    """A Reboot: True once the node is known not to come back in time (and its instance is out of Standby);
    a node Ready again concludes (leaving Standby first)."""
    rec = _rec(step)
    if _ready_again(step.status, _fenced(step)):
        if rec.get("standby") == owner_names.STANDBY_ENTERED:
            _exit_standby(step, f"node {step.spec.node_name} is Ready again")
            return False
        _conclude(step, owner_names.NOT_NEEDED, f"node {step.spec.node_name} is Ready again after the reboot")
        return False
    waited = timefmt.seconds_since(step.recovery.get("completionTime"), step.now) or 0.0
    bound = step.spec.replacement.reboot_timeout
    if waited < bound:
        step.resync(min(step.settings.fencing_resync_seconds, bound - waited))
        return False
    if rec.get("standby") == owner_names.STANDBY_ENTERED and _running(step):
        _exit_standby(step, f"node {step.spec.node_name} is not Ready {bound:g}s after the reboot")
        return False
    # Not running (its power-on failed, say): back in service, the group would replace it at once, whatever the
    # guards say; it leaves Standby only with its replacement, once they allow it.
    return True


def _running(step: Step) -> bool:
    """The instance is running, as read in this call (unread is not running)."""
    return (step.observed.get("instance") or {}).get("state") == RUNNING


def _exit_standby(step: Step, why: str) -> bool:
    """The ExitStandby, tried until NODEWARDEN_REPLACEMENT_TIMEOUT_SECONDS after the first try (False once given
    up: at the group's maximum size, say, Auto Scaling refuses it for as long as the group stays there)."""
    rec = _rec(step)
    instance, group = step.provider.get("instanceID"), rec.get("standbyGroup")
    region = step.provider.get("region") or None
    if _standby_given_up(step, lambda waited: f"instance {instance} stays in Standby in Auto Scaling group {group}: "
                                              f"ExitStandby failed for {waited:.0f}s: "
                                              f"{rec.get('lastError') or 'not done'}"):
        return False
    step.actions.append(Action(
        "asg.exit-standby", instance, {"group": group, "region": region},
        requires=(GroupMember(instance, group, region),),
        record=(Change(("status", "replacement", "standby"), owner_names.STANDBY_EXITED),),
        reports=events.normal(events.STANDBY_EXITED, f"Instance {instance} left Standby in Auto Scaling group "
                                                     f"{group}: {why}")))
    step.resync(step.settings.fencing_poll_seconds)
    return True


def _standby_given_up(step: Step, message: Callable[[float], str]) -> bool:
    """NODEWARDEN_REPLACEMENT_TIMEOUT_SECONDS after the first try to leave Standby: abandoned, ``message`` (of the
    seconds waited) said in a Warning (True)."""
    rec = _rec(step)
    rec.setdefault("standbyExitStartTime", step.stamp())
    waited = timefmt.seconds_since(rec.get("standbyExitStartTime"), step.now) or 0.0
    if waited < step.settings.replacement_timeout_seconds:
        return False
    said = message(waited)
    step.event(events.OWNER_REPLACEMENT_ABANDONED, f"Node {step.spec.node_name}: {said}", warning=True)
    _conclude(step, owner_names.ABANDONED, said)
    return True


def standby_unanswered(status: dict) -> bool:
    """An EnterStandby was asked and neither its success nor its refusal recorded (its answer was lost): whether
    the instance is in Standby is known only from its group."""
    rec = recorded(status, "replacement")
    return bool(rec.get("standbyGroup")) and not rec.get("standby")


def leave_standby(step: Step, why: str) -> bool:
    """The ExitStandby of an instance this request put in Standby, if it is still there; True when the request
    must stay for it (planned, or whether it is there cannot be read yet)."""
    rec = recorded(step.status, "replacement")
    instance = recorded(step.status, "providerStatus").get("instanceID")
    if not instance or rec.get("outcome") == owner_names.ABANDONED:
        return False
    if standby_unanswered(step.status):
        if "asgInstance" not in step.observed or step.observed.get("asgError"):
            return _wait_for_membership(step, instance, rec["standbyGroup"])
        found = step.observed["asgInstance"]
        if not (isinstance(found, dict) and found.get("group") == rec["standbyGroup"] and
                found.get("lifecycleState") in (owner_names.ASG_STANDBY, owner_names.ASG_ENTERING_STANDBY)):
            return False  # the EnterStandby never took: nothing to leave
        _rec(step)["standby"] = owner_names.STANDBY_ENTERED
    elif rec.get("standby") != owner_names.STANDBY_ENTERED:
        return False
    return _exit_standby(step, why)


def _wait_for_membership(step: Step, instance: str, group: str) -> bool:
    """Whether an unanswered EnterStandby took cannot be read: wait, until the replacement timeout."""
    detail = str(step.observed.get("asgError") or "not read")
    if _standby_given_up(step, lambda waited: f"instance {instance} may be left in Standby in Auto Scaling group "
                                              f"{group}: its membership could not be read for {waited:.0f}s: "
                                              f"{detail}"):
        return False
    _wait(step, f"whether instance {instance} entered Standby in Auto Scaling group {group} could not be read: "
                f"{detail}")
    return True


def standby_before_stop(step: Step) -> bool:
    """Before a Reboot's first stop: True when the stop may go (no group holds the instance, it is in
    Standby, or Standby was refused); else the EnterStandby, or a bounded wait for the group to be read."""
    if not needs_standby_check(step.status, step.spec):
        return True
    if "asgInstance" not in step.observed or step.observed.get("asgError"):
        detail = str(step.observed.get("asgError") or "not read")
        step.provider["lastDescribeError"] = f"the instance's Auto Scaling group could not be read: {detail}"[:1000]
        step.cannot_tell("AutoScalingUnknown", "whether an Auto Scaling group holds the instance could not be read",
                         detail)
        return False
    found = step.observed.get("asgInstance")
    instance = step.provider["instanceID"]
    if not isinstance(found, dict) or found.get("instanceId") != instance or not found.get("group"):
        return True
    if found.get("lifecycleState") == owner_names.ASG_STANDBY:
        if _rec(step).get("standbyGroup") == found["group"]:
            # This request asked for it and the answer was lost: its own Standby, left again later.
            _rec(step)["standby"] = owner_names.STANDBY_ENTERED
        return True  # else an operator's: left as it is
    if not (ownership.ours(step) and authority.may_fence(step)):
        return False
    rec = _rec(step)
    waited = timefmt.seconds_since(step.status.get("startTime"), step.now) or 0.0
    if rec.get("lastError") and waited >= step.settings.fencing_queue_timeout_seconds:
        step.fail("StandbyFailed", f"instance {instance} could not enter Standby in Auto Scaling group "
                                   f"{found['group']} for {waited:.0f}s: {rec['lastError']}")
        return False
    group, region = found["group"], step.provider.get("region") or None
    rec["standbyGroup"] = group
    step.actions.append(Action(
        "asg.enter-standby", instance, {"group": group, "region": region},
        requires=(GroupMember(instance, group, region), *ownership.proof(step)),
        record=(Change(("status", "replacement", "standby"), owner_names.STANDBY_ENTERED),),
        reports=events.normal(events.STANDBY_ENTERED, f"Instance {instance} entered Standby in Auto Scaling group "
                                                      f"{group} (desired capacity decremented): the group does not "
                                                      "replace it while it reboots")))
    step.resync(step.settings.fencing_poll_seconds)
    return False


# --------------------------------------------------------------------------- failures


def failed(status: dict, outcome: Outcome) -> events.Event | None:
    """What a failed action of this phase means, written into ``status``; the Event that says so, if any.

    A refused EnterStandby (anything but throttling, a server error, AWS not reached or a precondition) means
    no reboot: the instance is powered off and left to the group."""
    rec = status.setdefault("replacement", {})
    rec["lastError"] = f"{outcome.action.kind} {outcome.action.target}: {outcome.error}"[:1000]
    if outcome.action.kind != "asg.enter-standby" or outcome.code in (PRECONDITION, *_TRY_AGAIN):
        return None
    rec["standby"] = owner_names.STANDBY_REFUSED
    return events.warning(events.STANDBY_REFUSED, f"EnterStandby of instance {outcome.action.target} in Auto Scaling "
                                                  f"group {outcome.action.params.get('group')} was refused "
                                                  f"({outcome.error}): the node is not rebooted; it is powered off "
                                                  "and replaced through the group")

