"""The node's attachments: its FencingRequest, and its UnhealthyNode record while it is flagged.

Whatever the governing policy says, the node has an UnhealthyNode record
(hooks/fencing/records.py) while any policy selecting it may count it as
unhealthy (storm.flagged): the policies' counts relate those records, never
the Nodes.
"""
from __future__ import annotations

import dataclasses

from hooks import fencing_names, fields
from hooks.config import Settings
from hooks.contract import HookRequest
from hooks.fencing import records
from hooks.fencing.node_phases.situation import Situation
from hooks.plan import Plan


def desired_request(request: HookRequest, sit: Situation, settings: Settings) -> dict:
    """The node's FencingRequest; an existing one keeps its spec (fencing in flight never changes course)."""
    existing = sit.fencing_request
    if existing is not None:
        meta = existing["metadata"]
        return {
            "apiVersion": fencing_names.API_VERSION,
            "kind": fencing_names.REQUEST_KIND,
            "metadata": {k: meta[k] for k in ("name", "namespace", "labels", "annotations") if meta.get(k)},
            "spec": dict(existing.get("spec") or {}),
        }
    return {
        "apiVersion": fencing_names.API_VERSION,
        "kind": fencing_names.REQUEST_KIND,
        "metadata": {
            "name": fencing_names.request_name(request.name),
            "namespace": settings.namespace,
            "labels": {fencing_names.MANAGED_BY_LABEL: fencing_names.MANAGED_BY},
            "annotations": {fencing_names.POLICY_ANNOTATION: sit.policy.name},
        },
        "spec": {
            "nodeRef": {"name": request.name, **({"uid": request.meta["uid"]} if request.meta.get("uid") else {})},
            "action": sit.policy.action,
            "recoveryStrategy": sit.policy.strategy,
            # The policy's word that control-plane nodes may be fenced; fencing-request refuses them otherwise,
            # on any evidence, whatever the Node's labels say.
            **({} if sit.policy.exclude_control_plane else {"allowControlPlane": True}),
            # The policy's replacement, in full: the request's own spec governs from now on.
            "replacement": sit.policy.replacement.to_dict(),
        },
    }


def request_done(fr: dict) -> bool:
    """Finished, and no out-of-service taint of its own left to take off."""
    st = fr.get("status") or {}
    recovery = st.get("recovery") if isinstance(st.get("recovery"), dict) else {}
    return st.get("phase") in fencing_names.FINISHED_PHASES and recovery.get("outOfServiceTaint") != fencing_names.TAINT_APPLIED


def with_record(request: HookRequest, sit: Situation, plan: Plan) -> Plan:
    """The plan with the node's UnhealthyNode record among its attachments while it is flagged.

    The record holds the conditions this response leaves on the node, so a
    count reads our own FencingRequired and FencingComplete without waiting
    for another sync.
    """
    if not sit.flagged:
        return plan
    status = plan.response.get("status") or fields.mapping(request.parent, "status")
    record = records.build(request.name, request.meta.get("uid"), request.labels, status, list(sit.counting))
    return dataclasses.replace(plan, response={**plan.response,
                                               "attachments": [*plan.response["attachments"], record]})
