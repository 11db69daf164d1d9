"""Hand a Node over from the two DecoratorControllers the ``node`` controller replaces.

node-detacher and node-fencing were two DecoratorControllers on every Node.
What they leave behind once they are deleted:

- node-detacher's finalizer, ``metacontroller.io/decoratorcontroller-node-detacher``,
  on every Node. Metacontroller takes a decorator's finalizer off only
  through that decorator's own finalize, so with the controller gone nothing
  would, and every Node deletion would hang on it.
- their attachments (the Attachment, the FencingRequest, the UnhealthyNode
  record), which Metacontroller knows as a decorator's own only by the
  annotation ``metacontroller.k8s.io/decorator-controller`` naming it.
  Unclaimed, the new controller would not see them (a FencingRequest in
  flight among them) and could not create its own under the same names.

So on a Node that still carries an old finalizer, once every old
DecoratorController is gone from the API server (while one still runs, it
would claim its objects back) and the new controller's finalizer is on the
Node (it holds the deletion from now on), the hook re-annotates the node's
attachments to the new controller (only those owned by this Node's uid),
then takes the old finalizers off with a JSON patch that tests each entry.
Everything is read fresh from the API server; any failure leaves things as
they are for the next call (an old finalizer only holds a deletion longer).
"""
from __future__ import annotations

import dataclasses
import logging
import threading
import time

from hooks import runtime
from hooks.contract import DECORATOR_CLAIM, HookRequest, RequestError, decorator_finalizer, parse_object
from hooks.fencing import names as fencing_names
from hooks.detacher import names as detacher_names
from hooks.kube import fresh
from hooks.plan import error_text

log = logging.getLogger(__name__)

OLD_CONTROLLERS = ("node-detacher", "node-fencing")
# How long one answer about the old controllers serves this process.
_GONE_CACHE_SECONDS = 30.0


OLD_FINALIZERS = tuple(decorator_finalizer(c) for c in OLD_CONTROLLERS)


class _Gone:
    """Whether every old DecoratorController is gone, asked at most once per interval per process."""

    def __init__(self):
        self._lock = threading.Lock()
        self._answer: tuple[float, bool] | None = None

    def __call__(self, kube) -> bool:
        with self._lock:
            if self._answer and time.monotonic() - self._answer[0] < _GONE_CACHE_SECONDS:
                return self._answer[1]
        gone = all(fresh.read(kube, "DecoratorController", name) is None for name in OLD_CONTROLLERS)
        with self._lock:
            self._answer = (time.monotonic(), gone)
        return gone

    def forget(self) -> None:
        with self._lock:
            self._answer = None


OLD_GONE = _Gone()


def pending(request: HookRequest) -> bool:
    finalizers = request.meta.get("finalizers")
    return isinstance(finalizers, list) and any(f in OLD_FINALIZERS for f in finalizers)


def migrate(request: HookRequest, ctx: runtime.Context, controller: str) -> tuple[HookRequest, bool]:
    """The request with the node's attachments adopted and the old finalizers off when their time has come,
    and whether an old finalizer still holds the Node's deletion for ``controller``.

    Metacontroller adds no finalizer to an object already being deleted, so a
    Node deleted before the hand-over never gets ``controller``'s: its old
    finalizer then holds the deletion in its place. The request is decided
    as a finalize, and ``release_old`` takes the old finalizer off once the
    answer lets the Node go.
    """
    if not pending(request):
        return request, False
    try:
        if not OLD_GONE(ctx.kube):
            return request, False
        node = fresh.same_parent(request, ctx.kube).parent
        finalizers = node["metadata"].get("finalizers") or []
        holds = decorator_finalizer(controller) not in finalizers
        if holds and not node["metadata"].get("deletionTimestamp"):
            return request, False  # Metacontroller adds ours before it calls; until then the old one holds the node
        adopted = _adopt(ctx, node, controller)
        if not holds:
            _remove_old(ctx, request.name, finalizers)
    except (fresh.Unverified, Exception) as exc:  # noqa: BLE001 - the next call tries again
        log.warning("node not handed over yet", extra={"node": request.name, "reason": error_text(exc)})
        return request, False
    children = request.children.with_objects(adopted)
    if holds:
        return dataclasses.replace(request, parent=node, children=children, finalizing=True), True
    kept = [f for f in finalizers if f not in OLD_FINALIZERS]
    parent = dict(request.parent, metadata=dict(request.meta, finalizers=kept))
    log.info("node handed over from the old decorators",
             extra={"node": request.name, "adopted": [o["kind"] for o in adopted]})
    return dataclasses.replace(request, parent=parent, children=children), False


def release_old(request: HookRequest, ctx: runtime.Context) -> None:
    """The old finalizers off a Node being deleted whose finalize answer let it go (see ``migrate``)."""
    try:
        node = fresh.same_parent(request, ctx.kube).parent
        _remove_old(ctx, request.name, node["metadata"].get("finalizers") or [])
    except (fresh.Unverified, Exception) as exc:  # noqa: BLE001 - the next call tries again
        log.warning("old finalizer not released yet", extra={"node": request.name, "reason": error_text(exc)})


def _remove_old(ctx: runtime.Context, name: str, finalizers: list) -> None:
    """One JSON patch removing every old finalizer entry, each tested first (the list may have moved)."""
    ops = []
    for index in sorted((i for i, f in enumerate(finalizers) if f in OLD_FINALIZERS), reverse=True):
        ops += [{"op": "test", "path": f"/metadata/finalizers/{index}", "value": finalizers[index]},
                {"op": "remove", "path": f"/metadata/finalizers/{index}"}]
    if ops:
        ctx.kube.json_patch(fresh.resource("Node"), name, ops)


def _adopt(ctx: runtime.Context, node: dict, controller: str) -> list[dict]:
    """The node's attachments claimed for ``controller``, as the API server answered the claim."""
    name, uid = node["metadata"]["name"], node["metadata"]["uid"]
    namespace = ctx.settings.namespace

    adopted = []
    for kind, obj_name, obj_namespace in (
            (detacher_names.ATTACHMENT_KIND, name, namespace),
            (fencing_names.REQUEST_KIND, fencing_names.request_name(name), namespace),
            ("UnhealthyNode", name, None)):
        found = fresh.read(ctx.kube, kind, obj_name, obj_namespace)
        if found is None:
            continue
        meta = found.get("metadata") or {}
        owners = [o for o in meta.get("ownerReferences") or [] if isinstance(o, dict) and o.get("controller")]
        claimed_by = (meta.get("annotations") or {}).get(DECORATOR_CLAIM)
        if not owners or owners[0].get("uid") != uid or claimed_by not in OLD_CONTROLLERS:
            continue  # not this node's, or not the old decorators' to hand over
        patch = {"metadata": {"resourceVersion": meta.get("resourceVersion"),
                              "annotations": {DECORATOR_CLAIM: controller}}}
        ctx.kube.merge_patch(fresh.resource(kind), obj_name, patch, namespace=obj_namespace)
        claimed = dict(found, metadata=dict(meta, annotations={**(meta.get("annotations") or {}),
                                                                DECORATOR_CLAIM: controller}))
        try:
            adopted.append(parse_object(claimed, f"attachments.{kind}"))
        except RequestError:
            continue
    return adopted
