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
