"""Slots from what the API server holds: a Node with the pods bound to it, as the scheduler sees its room (pure).

A Node's room is its allocatable minus what every pod bound to it asks
(a terminating pod holds its room until it is gone, as kube-scheduler
counts it), and the host ports those pods hold; the taints a pod must
tolerate are the Node's own, startup taints included while it still has
them. Pods that finished hold nothing.
"""
from __future__ import annotations

from typing import Any, Iterable

from hooks import conditions, machine_names
from hooks.contract import RequestError
from hooks.machines.spec import Taint
from hooks.provisioning import pods, resources
from hooks.provisioning.resources import Resources
from hooks.provisioning.scheduling import Slot

FINISHED = ("Succeeded", "Failed")


def _mapping(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def name_of(obj: Any) -> str:
    name = _mapping(_mapping(obj).get("metadata")).get("name")
    return name if isinstance(name, str) else ""


def finished(pod: Any) -> bool:
    return _mapping(_mapping(pod).get("status")).get("phase") in FINISHED


def taints_of(node: Any) -> tuple[Taint, ...]:
    """The Node's taints that keep a pod off unless tolerated (PreferNoSchedule is only a preference)."""
    found = []
    raw = _mapping(_mapping(node).get("spec")).get("taints")
    for item in raw if isinstance(raw, list) else []:
        item = _mapping(item)
        key, effect, value = item.get("key"), item.get("effect"), item.get("value")
        if isinstance(key, str) and key and isinstance(effect, str):
            found.append(Taint(key, effect, value if isinstance(value, str) else None))
    return tuple(found)


def requested(bound: Iterable[Any]) -> Resources:
    """What the pods bound to a Node ask of it; a pod whose requests do not read asks for one pod's place."""
    total = resources.ZERO
    for pod in bound:
        if finished(pod):
            continue
        try:
            total += pods.requests_of(_mapping(_mapping(pod).get("spec")))
        except RequestError:
            total += resources.ONE_POD
    return total


def usable(node: Any) -> bool:
    """Whether new pods may go to the Node now: Ready, not cordoned, not being deleted, not leaving."""
    node = _mapping(node)
    meta, spec = _mapping(node.get("metadata")), _mapping(node.get("spec"))
    if meta.get("deletionTimestamp") or spec.get("unschedulable") is True:
        return False
    if any(t.key in (machine_names.DISRUPTED_TAINT, machine_names.UNREGISTERED_TAINT) for t in taints_of(node)):
        return False
    return conditions.is_true(node.get("status"), "Ready")


def of_node(node: Any, bound: Iterable[Any], pool: str, machine: str | None = None) -> Slot | None:
    """The Node as a Slot, with the pods ``bound`` to it; None when its allocatable does not read."""
    node = _mapping(node)
    labels = _mapping(_mapping(node.get("metadata")).get("labels"))
    try:
        allocatable = resources.parse(_mapping(node.get("status")).get("allocatable"), "node.status.allocatable")
    except RequestError:
        return None
    bound = [p for p in bound if not finished(p)]
    residents = tuple(pods.resident(p) for p in bound)
    return Slot(name=name_of(node), pool=pool,
                labels={k: v for k, v in labels.items() if isinstance(k, str) and isinstance(v, str)},
                taints=taints_of(node), allocatable=allocatable, requested=requested(bound),
                pods=residents, machine=machine, host_ports=frozenset(p for r in residents for p in r.host_ports))

