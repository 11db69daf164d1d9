"""node: one DecoratorController on Nodes whose hook runs both Node concerns.

node-detacher (load balancers) and node-fencing (the fencing timeline) each
stay their own module, decided and tested apart, each running its own
pipeline (gather, decide, verify, act, settle, report) on its own view of
the request: its own attachments, and the related objects it asked for.
Metacontroller then makes one sync, one hook call and one set of writes per
Node event instead of two (docs/performance.md).

The two answers are merged by hooks/node_answers.py:

- labels, annotations and attachments: the union (the concerns own
  different keys and kinds);
- status: the observed status with each concern's own condition changes
  (a decorator's status replaces the whole status, so neither may write
  over the other's);
- ``resyncAfterSeconds``: the sooner, and never later than
  NODEWARDEN_NODE_RESYNC_SECONDS: the decorator has no resyncPeriodSeconds
  (Metacontroller implements it as an informer resync, every Node at once),
  so each Node's own timer is its periodic look, spread over the period;
- ``finalized``: node-detacher's (node-fencing never holds a deletion).

The decorator relates nothing: node-fencing's policies come from a
short-lived per-process copy (``with_policies``), because Metacontroller
would enqueue every Node at each status write of a related policy.

One concern failing (an exception, a request it cannot read) never stops
the other: the failing one's part of the answer is "leave everything of
mine as it is" (its attachments asked for as they exist, no label,
annotation or status change) and a backoff. A request neither can read is
refused (400).

A Node still carrying the finalizer of the two DecoratorControllers this one
replaces is handed over first (hooks/controllers/node_handover.py).
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import logging

from hooks import detacher_names, fencing_names, node_answers, runtime, timefmt
from hooks.contract import HookRequest, ObjectGroups, RequestError, decorator_response
from hooks.controllers import node_detacher, node_fencing, node_handover
from hooks.fencing import records, storm
from hooks.kube import policy_cache
from hooks.plan import Plan, backoff, error_text

NAME = "node"
log = logging.getLogger(__name__)

# (module, the attachment kinds it owns); every attachment kind of this controller is in exactly one.
DETACHER = (node_detacher, (detacher_names.ATTACHMENT_KIND,))
FENCING = (node_fencing, (fencing_names.REQUEST_KIND, records.KIND))
CONCERNS = (DETACHER, FENCING)


def sync(request: HookRequest, ctx: runtime.Context | None = None) -> dict:
    return _both(request, ctx or runtime.current())


def finalize(request: HookRequest, ctx: runtime.Context | None = None) -> dict:
    return _both(request, ctx or runtime.current())


def with_policies(request: HookRequest, ctx: runtime.Context) -> HookRequest:
    """The request with the NodeFencingPolicies node-fencing reads as its related objects, from the process's
    short-lived copy (hooks/kube/policy_cache.py): this decorator relates nothing, so that a policy's
    status write does not put every Node in Metacontroller's queue. A failed list raises."""
    announced = timefmt.parse(request.annotations.get(fencing_names.COUNT_ANNOTATION))
    if announced is not None and announced > ctx.now() + dt.timedelta(seconds=storm.MAX_SKEW_SECONDS):
        announced = None  # a count from the future is nobody's: no re-list on its word
    found = policy_cache.CACHE.policies(ctx.kube, ctx.settings.fencing_policy_cache_seconds, announced)
    try:
        related = ObjectGroups.parse(policy_cache.related(found), "related")
    except RequestError as exc:
        raise RuntimeError(f"a NodeFencingPolicy as the API server has it: {exc}") from None
    return dataclasses.replace(request, related=related)


def _both(request: HookRequest, ctx: runtime.Context) -> dict:
    request, old_holds = node_handover.hand_over(request, ctx, NAME)
    answers = []
    refused = []
    try:
        request = with_policies(request, ctx)
        unread = None
    except Exception as exc:  # noqa: BLE001 - node-fencing cannot judge without policies; node-detacher can
        unread = exc
    for module, kinds in CONCERNS:
        view = _view(request, module, kinds)
        if module is node_fencing and unread is not None:
            log.warning("the NodeFencingPolicies could not be listed",
                        extra={"node": request.name, "error": error_text(unread)})
            answers.append((module, kinds, _as_it_is(view, ctx)))
            continue
        try:
            answer = module.sync(view, ctx) if not view.finalizing else module.finalize(view, ctx)
            answers.append((module, kinds, _kept_while_deleted(view, module, answer)))
        except RequestError as exc:
            log.warning("a node concern refused the request",
                        extra={"controller": module.NAME, "node": request.name, "reason": str(exc)})
            refused.append(exc)
            answers.append((module, kinds, _as_it_is(view, ctx)))
        except Exception:  # noqa: BLE001 - one concern's failure must not stop the other
            log.exception("a node concern failed", extra={"controller": module.NAME, "node": request.name})
            answers.append((module, kinds, _as_it_is(view, ctx)))
    if len(refused) == len(CONCERNS):
        raise refused[0]
    response = node_answers.merge(request, [a for _, _, a in answers], ctx.settings.node_resync_seconds)
    if old_holds and response.get("finalized") is True:
        node_handover.release_old(request, ctx, NAME)
    return response


def gather(request: HookRequest, ctx: runtime.Context, now) -> dict:
    """Each concern's look-ups, under its name (for ``nodewarden replay`` and the fixtures); the request's
    own related policies stand for the cache's there."""
    return {module.NAME: module.gather(_view(request, module, kinds), ctx, now) for module, kinds in CONCERNS}


def decide(request: HookRequest, settings, now, observed: dict) -> Plan:
    """Both concerns' pure decisions on their views, merged: what the hook answers once both are verified."""
    views = [(module, _view(request, module, kinds)) for module, kinds in CONCERNS]
    plans = [module.decide(view, settings, now, observed.get(module.NAME) or {}) for module, view in views]
    answers = [_kept_while_deleted(view, module, p.response) for (module, view), p in zip(views, plans)]
    return Plan(node_answers.merge(request, answers, settings.node_resync_seconds), [a for p in plans for a in p.actions],
                [e for p in plans for e in p.events],
                background_events=[e for p in plans for e in p.background_events])


def _view(request: HookRequest, module, kinds: tuple[str, ...]) -> HookRequest:
    """The request as the concern's own DecoratorController would have sent it."""
    finalizing = request.finalizing and module is node_detacher
    return dataclasses.replace(request, children=request.children.only(kinds),
                               related=request.related if module is node_fencing else request.related.only(()),
                               finalizing=finalizing)


def _kept_while_deleted(view: HookRequest, module, answer: dict) -> dict:
    """node-fencing's attachments of a Node being deleted, asked for as they exist: nothing is made for a
    Node on its way out (as when node-fencing was a decorator without a finalize hook, whose attachments
    Metacontroller left alone once the Node was being deleted)."""
    if module is not node_fencing or not view.deleting:
        return answer
    return dict(answer, attachments=[node_fencing.as_it_is(child) for child in view.children.all()])


def _as_it_is(view: HookRequest, ctx: runtime.Context) -> dict:
    """A failed concern's part: its attachments exactly as they exist, nothing else changed, a retry soon."""
    kept = [node_fencing.as_it_is(child) for child in view.children.all()]
    return decorator_response(attachments=kept, resync_after=backoff(ctx.settings, 1),
                              finalized=False if view.finalizing else None)
