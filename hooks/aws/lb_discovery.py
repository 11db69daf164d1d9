"""Which load balancers each instance of the cluster is in.

Sources: target groups and classic ELBs tagged for this cluster by the cloud
controller (``kubernetes.io/cluster/<name>=owned``) or the AWS Load Balancer
Controller (``elbv2.k8s.aws/cluster=<name>``), found by the one discovery
cluster-gc uses too (the tagging API, or listing and reading tags where that
API is refused or finds nothing), plus untagged ones named in configuration
(Terraform). One pass reads every
member of every such load balancer, so the result serves all nodes: it is
cached per region for NODEWARDEN_DISCOVERY_CACHE_SECONDS, and a detaching
node's Attachment is filled from it. No per-node scan of the region.

A detach reads the index in its first step, on the way from the cordon to the
deregistration; a build there would add a discovery pass to that latency. So a
hook process keeps its indexes fresh on a thread of its own (keep_fresh),
rebuilding each before the cache would call it stale.

That rebuild is paced by the process's share of AWS's buckets
(hooks/aws/rate_limits.py): it may spend REFRESH_PART of each, the rest
being the detaches' (their drain waits read target health too). A pass over
more target groups than that allows in the cache period comes less often,
and its index serves lookups until the next one is due: with many target
groups the index is older, never a burst over the share.
"""
from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Iterator

from hooks import aws_rate_buckets
from hooks.aws import rate_limits
from hooks.aws.gc import discovery
from hooks.aws.gc.resources import chunked
from hooks.config import Settings
from hooks.teardown.tasks import CLASSIC_ELB, TG

_DESCRIBE_LIMIT = 20  # LoadBalancerNames per DescribeLoadBalancers call
# Targets in these states are already leaving; a detach has nothing to do for them.
_LEAVING = ("draining", "unused")
_PARALLEL_READS = 8
# The background rebuild comes this far into the cache period, so a lookup never finds the index stale.
_REFRESH_AT = 0.8
# The part of the process's share of each bucket the background rebuild may spend.
REFRESH_PART = 0.5
log = logging.getLogger(__name__)


@dataclass
class Index:
    members: dict[str, set] = field(default_factory=dict)  # instance id -> memberships
    target_groups: int = 0
    classic_elbs: int = 0
    listed_at: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.timezone.utc))
    # Seconds it serves lookups when the paced rebuild comes later than the cache period (None: the period).
    max_age: float | None = None

    def serves_for(self, settings: Settings) -> float:
        """Seconds from its build that it serves lookups."""
        return max(settings.discovery_cache_seconds, self.max_age or 0.0)

    def memberships(self, instance_id: str) -> list[tuple]:
        return sorted(self.members.get(instance_id, set()))


def tagged_load_balancers(aws, region: str, settings: Settings) -> tuple[set[str], set[str]]:
    """(target group ARNs, classic ELB names) tagged for this cluster, by the one discovery (tagging API or listing)."""
    query = discovery.Query(cluster_name=settings.cluster_name, region=region, only_kinds=(TG, CLASSIC_ELB),
                            include_lb_controller=settings.include_lb_controller, made_by_only=False)
    found = discovery.discover(aws, query)["resources"]
    return ({r["id"] for r in found if r["kind"] == TG}, {r["id"] for r in found if r["kind"] == CLASSIC_ELB})


def build_index(aws, region: str, settings: Settings) -> Index:
    tgs: set[str] = set(settings.static_target_groups)
    elbs: set[str] = set(settings.static_classic_elbs)
    if settings.cluster_name:
        tagged_tgs, tagged_elbs = tagged_load_balancers(aws, region, settings)
        tgs |= tagged_tgs
        elbs |= tagged_elbs
    index = Index(target_groups=len(tgs), classic_elbs=len(elbs))
    if tgs:
        elbv2 = aws.client("elbv2", region)
        # One DescribeTargetHealth per group; in parallel, since a hook must answer
        # in well under 2 s even for clusters with a hundred target groups.
        # Each read in a copy of this context: it waits within the same hook call's allowance, and is counted.
        reads = [(contextvars.copy_context(), arn) for arn in sorted(tgs)]
        with ThreadPoolExecutor(max_workers=min(_PARALLEL_READS, len(tgs))) as pool:
            healths = pool.map(lambda read: (read[1], read[0].run(elbv2.describe_target_health,
                                                                  TargetGroupArn=read[1])), reads)
            for arn, health in healths:
                for desc in health["TargetHealthDescriptions"]:
                    target = desc.get("Target", {})
                    state = desc.get("TargetHealth", {}).get("State")
                    if str(target.get("Id", "")).startswith("i-") and state not in _LEAVING and target.get("Port"):
                        index.members.setdefault(target["Id"], set()).add(("tg", arn, int(target["Port"])))
    if elbs:
        elb = aws.client("elb", region)
        for chunk in chunked(sorted(elbs), _DESCRIBE_LIMIT):
            for lb in elb.describe_load_balancers(LoadBalancerNames=chunk).get("LoadBalancerDescriptions", []):
                for inst in lb.get("Instances", []):
                    index.members.setdefault(inst["InstanceId"], set()).add(("elb", lb["LoadBalancerName"]))
    return index


