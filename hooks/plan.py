"""Decide, then act: the shape shared by every controller.

``decide(request, settings, now, observed) -> Plan`` is pure: the response a
controller wants, the actions that get it there and the Events that report
them. ``observed`` is a JSON-able dict of what the controller looked up before
deciding (AWS state, pods on a node), so JSON fixtures can give it too.

An Action carries two promises the runner (``hooks.pipeline``) keeps for it:

- ``record``: the changes to the response that are true only once the action
  has succeeded (a counter of deleted pods, "the taint is on"). They are
  applied after it succeeds and never otherwise, so a failed step is simply
  still pending on the next call.
- ``requires``: the facts it rests on (the instance is powered off, the object
  is still the one with this uid), read again from AWS or the API server right
  before it runs. An action whose precondition does not hold does not run.

``reports`` is the Event that says the action happened: sent only if it did.

A ``background`` action is carried on after the call has answered: it is
handed over once every other action of the call has succeeded, and its
``record`` is written to the parent Node by the hook when it succeeds
(``hooks.pipeline.run``). Only an idempotent step whose record the next call
would otherwise redo may be one: a background action lost with its process
is simply done again.

A ``carry_on`` action is one the call waits for only while it is being
sent: once its call has to wait for a rate-limit token, or behind another
call to the same target, it answers UNDER_WAY and is carried on after the
call, its ``record`` written as a background action's is, with no thread
held while it waits. So a wave of callers never holds the hook server's
threads while AWS's budget is spent; a failure met in the background is
met again, and said, by a later call.

A ``Gate`` sequences a plan's actions: it may answer for one, unrun, with an
Outcome whose ``code`` says why (DEFERRED, HELD); an action whose
precondition does not hold answers PRECONDITION. ``failure_text`` and
``error_text`` are how a failure reads in a status, an annotation or an Event,
and ``unverified_text`` how a call the API server did not confirm does.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from botocore.exceptions import ClientError
from lightkube.core.exceptions import ApiError

from hooks.events import Event

# Outcome.code of an action that did not run. An action a Gate answers for was not tried: DEFERRED is no
# failure at all, HELD follows from a failure of its own call.
PRECONDITION = "Precondition"  # a precondition did not hold, read right before it would have run
# AWS not reached, or its answer never came (endpoint, connection, timeout): the call may or may not have landed.
TRANSPORT = "Transport"
DEFERRED = "Deferred"  # put off to the next call (this call's time is up, or AWS cannot take more now)
HELD = "Held"  # held behind an earlier step of this call that did not succeed
GATED = (DEFERRED, HELD)  # the codes a Gate answers with
UNDER_WAY = "UnderWay"  # a carry_on action still waiting to go out as the call answered: carried on after it
PUT_OFF = (DEFERRED, UNDER_WAY)  # not done in this call, and no failure: a later call or the background does it


@dataclass(frozen=True)
class Change:
    """One change to a response at ``path``: set a value, add to a counter, or extend a JSON list in a string."""

    path: tuple[str, ...]
    value: Any = None
    add: int = 0
    union: tuple = ()  # items merged into the JSON-encoded list found at ``path`` (an annotation)
    result: str = ""  # set the value the action's actuator returned under this key (what it created)

    def to_dict(self) -> dict:
        out: dict = {"path": list(self.path)}
        if self.add:
            out["add"] = self.add
        elif self.union:
            out["union"] = [list(i) if isinstance(i, tuple) else i for i in self.union]
        elif self.result:
            out["result"] = self.result
        else:
            out["value"] = self.value
        return out

    def apply(self, response: dict, result=None) -> None:
        """Apply in place; the containers along the path are copied first, never shared.

        ``result`` is what the action's actuator returned (read by ``result`` changes).
        """
        node = response
        for key in self.path[:-1]:
            child = node.get(key)
            child = dict(child) if isinstance(child, dict) else {}
            node[key] = child
            node = child
        last = self.path[-1]
        if self.add:
            current = node.get(last)
            node[last] = (current if isinstance(current, int) and not isinstance(current, bool) else 0) + self.add
        elif self.union:
            try:
                current = json.loads(node.get(last) or "[]")
            except (TypeError, ValueError):
                current = []
            merged = {tuple(i) if isinstance(i, list) else i for i in current if isinstance(i, (list, str, int))}
            merged |= set(self.union)
            try:
                ordered = sorted(merged)
            except TypeError:  # mixed item types: any fixed order will do
                ordered = sorted(merged, key=repr)
            node[last] = json.dumps([list(i) if isinstance(i, tuple) else i for i in ordered], separators=(",", ":"))
        elif self.result:
            node[last] = result.get(self.result) if isinstance(result, dict) else None
        else:
            node[last] = self.value


@dataclass(frozen=True)
class PoweredOff:
    """The instance is stopped or terminated, as DescribeInstances says right now."""

    instance_id: str
    region: str | None = None


@dataclass(frozen=True)
class SameObject:
    """The object exists on the API server with this uid (a namesake is another object)."""

    kind: str
    name: str
    uid: str
    namespace: str | None = None


@dataclass(frozen=True)
class InstanceOf:
    """The instance, if EC2 still knows it, carries the Machine's UID tag (it is that Machine's to act on).

    With ``cluster_name`` (given only for the instance the Machine's own status
    records) the cluster's tag ``kubernetes.io/cluster/<name>=owned`` is proof
    enough: a user's edit of the UID tag does not make it someone else's.
    """

    instance_id: str
    machine_uid: str
    region: str | None = None
    cluster_name: str = ""


@dataclass(frozen=True)
class Orphaned:
    """The instance is tagged for this cluster and pool, is older than ``min_age_seconds``, and no
    Machine on the API server has its UID tag or records it in status.instanceID: a leak, not a
    Machine's instance."""

    instance_id: str
    cluster_name: str
    pool: str
    min_age_seconds: float
    region: str | None = None


