"""The ``node`` controller's hand-over of a Node from node-detacher and node-fencing, through hooks.pipeline.

``hand_over`` runs first on every call of ``node`` (hooks/controllers/node.py)
and ``release_old`` after an answer that lets a Node go; the decisions are
hooks/handover/'s, the reads and writes hooks/kube/handover.py's. Each write
is an action: it has an Outcome, is counted in nodewarden_actions_total and
reported as an Event (a Warning when it fails). The actions run in order and
stop at the first failure; any failure (a look-up, the API server's copy of
the Node, a write) leaves the request as it came, for the next call to try
again (an old finalizer only holds a deletion longer).
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import logging

from hooks import events, pipeline, runtime
from hooks.config import Settings
from hooks.contract import HookRequest
from hooks.handover import claim, release
from hooks.kube import fresh, handover
from hooks.plan import Outcome, Plan, error_text, failure_text, unverified_text

log = logging.getLogger(__name__)


class _Step:
    """What both steps share as controllers of hooks.pipeline: named after the controller that takes the
    Nodes over (the Event component and the metrics label), verified on the Node the API server has."""

    FAILURE_REASON = events.HAND_OVER_FAILED
    needs_verification = staticmethod(pipeline.by_plan)

    def __init__(self, controller: str):
        self.NAME = controller

    def verify(self, request: HookRequest, ctx: runtime.Context) -> HookRequest:
        return fresh.same_parent(request, ctx.kube)

    def unverified(self, request: HookRequest, plan: Plan, ctx: runtime.Context, reason: str) -> Plan:
        return Plan({"error": unverified_text(reason)})

    def settle(self, request: HookRequest, plan: Plan, outcomes: list[Outcome], settings: Settings,
               now: dt.datetime) -> Plan:
        return Plan({"error": failure_text(outcomes)}, events=plan.events)


class HandOver(_Step):
    """On a call: the Node's attachments claimed, then the old finalizers off (hooks/handover/claim.py)."""

    def gather(self, request: HookRequest, ctx: runtime.Context, now: dt.datetime) -> dict:
        if not claim.pending(request):
            return {}
        try:
            observed: dict = {"oldGone": handover.OLD_GONE(ctx.kube)}
            if observed["oldGone"] and request.verified and claim.ready(request, self.NAME):
                observed["attachments"] = handover.attachments(
                    ctx.kube, claim.looked_up(request.name, ctx.settings.namespace))
        except Exception as exc:  # noqa: BLE001 - a failed look-up is an observation
            return {"error": error_text(exc)}
        return observed

    def decide(self, request: HookRequest, settings: Settings, now: dt.datetime, observed: dict) -> Plan:
        return claim.decide(request, observed, self.NAME)


class Release(_Step):
    """After a call whose answer let a Node go that an old finalizer held: that finalizer off
    (hooks/handover/release.py)."""

    def gather(self, request: HookRequest, ctx: runtime.Context, now: dt.datetime) -> dict:
        return {}

    def decide(self, request: HookRequest, settings: Settings, now: dt.datetime, observed: dict) -> Plan:
        return release.decide(request)


def hand_over(request: HookRequest, ctx: runtime.Context, controller: str) -> tuple[HookRequest, bool]:
    """The request with the node's attachments adopted and the old finalizers off when their time has come,
    and whether an old finalizer still holds the Node's deletion for ``controller``.

    Metacontroller adds no finalizer to an object already being deleted, so a
    Node deleted before the hand-over never gets ``controller``'s: its old
    finalizer then holds the deletion in its place. The request is decided
    as a finalize, and ``release_old`` takes the old finalizer off once the
    answer lets the Node go.
    """
    answer = _answer(HandOver(controller), request, ctx)
    if answer.get("error"):
        log.warning("node not handed over yet", extra={"node": request.name, "reason": answer["error"]})
        return request, False
    if "holds" not in answer:
        return request, False  # nothing to do yet
    adopted = list(answer["adopted"].values())
    children = request.children.with_objects(adopted)
    if answer["holds"]:
        return dataclasses.replace(request, parent=answer["parent"], children=children, finalizing=True), True
    parent = dict(request.parent, metadata=dict(request.meta, finalizers=answer["finalizers"]))
    log.info("node handed over from the old decorators",
             extra={"node": request.name, "adopted": [o["kind"] for o in adopted]})
    return dataclasses.replace(request, parent=parent, children=children), False


def release_old(request: HookRequest, ctx: runtime.Context, controller: str) -> None:
    """The old finalizers off a Node being deleted whose finalize answer let it go (see ``hand_over``)."""
    answer = _answer(Release(controller), request, ctx)
    if answer.get("error"):
        log.warning("old finalizer not released yet", extra={"node": request.name, "reason": answer["error"]})


def _answer(steps, request: HookRequest, ctx: runtime.Context) -> dict:
    """The pipeline's answer, or the error that stopped it: the next call tries again."""
    try:
        return pipeline.run(steps, request, ctx)
    except Exception as exc:  # noqa: BLE001 - the next call tries again
        return {"error": error_text(exc)}
