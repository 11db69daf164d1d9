"""Load balancers found by their tags (AWS's answers, stubbed), and the index a hook process keeps fresh on a
thread, so a detach's first step never builds one."""
from __future__ import annotations

import threading
import time

import pytest
from botocore.stub import Stubber

from hooks.aws import lb_discovery, rate_limits
from hooks.config import load_settings
from tests.support.load_balancers import world  # noqa: F401 - a fixture
from tests.support.stubbed_aws import ACCOUNT, StubbedClients, stubbed_client


@pytest.fixture
def builds(monkeypatch):
    """Each build's region; the index itself is empty (what is tested is when builds happen)."""
    made: list[str] = []
    failing: list[bool] = []

    def build(aws, region, settings):
        made.append(region)
        if failing and failing.pop():
            raise RuntimeError("Throttling: Rate exceeded")
        return lb_discovery.Index(built_at=time.monotonic())
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
            ]}, {"TagFilters": [{"Key": "kubernetes.io/cluster/prod", "Values": ["owned"]}], "ResourcesPerPage": 100})
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
    index = lb_discovery.Index(built_at=1000.0, max_age=interval / lb_discovery._REFRESH_AT)
    assert index.fresh(settings, 1000.0 + 100)
    assert not index.fresh(settings, 1000.0 + interval / lb_discovery._REFRESH_AT + 1)
    assert not lb_discovery.Index(built_at=1000.0).fresh(settings, 1031.0)


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