@dataclass(frozen=True)
class ClusterInstance:
    """The instance carries this cluster's tag (kubernetes.io/cluster/<name> = owned or shared), as
    DescribeInstances says right now: it is this cluster's to power off or on."""

    instance_id: str
    cluster_name: str
    region: str | None = None


@dataclass(frozen=True)
class NodeClaimOf:
    """The Karpenter NodeClaim of this uid still claims the node: its ``status.providerID`` and
    ``status.nodeName`` are the Node's, as the API server says right now. One no longer there holds (its
    delete answers that it is gone); another under its name does not."""

    name: str
    uid: str
    provider_id: str
    node_name: str


@dataclass(frozen=True)
class CapiMachineOf:
    """The Cluster API Machine of this uid still holds the node: its ``status.nodeRef.name`` is the Node's, as
    the API server says right now. One no longer there holds (its mark answers that it is gone); another under
    its name does not."""

    namespace: str
    name: str
    uid: str
    node_name: str


@dataclass(frozen=True)
class GroupMember:
    """The instance is in this Auto Scaling group, as DescribeAutoScalingInstances says right now. One no group
    holds any more holds (the step answers that it is gone); one in another group does not."""

    instance_id: str
    group: str
    region: str | None = None


@dataclass(frozen=True)
class Collectable:
    """cluster-gc's resource, read again from AWS right before its delete, is still one cluster-gc deletes now:
    its tags still say a controller of the cluster made it (an instance its Machine's, an ENI the VPC CNI's),
    and it is free (an ENI available, an Elastic IP unassociated, an instance not terminating). One EC2 no
    longer knows is gone, and its delete finds it so."""

    kind: str
    resource_id: str
    cluster_name: str
    region: str
    include_lb_controller: bool = False


Precondition = (PoweredOff | SameObject | InstanceOf | Orphaned | ClusterInstance | NodeClaimOf | CapiMachineOf
                | GroupMember | Collectable)


