"""Repair: which of a pool's Machines were fenced, and whether their workloads are recovered (pure).

A Machine is fenced when one of the FencingRequests in nodewarden's own
namespace (where only operators and nodewarden write) powered off exactly
its instance behind exactly its Node:

- the request names the Node the Machine joined (``status.nodeName``), and
  every uid it records for that Node is the one the Machine recorded;
- the instance the request found (``providerStatus.instanceID``) is the
  Machine's ``status.instanceID``;
- its action is Off, and FencingSucceeded is True: DescribeInstances
  confirmed the instance stopped or terminated.

Such a Machine's Node can no longer write, so its replacement starts at
once. The Machine itself is deleted only once the request says the Node's
pods and volumes were recovered (``Recovered`` True, or the request
Succeeded): terminating it earlier would race the recovery.

A Node's FencingComplete condition is not read here: a Node's conditions are
written by its kubelet too, and say nothing about which instance was stopped.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from hooks import conditions, timefmt
from hooks.fencing.names import (ACTION_OFF, FENCING_SUCCEEDED, FINISHED_PHASES, RECOVERED, RECOVERING,
                                 SUCCEEDED)


@dataclass(frozen=True)
class Fenced:
    request: str  # namespace/name of the FencingRequest
    at: dt.datetime  # when the power-off was confirmed
    recovered: bool


def _section(obj, key: str) -> dict:
    value = obj.get(key) if isinstance(obj, dict) else None
    return value if isinstance(value, dict) else {}


def by_node(requests: list[dict], namespace: str) -> dict[str, list[dict]]:
    """The live FencingRequests of ``namespace`` by the Node they name: each Machine then looks at its own."""
    found: dict[str, list[dict]] = {}
    for request in requests:
        meta = _section(request, "metadata")
        node = _section(_section(request, "spec"), "nodeRef").get("name")
        if meta.get("namespace") == namespace and not meta.get("deletionTimestamp") and isinstance(node, str):
            found.setdefault(node, []).append(request)
    return found


def fenced_machines(machines: list[dict], requests: list[dict], namespace: str) -> dict[str, Fenced]:
    """Fenced facts by Machine uid, for every Machine one of the requests fenced."""
    index = by_node(requests, namespace)
    found = {}
    for machine in machines:
        fence = fenced(machine, index.get(machine["status"].get("nodeName") or "", []), namespace)
        if fence is not None:
            found[machine["metadata"]["uid"]] = fence
    return found


def fenced(machine: dict, requests: list[dict], namespace: str) -> Fenced | None:
    """The FencingRequest that fenced the Machine's own instance and Node, if one did."""
    status = machine["status"]
    node, node_uid, instance = status.get("nodeName"), status.get("nodeUID"), status.get("instanceID")
    if not (isinstance(node, str) and node and isinstance(node_uid, str) and node_uid
            and isinstance(instance, str) and instance):
        return None
    found = None
    for request in requests:
        meta, spec, st = _section(request, "metadata"), _section(request, "spec"), _section(request, "status")
        provider, ref = _section(st, "providerStatus"), _section(spec, "nodeRef")
        if meta.get("namespace") != namespace or meta.get("deletionTimestamp"):
            continue
        if ref.get("name") != node or provider.get("nodeUID") != node_uid or ref.get("uid") not in (None, node_uid):
            continue
        if provider.get("instanceID") != instance or spec.get("action", ACTION_OFF) != ACTION_OFF:
            continue
        succeeded = conditions.find(st, FENCING_SUCCEEDED) or {}
        confirmed = timefmt.parse(succeeded.get("lastTransitionTime"))
        if succeeded.get("status") != "True" or confirmed is None:
            continue
        if st.get("phase") not in (RECOVERING, SUCCEEDED):
            continue
        recovered = st.get("phase") == SUCCEEDED or conditions.is_true(st, RECOVERED)
        candidate = Fenced(f"{meta.get('namespace')}/{meta.get('name')}", confirmed, recovered)
        if found is None or candidate.at < found.at:
            found = candidate
    return found


def in_flight(machine: dict, requests: list[dict], namespace: str) -> bool:
    """Whether a FencingRequest of ours for the Machine's Node is not finished: its power state is fencing's."""
    node = machine["status"].get("nodeName")
    if not isinstance(node, str) or not node:
        return False
    for request in requests:
        meta, spec, st = _section(request, "metadata"), _section(request, "spec"), _section(request, "status")
        if meta.get("namespace") == namespace and _section(spec, "nodeRef").get("name") == node \
                and st.get("phase") not in FINISHED_PHASES:
            return True
    return False
