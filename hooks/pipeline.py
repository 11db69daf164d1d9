"""One pipeline for every controller: gather, decide, verify, act, settle, report.

Each controller module implements ``Controller`` (checked by a test for every
registered controller) and its ``sync``/``finalize`` hand the request to
``run``, which owns the order of the steps:

1. ``gather``: the read-only look-ups this call needs (AWS state, pods); a
   failure is recorded in ``observed``, never raised. It is given the same
   ``now`` as ``decide``, so both judge the same moment.
2. ``decide``: pure; the response, the actions and the Events (a ``Plan``).
3. If the plan would do anything at all (an action, an Event) or rests on
   what only the API server can confirm (``needs_verification``): ``verify``
   re-reads the parent and what the actions rest on from the API server, and
   the controller gathers and decides again on that copy. A body is a hint:
   nothing happens because of one. Whether the parent is being deleted is
   what that copy says (``_being_deleted``), never the body's ``finalizing``.
   When the API server cannot confirm the request, ``unverified`` says what
   the response is, and it carries no action and no Event.
4. act (``hooks.actuators.act``): each action's preconditions are read again
   right before it runs; an action whose precondition fails does not run.
   Background actions are handed over only once every other action
   succeeded, and the call answers without waiting for them
   (``in_background``); so does it for a ``carry_on`` action still waiting
   to go out (UNDER_WAY), whose record is written as theirs is.
5. Each succeeded action's ``record`` is applied to the response; when an
   action failed, ``settle`` adds what that means (an error, a backoff) and
   may change the Events. The annotations the plan names in ``persist`` are
   then written to the parent Node by this call (``persisted``).
6. The Events are handed to the recorder, off the request path: the plan's
   own, each succeeded action's ``reports``, and one Warning per failure.

``replay`` is steps 1-2 for the CLI, with no side effect.
"""
from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import time
from typing import Protocol, runtime_checkable

from hooks import actuators, events, runtime
from hooks.config import Settings
from hooks.contract import COMPOSITE, HookRequest
from hooks.kube import fresh
from hooks.plan import GATED, PUT_OFF, UNDER_WAY, Action, Outcome, Plan, failure_text, unverified_text


@runtime_checkable
class Controller(Protocol):
    """What a controller module provides (module-level names)."""

    NAME: str  # the controller's name: the Event component and the metrics label
    FAILURE_REASON: str | None  # the Warning Event reason of a failed action (None: settle's Events say it)

    def gather(self, request: HookRequest, ctx: runtime.Context, now: dt.datetime) -> dict: ...

    def decide(self, request: HookRequest, settings: Settings, now: dt.datetime, observed: dict) -> Plan: ...

    def needs_verification(self, request: HookRequest, plan: Plan) -> bool: ...

    def verify(self, request: HookRequest, ctx: runtime.Context) -> HookRequest: ...

    def unverified(self, request: HookRequest, plan: Plan, ctx: runtime.Context, reason: str) -> Plan: ...

    def settle(self, request: HookRequest, plan: Plan, outcomes: list[Outcome], settings: Settings,
               now: dt.datetime) -> Plan: ...


def replay(controller: Controller, request: HookRequest, ctx: runtime.Context,
           observed: dict | None = None) -> tuple[dict, Plan]:
    """(observed, plan) with no side effect: ``observed`` is looked up unless given.

    The body is decided on as if the API server had confirmed it: nothing is
    done with the plan, so there is nothing to protect.
    """
    request = dataclasses.replace(request, verified=True)
    now = ctx.now()
    if observed is None:
        observed = controller.gather(request, ctx, now)
    return observed, controller.decide(request, ctx.settings, now, observed)


