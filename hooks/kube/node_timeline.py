"""What node-fencing's decision on one node rests on, read from the API server.

The Node with every NodeFencingPolicy and the node's FencingRequest, as the
hook request a decision is made on (a body only says which node), and, when
fencing is due, the node's pods with the access modes of their claims
(fast failover).
"""
from __future__ import annotations

import dataclasses

from hooks.contract import DECORATOR, HookRequest, ObjectGroups, RequestError, parse_request
from hooks.fencing import failover, names
from hooks.fencing.policy import Policy
from hooks.kube import fresh, pods, policy_cache
from hooks.kube.fencing import claim_access_modes
from hooks.plan import error_text


def rebuilt(request: HookRequest, kube, namespace: str) -> HookRequest:
    """The request rebuilt from the API server: the Node (with the body's uid), every NodeFencingPolicy, and
    the node's FencingRequest in ``namespace``. Raises fresh.Unverified when any cannot be read."""
    node = fresh.same_parent(request, kube).parent
    try:
        policies_now = policy_cache.read_all(kube)
    except Exception as exc:  # noqa: BLE001 - no policies read, no proof
        raise fresh.Unverified(f"cannot list NodeFencingPolicies: {error_text(exc)}") from exc
    fr_name = names.request_name(request.name)
    fencing_request = fresh.read(kube, names.REQUEST_KIND, fr_name, namespace)
    children = {f"{names.REQUEST_KIND}.{names.API_VERSION}": {f"{namespace}/{fr_name}": fencing_request}} \
        if fencing_request else {}
    try:
        return dataclasses.replace(
            request, parent=node,
            related=ObjectGroups.parse(policy_cache.related(policies_now), "related"),
            children=ObjectGroups.parse(children, "children"))
    except RequestError as exc:
        raise fresh.Unverified(f"an object as the API server has it: {exc}") from None


def of_node(kube, node_name: str, uid: str, namespace: str) -> HookRequest:
    """The Node ``node_name`` of ``uid`` as a verified node-fencing request, from the API server alone."""
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node_name, "uid": uid}}
    return dataclasses.replace(rebuilt(parse_request({"object": body, "attachments": {}}, DECORATOR), kube,
                                       namespace), verified=True)


def failover_pods(kube, node_name: str, policy: Policy) -> dict:
    """The node's pods (summarized) and the access modes of the claims of those the policy may fail over,
    as ``observed``; a failed list is ``podsError`` and an unreadable claim its ``error``, never raised."""
    observed: dict = {}
    try:
        node_pods = [failover.summarize(p) for p in pods.on_node(kube, node_name)]
        observed["pods"] = node_pods
        claims = {}
        for pod in node_pods:
            if failover.chosen(pod, policy) is None:
                continue
            for key in failover.claim_keys(pod):
                if key in claims:
                    continue
                namespace, name = key.split("/", 1)
                try:
                    claims[key] = {"accessModes": claim_access_modes(kube, namespace, name)}
                except Exception as exc:  # noqa: BLE001 - unknown counts as single-writer
                    claims[key] = {"error": error_text(exc)}
        observed["claims"] = claims
    except Exception as exc:  # noqa: BLE001
        observed = {"podsError": error_text(exc)}
    return observed