@dataclass(frozen=True)
class _Kept:
    index: Index
    started_at: float  # the cache's clock when its build began: AWS was read after this


# When the hook call being served began, on the cache's clock (None: not in one).
_call_began: contextvars.ContextVar[float | None] = contextvars.ContextVar("lb_discovery_call_began", default=None)


class IndexCache:
    """Per-process, per-region cache; one build at a time per region.

    An index whose build began after a lookup did serves it, however short the cache: it read AWS later
    than the lookup asked. So lookups that wait while another builds share the next build (lookups arriving
    together cost at most two builds, not one each), and within one hook call (``one_call``), whose body is
    gathered again once the API server has confirmed it, the index built for the call serves all of it.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._lock = threading.Lock()
        self._kept: dict[str, _Kept] = {}
        self._building: dict[str, threading.Lock] = {}

    @contextlib.contextmanager
    def one_call(self) -> Iterator[None]:
        """Within this block (one hook call), an index built since it began serves every lookup."""
        token = _call_began.set(self._clock())
        try:
            yield
        finally:
            _call_began.reset(token)

    def get(self, aws, region: str, settings: Settings) -> Index:
        asked_at = self._clock()
        call_began = _call_began.get()
        fresh_from = asked_at if call_began is None else min(asked_at, call_began)
        with self._lock:
            index = self._serving(region, fresh_from, settings)
            if index:
                return index
            build_lock = self._building.setdefault(region, threading.Lock())
        with build_lock:
            with self._lock:
                index = self._serving(region, fresh_from, settings)
                if index:
                    return index
            return self._build(aws, region, settings)

    def _serving(self, region: str, fresh_from: float, settings: Settings) -> Index | None:
        """The kept index of ``region`` if younger than the cache period or built since ``fresh_from``; the
        caller holds the lock."""
        kept = self._kept.get(region)
        if kept and (kept.started_at >= fresh_from
                     or self._clock() - kept.started_at < kept.index.serves_for(settings)):
            return kept.index
        return None

    def rebuild(self, aws, region: str, settings: Settings) -> Index:
        """Build now, whatever the age of the one held, and keep it."""
        with self._lock:
            build_lock = self._building.setdefault(region, threading.Lock())
        with build_lock:
            return self._build(aws, region, settings)

    def _build(self, aws, region: str, settings: Settings) -> Index:
        """Build and keep; the caller holds the region's build lock."""
        started_at = self._clock()
        index = build_index(aws, region, settings)
        with self._lock:
            self._kept[region] = _Kept(index, started_at)
        return index

    def regions(self) -> set[str]:
        with self._lock:
            return set(self._kept)

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()


CACHE = IndexCache()


def refresh_interval(settings: Settings, limiter: rate_limits.Limiter, drawn: dict[str, float]) -> float:
    """Seconds from one background rebuild to the next: 0.8 × the cache period, or longer when a pass that
    drew ``drawn`` (tokens per bucket) would spend more than REFRESH_PART of the process's share of a bucket."""
    interval = settings.discovery_cache_seconds * _REFRESH_AT
    for bucket in aws_rate_buckets.BUCKETS:
        spent, refill = drawn.get(bucket.name, 0.0), limiter.refill_of(bucket)
        if spent and refill:
            interval = max(interval, spent / (refill * REFRESH_PART))
    return interval


def keep_fresh(ctx, stop: threading.Event | None = None) -> threading.Thread | None:
    """Rebuild this process's index of the configured region (and of any other region a detach looked in)
    every refresh_interval, on a daemon thread; None when the cache is shorter than a second (every lookup
    builds its own then). A pass waits for its tokens up to its interval; a failed one is logged and tried
    again after the interval, and a lookup meanwhile builds as before."""
    period = ctx.settings.discovery_cache_seconds * _REFRESH_AT
    if period < 1:
        return None
    stop = stop or threading.Event()

    def loop() -> None:
        intervals: dict[str, float] = {}
        while not stop.is_set():
            try:
                regions = CACHE.regions() | {ctx.aws.region()}
            except Exception:  # noqa: BLE001 - no region configured: the regions lookups named
                regions = CACHE.regions()
            for region in sorted(regions):
                interval = intervals.get(region, period)
                try:
                    with rate_limits.counting_draws() as drawn, \
                            rate_limits.hook_call(max(rate_limits.OUTSIDE_HOOK_WAIT_SECONDS, interval)):
                        index = CACHE.rebuild(ctx.aws, region, ctx.settings)
                except Exception as exc:  # noqa: BLE001 - any AWS failure: the next period tries again
                    log.warning("discovery index rebuild failed", extra={"region": region, "error": str(exc)})
                    continue
                intervals[region] = refresh_interval(ctx.settings, ctx.aws.limiter, drawn.of())
                # Served until the next pass is due, with the cache's own margin.
                index.max_age = intervals[region] / _REFRESH_AT
            stop.wait(min(intervals.get(region, period) for region in regions) if regions else period)

    thread = threading.Thread(target=loop, name="discovery-refresh", daemon=True)
    thread.start()
    return thread
