"""Decide, then act: the shape shared by every controller.

``decide(request, settings, now, observed) -> Plan`` is pure: the response a
controller wants if every action succeeds, plus the actions. ``observed`` is
a JSON-able dict of what the controller looked up before deciding (AWS state,
pods on a node), so JSON fixtures can give it too. ``sync`` gathers
``observed``, decides, runs the actions through actuators and settles the
response with their outcomes, so a failure never loses what already happened.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Action:
    kind: str  # e.g. "elbv2.deregister", "kube.evict", "event"
    target: str  # what it acts on: an ARN, "namespace/name", a node name
    params: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "target": self.target, "params": self.params}


@dataclass(frozen=True)
class Outcome:
    action: Action
    ok: bool
    error: str = ""
    result: Any = None


@dataclass
class Plan:
    response: dict
    actions: list[Action] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"response": self.response, "actions": [a.to_dict() for a in self.actions]}


def backoff(settings, attempt: int) -> float:
    """Exponential backoff for a failing step, capped; attempt counts from 1."""
    # The exponent is capped: 2.0 ** 1024 overflows a float, and past 2 ** 30
    # every realistic cap has long been reached.
    exponent = min(max(1, int(attempt)), 31) - 1
    return min(settings.error_backoff_max_seconds, settings.error_backoff_seconds * 2 ** exponent)