@dataclass(frozen=True)
class Action:
    kind: str  # e.g. "elbv2.deregister", "kube.evict"
    target: str  # what it acts on: an ARN, "namespace/name", a node name
    params: dict = field(default_factory=dict)
    record: tuple[Change, ...] = ()
    requires: tuple[Precondition, ...] = ()
    reports: Event | None = None
    background: bool = False  # carried on after the call answers (see the module docstring)
    carry_on: bool = False  # waited for only while being sent, else carried on after the call (UNDER_WAY)

    def to_dict(self) -> dict:
        out: dict = {"kind": self.kind, "target": self.target, "params": self.params}
        if self.background:
            out["background"] = True
        if self.carry_on:
            out["carryOn"] = True
        if self.record:
            out["record"] = [c.to_dict() for c in self.record]
        if self.requires:
            out["requires"] = [{"type": type(p).__name__, **p.__dict__} for p in self.requires]
        if self.reports is not None:
            out["reports"] = self.reports.to_dict()
        return out


@dataclass(frozen=True)
class Outcome:
    action: Action
    ok: bool
    error: str = ""
    result: Any = None
    code: str = ""  # the AWS error code or exception class of a failure, or why it did not run (PRECONDITION, GATED)
    # An UNDER_WAY outcome's own: waits for the action's answer (after the call) and gives its final Outcome.
    later: Callable[[], Outcome] | None = field(default=None, compare=False, repr=False)


class Gate:
    """Sequencing for a batch of actions: may hold an action back given what happened so far.

    ``hold(action, outcomes, started)`` answers None to run it, or an Outcome
    that stands for it unrun (code DEFERRED or HELD); ``started`` is when the
    hook call began (time.monotonic()).
    """

    def hold(self, action: Action, outcomes: list[Outcome], started: float) -> Outcome | None:
        return None


class TimeAllowance(Gate):
    """Puts every action off to the next call once this one has run ``seconds``; the first always runs, so
    however many actions a call plans, it answers within its allowance and each call makes progress."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic):
        self.seconds, self.clock = seconds, clock

    def hold(self, action: Action, outcomes: list[Outcome], started: float) -> Outcome | None:
        if outcomes and self.clock() >= started + self.seconds:
            return Outcome(action, False, "put off to the next call: this call's time budget is used up",
                           code=DEFERRED)
        return None


@dataclass
class Plan:
    response: dict
    actions: list[Action] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    # Decided on the request body alone, which proves nothing: the runner has the
    # controller verify the request with the API server before any of it is done.
    verify: bool = False
    # What the decision was made from, for the controller's settle step (not sent anywhere).
    basis: Any = None
    # Sequencing for the actions; None runs them all in order.
    gate: Gate | None = None
    # Annotations of the response that the hook writes to the parent Node itself once the
    # actions ran, rather than leaving them to Metacontroller (hooks.pipeline.persisted).
    persist: tuple[str, ...] = ()
    # Events that say the background actions happened: sent once every one of them has succeeded.
    background_events: list[Event] = field(default_factory=list)

    def to_dict(self) -> dict:
        out = {"response": self.response, "actions": [a.to_dict() for a in self.actions],
               "events": [e.to_dict() for e in self.events]}
        if self.persist:
            out["persist"] = list(self.persist)
        if self.background_events:
            out["backgroundEvents"] = [e.to_dict() for e in self.background_events]
        return out


def backoff(settings, attempt: int) -> float:
    """Exponential backoff for a failing step, capped; attempt counts from 1."""
    # The exponent is capped: 2.0 ** 1024 overflows a float, and past 2 ** 30
    # every realistic cap has long been reached.
    exponent = min(max(1, int(attempt)), 31) - 1
    return min(settings.error_backoff_max_seconds, settings.error_backoff_seconds * 2 ** exponent)


def failure_text(outcomes: list[Outcome]) -> str:
    """The failed actions, for an annotation or status field."""
    return "; ".join(f"{o.action.kind} {o.action.target}: {o.error}" for o in outcomes if not o.ok)[:2000]


def error_text(exc: BaseException) -> str:
    """An exception as text: AWS's error code and message, or the API server's status, when either answered."""
    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        return f"{err.get('Code', 'ClientError')}: {err.get('Message', '')}".strip()
    if isinstance(exc, ApiError):
        status = exc.status
        return f"{status.code} {status.reason}: {status.message}"
    return f"{type(exc).__name__}: {exc}"


def unverified_text(reason: str) -> str:
    """Why a call did nothing: the API server did not confirm what its body says."""
    return f"not verified with the API server: {reason}"
