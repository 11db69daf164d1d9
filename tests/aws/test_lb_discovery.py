"""Load balancers found by their tags (AWS's answers, stubbed), and the index a hook process keeps fresh on a
thread, so a detach's first step never builds one."""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from botocore.stub import Stubber

from hooks.aws import lb_discovery, rate_limits
from hooks.config import load_settings
from tests.support.load_balancers import world  # noqa: F401 - a fixture
from tests.support.stubbed_aws import ACCOUNT, StubbedClients, stubbed_client
from worlds.clock import ManualClock


@pytest.fixture
def builds(monkeypatch):
    """Each build's region; the index itself is empty (what is tested is when builds happen)."""
    made: list[str] = []
    failing: list[bool] = []

    def build(aws, region, settings):
        made.append(region)
        if failing and failing.pop():
            raise RuntimeError("Throttling: Rate exceeded")
        return lb_discovery.Index()
    monkeypatch.setattr(lb_discovery, "build_index", build)
    monkeypatch.setattr(lb_discovery, "CACHE", lb_discovery.IndexCache())
    return made, failing


def _until(condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "not within the deadline"
        time.sleep(0.02)


def test_the_index_is_rebuilt_before_it_goes_stale_and_lookups_build_nothing(make_ctx, builds):
    made, _ = builds
    ctx = make_ctx({"NODEWARDEN_DISCOVERY_CACHE_SECONDS": "2", "AWS_REGION": "eu-west-1"})
    stop = threading.Event()
    thread = lb_discovery.keep_fresh(ctx, stop)
    try:
        _until(lambda: len(made) >= 3)  # at once, then every 1.6 s
        assert set(made) == {"eu-west-1"}
        seen = len(made)
        for _ in range(20):
            lb_discovery.CACHE.get(ctx.aws, "eu-west-1", ctx.settings)
        assert len(made) - seen <= 1, "lookups are served by the kept index"
    finally:
        stop.set()
        thread.join(5)
    assert not thread.is_alive()


def test_a_failed_rebuild_is_tried_again_and_other_regions_looked_up_are_kept_too(make_ctx, builds):
    made, failing = builds
    ctx = make_ctx({"NODEWARDEN_DISCOVERY_CACHE_SECONDS": "1.5", "AWS_REGION": "eu-west-1"})
    lb_discovery.CACHE.get(ctx.aws, "us-east-2", ctx.settings)  # a node in another region detached once
    failing.append(True)  # the first background build fails
    stop = threading.Event()
    thread = lb_discovery.keep_fresh(ctx, stop)
    try:
        _until(lambda: made.count("eu-west-1") >= 2 and made.count("us-east-2") >= 2)
    finally:
        stop.set()
        thread.join(5)


def test_no_thread_for_a_cache_shorter_than_a_second(make_ctx, builds):
    assert lb_discovery.keep_fresh(make_ctx({"NODEWARDEN_DISCOVERY_CACHE_SECONDS": "0"})) is None
    assert builds[0] == []


class _CountingClock(ManualClock):
    """Also counts its readings: a lookup reads it once when it asks, before it can wait for a build."""

    def __init__(self):
        super().__init__()
        self.readings = 0

    def __call__(self) -> float:
        self.readings += 1
        return super().__call__()


def test_lookups_that_wait_for_a_build_share_the_next_one_rather_than_building_one_each(monkeypatch):
    clock = _CountingClock()
    release = threading.Event()
    made: list[lb_discovery.Index] = []

    def build(aws, region, settings):
        release.wait(10)  # the first build is under way until the test lets it end
        made.append(lb_discovery.Index(classic_elbs=len(made)))
        return made[-1]
    monkeypatch.setattr(lb_discovery, "build_index", build)
    cache = lb_discovery.IndexCache(clock=clock)
    settings = load_settings({"NODEWARDEN_DISCOVERY_CACHE_SECONDS": "0"})
    with ThreadPoolExecutor(11) as pool:
        first = pool.submit(cache.get, None, "eu-west-1", settings)
        _until(lambda: clock.readings == 2)  # it asked, and its build began
        clock.advance(1)  # the rest ask after that build began: it may have read AWS before they asked
        waiting = [pool.submit(cache.get, None, "eu-west-1", settings) for _ in range(10)]
        _until(lambda: clock.readings == 12)
        release.set()
        assert first.result(10) is made[0]
        answers = [w.result(10) for w in waiting]
    assert len(made) == 2, "one build under way, then one that every waiting lookup shares"
    assert all(a is made[1] for a in answers)

    clock.advance(1)
    assert cache.get(None, "eu-west-1", settings) is made[2], "uncached, a lookup after the builds builds again"


def test_one_hook_call_gathering_twice_builds_once_and_the_next_call_builds_again(monkeypatch):
    clock = ManualClock()
    made: list[lb_discovery.Index] = []
    monkeypatch.setattr(lb_discovery, "build_index", lambda aws, region, settings: made.append(lb_discovery.Index())
                        or made[-1])
    cache = lb_discovery.IndexCache(clock=clock)
    settings = load_settings({"NODEWARDEN_DISCOVERY_CACHE_SECONDS": "0"})
    with cache.one_call():
        clock.advance(1)
        first = cache.get(None, "eu-west-1", settings)
        clock.advance(1)  # the body confirmed by the API server, gathered again
        assert cache.get(None, "eu-west-1", settings) is first
    clock.advance(1)
    with cache.one_call():
        assert cache.get(None, "eu-west-1", settings) is not first, "built before this call began"
    assert len(made) == 2


def test_tagged_discovery_reads_every_page_and_classifies_classic_elbs():
    """Real AWS tagging answers (moto files classic ELBs under another type), stubbed; what it lists is checked to exist."""
    tagging, elbv2, elb = stubbed_client("resourcegroupstaggingapi"), stubbed_client("elbv2"), stubbed_client("elb")
    settings = load_settings({"NODEWARDEN_CLUSTER_NAME": "prod", "NODEWARDEN_INCLUDE_LB_CONTROLLER": "false"})
    web, api = f"{ACCOUNT}:targetgroup/k8s-web/abc", f"{ACCOUNT}:targetgroup/k8s-api/def"
    owned = [{"Key": "kubernetes.io/cluster/prod", "Value": "owned"}]
    with Stubber(tagging) as tags, Stubber(elbv2) as v2, Stubber(elb) as classic:
        tags.add_response("get_resources", {
            "PaginationToken": "page-2",
            "ResourceTagMappingList": [
                {"ResourceARN": web, "Tags": owned},
                {"ResourceARN": f"{ACCOUNT}:loadbalancer/a1b2c3", "Tags": owned},  # classic
            ]}, {"TagFilters": [{"Key": "kubernetes.io/cluster/prod", "Values": ["owned"]}], "ResourcesPerPage": 100,
            # Load balancers alone: the listing never pages through the cluster's instances.
            "ResourceTypeFilters": ["elasticloadbalancing:loadbalancer", "elasticloadbalancing:targetgroup"]})
        tags.add_response("get_resources", {
            "PaginationToken": "",
            "ResourceTagMappingList": [
                {"ResourceARN": f"{ACCOUNT}:loadbalancer/net/k8s-nlb/def", "Tags": owned},  # NLB: its TGs count
                {"ResourceARN": api, "Tags": owned},
            ]})
        # Their tags as the services have them now, which also proves they exist.
        v2.add_response("describe_tags", {"TagDescriptions": [
            {"ResourceArn": web, "Tags": owned}, {"ResourceArn": api, "Tags": owned}]}, {"ResourceArns": [web, api]})
        classic.add_response("describe_tags", {"TagDescriptions": [
            {"LoadBalancerName": "a1b2c3", "Tags": owned}]}, {"LoadBalancerNames": ["a1b2c3"]})
        tgs, elbs = lb_discovery.tagged_load_balancers(StubbedClients(resourcegroupstaggingapi=tagging, elbv2=elbv2, elb=elb),
                                                       "us-east-1", settings)
        for stub in (tags, v2, classic):
            stub.assert_no_pending_responses()
    assert tgs == {web, api}
    assert elbs == {"a1b2c3"}


# --------------------------------------------------------------------------- pacing by the process's share


def _limiter(share: float) -> rate_limits.Limiter:
    return rate_limits.Limiter(share)


def test_a_pass_within_its_part_of_the_share_comes_every_cache_period():
    settings = load_settings({"NODEWARDEN_DISCOVERY_CACHE_SECONDS": "30"})
    # 0.125 of ELB's Describe bucket (10 a second): 1.25 a second, of which the rebuild may spend half.
    assert lb_discovery.refresh_interval(settings, _limiter(0.125), {"elb-describe": 12}) == pytest.approx(24)


def test_a_pass_over_many_target_groups_comes_less_often_and_its_index_serves_until_the_next():
    settings = load_settings({"NODEWARDEN_DISCOVERY_CACHE_SECONDS": "30"})
    interval = lb_discovery.refresh_interval(settings, _limiter(0.125), {"elb-describe": 101})
    assert interval == pytest.approx(101 / 0.625)  # 100 groups' target health and their tags
    index = lb_discovery.Index(max_age=interval / lb_discovery._REFRESH_AT)
    assert index.serves_for(settings) == pytest.approx(interval / lb_discovery._REFRESH_AT)
    assert lb_discovery.Index().serves_for(settings) == 30


def test_the_cache_serves_an_index_as_long_as_its_pacing_says(make_ctx, monkeypatch):
    clock = ManualClock()
    cache = lb_discovery.IndexCache(clock=clock)
    settings = make_ctx({"NODEWARDEN_DISCOVERY_CACHE_SECONDS": "30"}).settings
    built = []

    def build(aws, region, settings):
        built.append(region)
        return lb_discovery.Index(max_age=200.0)
    monkeypatch.setattr(lb_discovery, "build_index", build)
    cache.rebuild(None, "us-east-1", settings)
    clock.now += 150  # past the cache period, within the paced one
    cache.get(None, "us-east-1", settings)
    assert built == ["us-east-1"]
    clock.now += 60
    cache.get(None, "us-east-1", settings)
    assert built == ["us-east-1", "us-east-1"]


def test_buckets_the_limiter_leaves_alone_do_not_slow_the_rebuild():
    settings = load_settings({"NODEWARDEN_DISCOVERY_CACHE_SECONDS": "30"})
    # The tagging API's bucket is not published: limited only when named, so it paces nothing by default.
    assert lb_discovery.refresh_interval(settings, _limiter(0.125), {"resource-tagging": 500}) == pytest.approx(24)
    assert lb_discovery.refresh_interval(settings, _limiter(0.0), {"elb-describe": 500}) == pytest.approx(24)


def test_a_pass_counts_every_target_health_read_of_its_thread_pool(world, make_ctx):
    ctx = make_ctx({"NODEWARDEN_STATIC_TARGET_GROUPS": world["static"]})
    with rate_limits.counting_draws() as drawn:
        index = lb_discovery.build_index(ctx.aws, "us-east-1", ctx.settings)
    assert index.target_groups == 3  # ours, the LB controller's, the static one
    # Three DescribeTargetHealth on the pool's threads, the classic ELB's DescribeLoadBalancers, and the
    # tags the discovery checks its candidates with.
    assert drawn.of()["elb-describe"] >= 3 + 1 + 1


def test_only_a_search_for_load_balancers_alone_names_their_resource_types():
    from hooks.aws.gc.discovery import Query
    from hooks.teardown.tasks import CLASSIC_ELB, DEFAULT_TASKS, TG

    detacher = Query(cluster_name="prod", region="us-east-1", only_kinds=(TG, CLASSIC_ELB))
    assert detacher.resource_types == ("elasticloadbalancing:loadbalancer", "elasticloadbalancing:targetgroup")
    assert Query(cluster_name="prod", region="us-east-1", tasks=DEFAULT_TASKS).resource_types == (), \
        "cluster-gc also wants instances, ENIs and volumes: every type"
