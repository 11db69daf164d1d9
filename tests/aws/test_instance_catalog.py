"""A region's instance types, their zones and spot prices, read from moto (server mode) and kept per process.

moto 5.2.5 answers DescribeInstanceTypes with its whole list (the same in
every region), DescribeInstanceTypeOfferings from its per-region zone table,
and DescribeSpotPriceHistory with one entry per offered type and zone
(price 0.00001, one fixed timestamp); none of them pages. moto answers at
once and never fails: a slow answer (worlds.cluster_gc.Late) and an error
(worlds.cluster_gc.Faults) are injected.
"""
from __future__ import annotations

import logging

import pytest

from hooks import metrics
from hooks.aws import instance_catalog
from hooks.aws.timed_cache import Refreshed, TimedCache
from worlds.cluster_gc import Faults, Late

pytestmark = pytest.mark.moto
REGION = "us-east-1"


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Requests:
    """Every EC2 request a client sends: its operation and parameters."""

    def __init__(self, client):
        self.sent: list[tuple[str, dict]] = []
        client.meta.events.register("before-parameter-build", self._before_parameter_build)

    def _before_parameter_build(self, model=None, params=None, **_):
        self.sent.append((model.name, params or {}))

    def of(self, operation: str) -> list[dict]:
        return [params for name, params in self.sent if name == operation]


def _inline(name, job):
    job()


def _fresh_caches(monkeypatch, clock, threads: bool = False) -> None:
    """``threads``: each background read on a thread of its own, as in a hook process; else run as it starts."""
    started = {} if threads else {"start": _inline}
    for name, read in (("TYPE_FACTS", "instance-types"), ("OFFERINGS", "zone-offerings")):
        monkeypatch.setattr(instance_catalog, name, Refreshed(read, instance_catalog.RETRY_SECONDS, clock, **started))
    monkeypatch.setattr(instance_catalog, "SPOT", TimedCache(clock))


@pytest.fixture
def clock(monkeypatch):
    """Fresh caches on a clock the test moves, whose background reads run as they start (one after another)."""
    clock = Clock()
    _fresh_caches(monkeypatch, clock)
    return clock


@pytest.fixture
def clients(aws, make_ctx):
    """The process's AwsClients, on moto."""
    return make_ctx().aws


def _reads(read: str, outcome: str) -> float:
    return metrics.BACKGROUND_READS.labels(read, outcome)._value.get()


def test_every_instance_type_once_per_process(aws, clients, clock):
    mine = aws("ec2")
    sent = Requests(instance_catalog.client(clients, REGION))
    described = mine.describe_instance_types(InstanceTypes=["m5.large", "p4d.24xlarge", "m6g.large"])["InstanceTypes"]
    instance_catalog.all_type_facts(clients, REGION)
    everything = instance_catalog.all_type_facts(clients, REGION)
    assert everything is not instance_catalog.bundled_type_facts(), "EC2's answer, read"

    assert len(everything) > 500 and {t["InstanceType"] for t in described} <= set(everything)
    m5 = everything["m5.large"]
    assert (m5["vcpus"], m5["memoryMiB"], m5["maxENIs"], m5["ipv4PerENI"]) == (2, 8192, 3, 10)
    assert m5["supportedUsageClasses"] == ["on-demand", "spot"]
    by_name = {t["InstanceType"]: t for t in described}
    assert m5["currentGeneration"] is bool(by_name["m5.large"]["CurrentGeneration"])
    p4d = by_name["p4d.24xlarge"]["NetworkInfo"]
    default_card = next(c for c in p4d["NetworkCards"] if c["NetworkCardIndex"] == p4d["DefaultNetworkCardIndex"])
    assert everything["p4d.24xlarge"]["maxENIs"] == default_card["MaximumNetworkInterfaces"] \
        != p4d["MaximumNetworkInterfaces"], "the VPC CNI gives pods addresses on the default card only"
    assert everything["m6g.large"]["architectures"] == ["arm64"]

    clock.now += 10 * 24 * 3600
    assert instance_catalog.all_type_facts(clients, REGION) is everything
    assert len(sent.of("DescribeInstanceTypes")) == 1, "types never change: described once"
    assert sent.of("DescribeInstanceTypes")[0]["MaxResults"] == instance_catalog.TYPES_PAGE


