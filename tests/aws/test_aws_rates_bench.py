"""bench/aws_rates.py's scale model: it counts the hooks' AWS calls, and the instance view spares Machine syncs
their reads (a model that bypassed the view would fail the second test)."""
from __future__ import annotations

import pytest

from bench import aws_rates

pytestmark = pytest.mark.moto


def _machine_reads(results: dict) -> int:
    return sum(row["calls"] for row in results["operations"]
               if row["controller"] == aws_rates.MACHINE and row["operation"] == "DescribeInstances")


def _small(endpoint: str, view_seconds: float) -> dict:
    return aws_rates.steady(endpoint, machines=20, pools=2, minutes=1, processes=2, view_seconds=view_seconds,
                            queues=0)


def test_without_the_view_every_machine_sync_reads_the_instances(aws, moto_endpoint):
    results = _small(moto_endpoint, view_seconds=0)
    assert results["syncs"][aws_rates.MACHINE] == 40, "20 Machines, each once per its 30 s resync"
    assert _machine_reads(results) == results["syncs"][aws_rates.MACHINE], "one page of 20 instances a sync"
    described = [row for row in results["buckets"] if row["key"] == "ec2:DescribeInstances:ec2-non-mutating"]
    assert described and described[0]["calls"] >= _machine_reads(results)
    assert results["answersThatChanged"][aws_rates.MACHINE] == 0, "steady: no Machine's status changes"
    assert results["hookWrites"] == {}


def test_with_the_view_machine_syncs_read_less_often_than_they_sync(aws, moto_endpoint):
    results = _small(moto_endpoint, view_seconds=10)
    syncs = results["syncs"][aws_rates.MACHINE]
    # Two processes, each reading at most once per 10 simulated seconds.
    assert 0 < _machine_reads(results) <= 2 * 7 < syncs
    assert results["answersThatChanged"][aws_rates.MACHINE] == 0


def _passes(target_groups: int, endpoint: str) -> dict:
    return aws_rates.steady(endpoint, machines=20, pools=2, minutes=1, processes=2, view_seconds=10, queues=0,
                            target_groups=target_groups, classic_elbs=1)


def test_each_process_rebuilds_discovery_every_period_while_its_share_allows(aws, moto_endpoint):
    results = _passes(3, moto_endpoint)
    # Two processes, 24 s apart each (0.8 of the 30 s cache), the second 12 s after the first: 0, 24, 48 and
    # 12, 36 within the minute.
    assert results["syncs"][aws_rates.DISCOVERY] == 5
    health = [r for r in results["operations"]
              if r["controller"] == aws_rates.DISCOVERY and r["operation"] == "DescribeTargetHealth"]
    assert health and health[0]["calls"] == 5 * 3


def test_a_pass_over_more_groups_than_the_share_allows_comes_less_often(aws, moto_endpoint):
    results = _passes(60, moto_endpoint)
    # 60 groups' target health and tags: over 60 tokens a pass, at half of 2.5 a second each process may
    # spend: about 50 s apart, so 0 and about 50, and 12.
    assert results["syncs"][aws_rates.DISCOVERY] == 3