def run(controller: Controller, request: HookRequest, ctx: runtime.Context | None = None) -> dict:
    ctx = ctx or runtime.current()
    started = time.monotonic()
    now = ctx.now()  # one clock reading for the whole call: gather and decide see the same moment
    observed = controller.gather(request, ctx, now)
    plan = controller.decide(request, ctx.settings, now, observed)
    released = False
    if plan.actions or plan.events or controller.needs_verification(request, plan):
        try:
            request, released = _being_deleted(dataclasses.replace(
                controller.verify(request, ctx), verified=True))
            plan = controller.decide(request, ctx.settings, now, controller.gather(request, ctx, now))
        except fresh.Unverified as exc:
            # The response is the controller's to say; nothing is done or said on a body alone.
            plan = Plan(controller.unverified(request, plan, ctx, str(exc)).response)
    if released:
        plan = dataclasses.replace(plan, response=dict(plan.response, finalized=True))
    background = [a for a in plan.actions if a.background]
    outcomes = actuators.act(controller.NAME, [a for a in plan.actions if not a.background], ctx, plan.gate,
                             started)
    if background and request.verified and all(o.ok for o in outcomes):
        in_background(controller, request, background, plan.background_events, ctx)
    carried = [o.later for o in outcomes if o.code == UNDER_WAY and o.later is not None]
    if carried and request.verified:
        actuators.carry_on(controller.NAME, carried, recorder(controller, request, [], ctx))
    settled = Plan(recorded(plan.response, outcomes), plan.actions, plan.events, basis=plan.basis,
                   persist=plan.persist)
    if any(not o.ok for o in outcomes):
        settled = controller.settle(request, settled, outcomes, ctx.settings, now)
    if settled.persist and request.verified:
        settled = persisted(controller, request, settled, ctx)
    report(controller, request, settled, outcomes, ctx)
    return settled.response


def _being_deleted(request: HookRequest) -> tuple[HookRequest, bool]:
    """The verified request's ``finalizing`` as the API server's copy has it: (request, released).

    Metacontroller calls a finalize hook for an object with a deletionTimestamp,
    and a DecoratorController's also for one that stopped matching its
    selector. A composite's finalize for an object the API server has alive is
    no call Metacontroller makes: Unverified. A decorator's is decided as a
    sync (nothing a deletion would do) whose answer lets the finalizer go.
    """
    if not request.finalizing or request.deleting:
        return request, False
    what = f"{request.parent.get('kind')} {'/'.join(filter(None, (request.meta.get('namespace'), request.name)))}"
    if request.controller_kind == COMPOSITE:
        raise fresh.Unverified(f"finalize for {what}, which the API server has with no deletionTimestamp")
    return dataclasses.replace(request, finalizing=False), True


def recorded(response: dict, outcomes: list[Outcome]) -> dict:
    """The response with the record of every action that succeeded, in order."""
    changes = [(c, o.result) for o in outcomes if o.ok for c in o.action.record]
    if not changes:
        return response
    response = copy.copy(response)
    for change, result in changes:
        change.apply(response, result)
    return response


def persisted(controller: Controller, request: HookRequest, plan: Plan, ctx: runtime.Context) -> Plan:
    """The plan with its ``persist`` annotations written to the parent Node now, and out of the response.

    Metacontroller writes a decorator's response with an update of the Node
    as its cache has it: when anyone else wrote the Node since (its kubelet,
    another controller), that update conflicts, the sync is redone and a
    record in it of what this call did is lost, so it is done again. A patch
    checked against the Node read just before cannot be lost that way. When
    it fails, the annotations stay in the response for Metacontroller.
    """
    annotations = dict(plan.response.get("annotations") or {})
    uid = request.meta.get("uid")
    if not uid:
        return plan
    # One the Node already has is left out of the response too: written again by Metacontroller's update
    # (the Node as its cache had it, retried on a conflict), it would undo a background record made since.
    same = {k for k in plan.persist if k in annotations and annotations[k] == request.annotations.get(k)}
    wanted = {k: annotations[k] for k in plan.persist if annotations.get(k) is not None and k not in same}
    if wanted and not actuators.act(controller.NAME, [Action("kube.annotate-node", request.name,
                                                             {"annotations": wanted, "uid": uid})], ctx)[0].ok:
        wanted = {}
    kept = {k: v for k, v in annotations.items() if k not in wanted and k not in same}
    return dataclasses.replace(plan, response=dict(plan.response, annotations=kept))


