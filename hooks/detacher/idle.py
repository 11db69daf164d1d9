"""The phases with nothing to detach (pure): a node not ours to touch (skip), and a serving one (idle)."""
from __future__ import annotations

from hooks.contract import decorator_response
from hooks.detacher.step import clear_error
from hooks.plan import Plan


def skip(request, sit, settings, now, observed) -> Plan:
    return Plan(decorator_response(attachments=[], finalized=True if request.finalizing else None))


def idle(request, sit, settings, now, observed) -> Plan:
    # A serving node has no Attachment: its load balancers are looked up as a detach begins. Metacontroller
    # reads every Attachment of the cluster on each Node sync, so one per healthy Node made every sync cost
    # as much as the cluster is large.
    annotations: dict = {}
    clear_error(annotations, request)
    return Plan(decorator_response(annotations=annotations, attachments=[],
                                   finalized=True if request.finalizing else None))
