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
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from hooks.events import Event


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


Precondition = PoweredOff | SameObject | InstanceOf | Orphaned | ClusterInstance


@dataclass(frozen=True)
class Action:
    kind: str  # e.g. "elbv2.deregister", "kube.evict"
    target: str  # what it acts on: an ARN, "namespace/name", a node name
    params: dict = field(default_factory=dict)
    record: tuple[Change, ...] = ()
    requires: tuple[Precondition, ...] = ()
    reports: Event | None = None
    background: bool = False  # carried on after the call answers (see the module docstring)

    def to_dict(self) -> dict:
        out: dict = {"kind": self.kind, "target": self.target, "params": self.params}
        if self.background:
            out["background"] = True
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
    code: str = ""  # the AWS error code or exception class of a failure; "Precondition" when one did not hold


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
    # Sequencing for the actions (see hooks.actuators.Gate); None runs them all in order.
    gate: Any = None
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