def in_background(controller: Controller, request: HookRequest, actions: list[Action], said: list,
                  ctx: runtime.Context) -> None:
    """Carry ``actions`` on after the call: once they have answered, the records of those that succeeded are
    written to the parent Node (merged with what it has by then, with its uid as the precondition), and the
    Events ``said`` are sent if every one succeeded. One that failed records
    nothing, so the next call does its step again, in the call, where a failure is reported."""
    actuators.act_in_background(controller.NAME, actions, ctx, recorder(controller, request, said, ctx))


def recorder(controller: Controller, request: HookRequest, said: list, ctx: runtime.Context):
    """What is done with the outcomes of actions carried on after the call: the records of those that
    succeeded written to the parent Node, then ``said`` sent if every one succeeded."""
    uid = request.meta.get("uid")
    parent = events.ref(request.parent)

    def done(outcomes: list[Outcome]) -> None:
        changes = [(c, o.result) for o in outcomes if o.ok for c in o.action.record]
        if changes and uid:
            write = Action("kube.record-node", request.name, {"changes": changes, "uid": uid})
            if not actuators.act(controller.NAME, [write], ctx)[0].ok:
                return
        if all(o.ok for o in outcomes):
            for event in said:
                ctx.events.record(controller.NAME, event.about or parent, event)
    return done


def report(controller: Controller, request: HookRequest, plan: Plan, outcomes: list[Outcome],
           ctx: runtime.Context) -> None:
    """Hand this call's Events to the recorder: what was decided, what succeeded, what failed."""
    parent = events.ref(request.parent)
    sent = list(plan.events)
    sent += [o.action.reports for o in outcomes if o.ok and o.action.reports is not None]
    failed = [o for o in outcomes if not o.ok and o.code not in PUT_OFF]  # put off is not failed
    if controller.FAILURE_REASON and failed:
        sent.append(events.warning(controller.FAILURE_REASON, failure_text(failed)))
    for event in sent:
        ctx.events.record(controller.NAME, event.about or parent, event)


def refuse(request: HookRequest, plan: Plan, ctx: runtime.Context, reason: str) -> Plan:
    """``unverified`` that answers what was decided on the body (the pipeline adds no action or Event to it)."""
    return Plan(plan.response)


def in_status(request: HookRequest, plan: Plan, ctx: runtime.Context, reason: str) -> Plan:
    """``unverified`` of a controller that owns its parent's status: the reason in ``status.lastError``, a
    retry after the error backoff, and nothing finalized."""
    response = dict(plan.response)
    response["status"] = {**(response.get("status") or {}),
                          "lastError": unverified_text(reason)[:2000]}
    response["resyncAfterSeconds"] = float(ctx.settings.error_backoff_seconds)
    if request.finalizing:
        response["finalized"] = False
    return Plan(response)


def failed_in_status(plan: Plan, outcomes: list[Outcome], retry: float) -> Plan:
    """``settle`` of a controller that owns its parent's status: what failed (not what a Gate held back) added
    to ``status.lastError``, and the next call within ``retry`` seconds."""
    response = dict(plan.response)
    status = dict(response["status"])
    failed = failure_text([o for o in outcomes if o.code not in GATED])
    status["lastError"] = "; ".join(x for x in (status.get("lastError"), failed) if x)[:2000]
    response["status"] = status
    response["resyncAfterSeconds"] = min(float(response.get("resyncAfterSeconds") or retry), retry)
    return Plan(response, plan.actions, plan.events, basis=plan.basis)


def by_plan(request: HookRequest, plan: Plan) -> bool:
    """``needs_verification`` of a controller whose decide says so (``Plan.verify``)."""
    return plan.verify
