"""What one node-detacher call reads: the end of a pod's detach request, how long the node has waited for
its unschedulable taint (this process's own memory), the load balancers the node is in (the discovery
index), its pods and the ingress DaemonSets, and the node's state in the groups it left; failures are
recorded, never raised.
"""
from __future__ import annotations

import datetime as dt
import threading
import time

from hooks import detacher_names, objects, runtime, timefmt
from hooks.aws import elb, lb_discovery, rate_limits
from hooks.contract import HookRequest
from hooks.detacher import assess, pod_trigger, reattach, shutdown, targets
from hooks.kube import daemonsets, pods
from hooks.plan import error_text


class _FirstSeen:
    """When this process first saw each node waiting for its unschedulable taint (bounds that wait). The
    process's own memory, so it lives with the reads: decide is told how long
    (hooks.detacher.reattach.waiting_for_taint)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._seen: dict[str, float] = {}

    def seconds(self, key: str) -> float:
        now = time.monotonic()
        with self._lock:
            self._seen = {k: t for k, t in self._seen.items() if now - t < 120}
            return now - self._seen.setdefault(key, now)


_TAINT_PENDING = _FirstSeen()


def gather(request: HookRequest, ctx: runtime.Context, now: dt.datetime) -> dict:
    """The look-ups this call's phase needs; failures are recorded, never raised."""
    settings = ctx.settings
    observed: dict = {}
    ended = daemonsets.end_of_node_request(request, ctx, now)
    if ended:
        observed["podRequestEnded"] = ended
        request = pod_trigger.without_node_request(request)
    sit = assess.assess(request, settings, now)
    if sit.phase == assess.REATTACH and reattach.unschedulable_taint_pending(request.parent):
        observed["unschedulableTaintPendingSeconds"] = _TAINT_PENDING.seconds(
            f"{request.meta.get('uid')}/{request.name}/{sit.phase}")
    if sit.needs_discovery():
        try:
            index = lb_discovery.CACHE.get(ctx.aws, sit.region or ctx.aws.region(), settings)
            observed["discovery"] = {
                "memberships": [list(m) for m in index.memberships(sit.instance_id)],
                # When the index was read, so that two calls served by one index ask for the same Attachment.
                "discoveredAt": timefmt.fmt(index.listed_at),
            }
        except Exception as exc:  # noqa: BLE001 - any AWS/transport failure is reported, not raised
            observed["discoveryError"] = error_text(exc)
            if isinstance(exc, rate_limits.Limited):  # not sent: this process's share had no token in time
                observed["discoveryPutOff"] = True
    if sit.phase == assess.DRAIN:
        _observe_memberships(observed, ctx, sit, request, now)
    if sit.phase == assess.SHUTDOWN and not request.finalizing and shutdown.node_leaving(sit):
        try:
            node_pods = pods.on_node(ctx.kube, request.name)
            owners = {objects.daemonset_of(p) for p in node_pods} - {None}
            observed["pods"] = node_pods
            observed["daemonsets"] = pods.daemonset_annotations(ctx.kube, owners) if owners else {}
        except Exception as exc:  # noqa: BLE001
            observed["podsError"] = error_text(exc)
        else:
            if shutdown.next_group(shutdown.prioritized(node_pods, observed["daemonsets"]))[1]:
                _observe_memberships(observed, ctx, sit, request, now)  # read right before any pod is evicted
    return observed


def _observe_memberships(observed: dict, ctx: runtime.Context, sit: assess.Situation, request: HookRequest,
                         now: dt.datetime) -> None:
    try:
        observed["targetStates"] = _target_states(ctx, sit, request, now)
    except Exception as exc:  # noqa: BLE001 - any AWS/transport failure is reported, not raised
        observed["targetStatesError"] = error_text(exc)


def _target_states(ctx: runtime.Context, sit: assess.Situation, request: HookRequest,
                   now: dt.datetime) -> dict[str, str]:
    """The instance's state in every target group and classic ELB it was deregistered from, each read at most
    once per poll interval for all nodes (hooks.aws.elb.HealthBoard), by a reading begun after the node's
    deregistrations were recorded, and once no registration of ours sent before the detach can still land,
    after that."""
    settings = ctx.settings
    states = {}
    began = timefmt.parse(request.annotations.get(detacher_names.SINCE)) or now
    land_by = sit.registrations_land_by
    settled = land_by.timestamp() if land_by is not None and now >= land_by else None
    # Reading for longer than a poll interval would hold the hook thread for nothing: the rest is
    # answered from the readings at hand and looked at again on the next poll.
    reading_until = time.monotonic() + settings.drain_poll_seconds
    for (lb_type, name), ports in targets.group_by_load_balancer(sit.deregistered or ()).items():
        if lb_type == "tg":
            client, read = ctx.aws.client("elbv2", sit.region), elb.target_states
        else:  # a classic ELB: registered or not (it stops sending to an instance as it is deregistered)
            client, read, ports = ctx.aws.client("elb", sit.region), elb.instance_states, [0]
        found = elb.HEALTH.states(client, sit.region or "", name, sit.instance_id, ports,
                                  max_age=settings.drain_poll_seconds, not_before=began.timestamp(),
                                  after=settled, may_read=time.monotonic() < reading_until,
                                  clock=lambda: ctx.now().timestamp(), read=read)
        for port, state in found.items():
            states[targets.state_key(("tg", name, port) if lb_type == "tg" else ("elb", name))] = state
    return states
