"""The Node Fencing KEP's timeline on one node, and fast failover: node-fencing's decision.

Judged from the NodeConditions only, each call moves the node to where it
should be (hooks/fencing/node_phases/, one module each):

  healthy    nothing written; leftovers of an earlier fencing are cleared
             (conditions, taints) and the FencingRequest goes once it is done
  triaged    an unhealthy condition of the policy: FencingTriaged=True and the
             node.kubernetes.io/fencingtriaged PreferNoSchedule taint
  required   it lasted the policy's duration, the node is not control plane
             (unless allowed) and the storm guard allows: FencingRequired=True,
             the node.kubernetes.io/fencingrequired NoSchedule taint, and a
             FencingRequest; pods chosen for fast failover are force-deleted
  complete   the FencingRequest confirmed the power-off: FencingComplete=True

While some policy may count it as unhealthy, the node also has its
UnhealthyNode record, which the policies' counts relate.
"""
from __future__ import annotations

import datetime as dt

from hooks.config import Settings
from hooks.contract import HookRequest
from hooks.fencing import names
from hooks.fencing.node_phases.attachments import with_record
from hooks.fencing.node_phases.fence import fence
from hooks.fencing.node_phases.release import release
from hooks.fencing.node_phases.situation import assess
from hooks.plan import Plan


def decide(request: HookRequest, settings: Settings, now: dt.datetime, observed: dict) -> Plan:
    """Where the node should be at ``now``; ``observed``: its pods and their claims, when fencing is due."""
    sit = assess(request, now, settings)
    plan = fence(request, sit, settings, now, observed) if sit.unhealthy else release(request, sit, settings, now)
    return with_record(request, sit, plan)


def request_to_make(request: HookRequest, settings: Settings, now: dt.datetime) -> dict | None:
    """The FencingRequest this decision makes at ``now`` and the node does not have yet (None when there is
    none: the node is not due, not admitted, held, or has its request of this spell already)."""
    plan = decide(request, settings, now, {})
    existing = {(c.get("metadata") or {}).get("name") for c in request.children.of_kind(names.REQUEST_KIND,
                                                                                         names.API_GROUP)}
    made = [a for a in plan.response.get("attachments") or []
            if a.get("kind") == names.REQUEST_KIND and a["metadata"]["name"] not in existing]
    return made[0] if made else None