def test_zone_offerings_are_kept_for_an_hour_per_region(aws, clients, clock):
    sent = Requests(instance_catalog.client(clients, REGION))
    offerings = instance_catalog.zone_offerings(clients, REGION)
    direct = aws("ec2").describe_instance_type_offerings(
        LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": ["m5.large"]}])
    assert offerings["m5.large"] == sorted(o["Location"] for o in direct["InstanceTypeOfferings"])
    assert all(zone.startswith("us-east-1") for zones in offerings.values() for zone in zones)
    assert all(zone.startswith("us-west-2")
               for zone in instance_catalog.zone_offerings(clients, "us-west-2")["m5.large"])

    clock.now += instance_catalog.OFFERINGS_SECONDS - 1
    assert instance_catalog.zone_offerings(clients, REGION) is offerings
    assert len(sent.of("DescribeInstanceTypeOfferings")) == 1
    clock.now += 2
    assert instance_catalog.zone_offerings(clients, REGION) is offerings, "answered as it is while read again"
    reads = sent.of("DescribeInstanceTypeOfferings")
    assert len(reads) == 2 and reads[-1]["LocationType"] == "availability-zone"
    assert instance_catalog.zone_offerings(clients, REGION) is not offerings
    assert len(sent.of("DescribeInstanceTypeOfferings")) == 2


def test_spot_prices_per_type_and_zone_read_only_for_the_types_asked(aws, clients, clock):
    ec2 = aws("ec2")
    sent = Requests(ec2)
    zones = instance_catalog.zone_offerings(clients, REGION)
    prices = instance_catalog.spot_prices(ec2, ["m5.large", "c5.large"])
    assert set(prices) == {(name, zone) for name in ("m5.large", "c5.large") for zone in zones[name]}
    assert set(prices.values()) == {0.00001}
    (first,) = sent.of("DescribeSpotPriceHistory")
    assert first["InstanceTypes"] == ["c5.large", "m5.large"]
    assert first["ProductDescriptions"] == ["Linux/UNIX", "Linux/UNIX (Amazon VPC)"] and "StartTime" in first

    # Kept types are answered from the cache; a new one alone is read.
    again = instance_catalog.spot_prices(ec2, ["m5.large", "t3.micro"])
    assert {name for name, _ in again} == {"m5.large", "t3.micro"}
    assert sent.of("DescribeSpotPriceHistory")[-1]["InstanceTypes"] == ["t3.micro"]

    clock.now += instance_catalog.SPOT_SECONDS + 1
    instance_catalog.spot_prices(ec2, ["m5.large"])
    assert sent.of("DescribeSpotPriceHistory")[-1]["InstanceTypes"] == ["m5.large"]
    assert len(sent.of("DescribeSpotPriceHistory")) == 3


def test_many_types_are_asked_in_bounded_calls(aws, clients, clock):
    ec2 = aws("ec2")
    sent = Requests(ec2)
    names = sorted(instance_catalog.zone_offerings(clients, REGION))[:instance_catalog.SPOT_TYPES_PER_CALL + 20]
    prices = instance_catalog.spot_prices(ec2, names)
    calls = sent.of("DescribeSpotPriceHistory")
    assert [len(c["InstanceTypes"]) for c in calls] == [instance_catalog.SPOT_TYPES_PER_CALL, 20]
    assert {name for name, _ in prices} == set(names)


def test_a_slow_describe_instance_types_holds_no_caller(clients, monkeypatch):
    """DescribeInstanceTypes answering later than the hooks' read timeout: every call is answered at once
    from the bundled facts while one read, on a thread of its own and with a client that waits for it, runs;
    EC2's answer serves once it has come."""
    clock = Clock()
    _fresh_caches(monkeypatch, clock, threads=True)
    late = Late("DescribeInstanceTypes", latency=30.0).attach_client(instance_catalog.client(clients, REGION))
    sent = Requests(instance_catalog.client(clients, REGION))
    try:
        first = instance_catalog.all_type_facts(clients, REGION)
        assert first is instance_catalog.bundled_type_facts()
        assert late.asked.wait(30), "the read started"
        for _ in range(3):
            clock.now += instance_catalog.RETRY_SECONDS
            assert instance_catalog.all_type_facts(clients, REGION) is first
        assert late.answered == 0, "answered while EC2 had not"
        assert len(sent.of("DescribeInstanceTypes")) == 1, "one read at a time"
    finally:
        late.release()
    assert instance_catalog.TYPE_FACTS.join(REGION, 30)
    read = instance_catalog.all_type_facts(clients, REGION)
    assert read is not first and read["m6g.large"]["architectures"] == ["arm64"]
    assert late.timed_out == 0, "the catalog's client waits longer than the answer takes"


def test_a_failing_describe_instance_types_leaves_the_bundled_facts_and_is_tried_again(clients, clock, caplog):
    faults = Faults().add("DescribeInstanceTypes", "RequestLimitExceeded", times=2)
    faults.attach_client(instance_catalog.client(clients, REGION))
    sent = Requests(instance_catalog.client(clients, REGION))
    before = _reads("instance-types", "RequestLimitExceeded")
    caplog.set_level(logging.WARNING, logger="hooks.aws.timed_cache")

    assert instance_catalog.all_type_facts(clients, REGION) is instance_catalog.bundled_type_facts()
    assert _reads("instance-types", "RequestLimitExceeded") == before + 1
    assert any("instance-types of us-east-1 failed" in r.getMessage() and "RequestLimitExceeded" in r.getMessage()
               for r in caplog.records)
    calls = len(sent.of("DescribeInstanceTypes"))
    clock.now += instance_catalog.RETRY_SECONDS - 1
    instance_catalog.all_type_facts(clients, REGION)
    assert len(sent.of("DescribeInstanceTypes")) == calls, "not tried again before RETRY_SECONDS"
    clock.now += 1
    assert instance_catalog.all_type_facts(clients, REGION) is instance_catalog.bundled_type_facts()
    assert _reads("instance-types", "RequestLimitExceeded") == before + 2
    clock.now += instance_catalog.RETRY_SECONDS
    instance_catalog.all_type_facts(clients, REGION)
    assert instance_catalog.all_type_facts(clients, REGION) is not instance_catalog.bundled_type_facts()
    assert faults.injected[("DescribeInstanceTypes", "RequestLimitExceeded")] == 2


def test_failing_zone_offerings_keep_the_last_ones(clients, clock):
    faults = Faults()
    faults.attach_client(instance_catalog.client(clients, REGION))
    offerings = instance_catalog.zone_offerings(clients, REGION)
    faults.add("DescribeInstanceTypeOfferings", "InternalError", times=1)
    clock.now += instance_catalog.OFFERINGS_SECONDS
    assert instance_catalog.zone_offerings(clients, REGION) is offerings
    assert instance_catalog.zone_offerings(clients, REGION) is offerings, "kept after the failed read"
    assert instance_catalog.OFFERINGS.failure(REGION).startswith("InternalError")
    clock.now += instance_catalog.RETRY_SECONDS
    instance_catalog.zone_offerings(clients, REGION)
    assert instance_catalog.zone_offerings(clients, REGION) is not offerings
    assert instance_catalog.OFFERINGS.failure(REGION) is None


def test_zone_offerings_never_read_are_an_error_that_names_the_failure(clients, clock):
    Faults().add("DescribeInstanceTypeOfferings", "UnauthorizedOperation", times=1).attach_client(
        instance_catalog.client(clients, REGION))
    with pytest.raises(instance_catalog.NotReadYet, match="not read yet; the last read failed: UnauthorizedOperation"):
        instance_catalog.zone_offerings(clients, REGION)
    clock.now += instance_catalog.RETRY_SECONDS
    assert "m5.large" in instance_catalog.zone_offerings(clients, REGION)


def test_the_bundled_facts_are_what_ec2_answers(clients, clock):
    """The bundled table is moto's copy of DescribeInstanceTypes, the pinned version's, as type_facts keeps it:
    a type_facts with another field, or another moto, needs scripts/generate_instance_types.py run again."""
    assert instance_catalog.bundled_type_facts() == instance_catalog.read_type_facts(
        instance_catalog.client(clients, REGION))
