"""A region's instance types, their zones and spot prices, read from moto (server mode) and kept per process.

moto 5.2.5 answers DescribeInstanceTypes with its whole list (the same in
every region), DescribeInstanceTypeOfferings from its per-region zone table,
and DescribeSpotPriceHistory with one entry per offered type and zone
(price 0.00001, one fixed timestamp); none of them pages.
"""
from __future__ import annotations

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import EndpointConnectionError

from hooks.aws import instance_catalog
from hooks.aws.timed_cache import TimedCache

pytestmark = pytest.mark.moto


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


@pytest.fixture
def clock(monkeypatch):
    """Fresh caches on a clock the test moves."""
    clock = Clock()
    for name in ("TYPE_FACTS", "OFFERINGS", "SPOT"):
        monkeypatch.setattr(instance_catalog, name, TimedCache(clock))
    return clock


def test_every_instance_type_once_per_process(aws, clock):
    ec2, mine = aws("ec2"), aws("ec2")
    sent = Requests(ec2)
    described = mine.describe_instance_types(InstanceTypes=["m5.large", "p4d.24xlarge", "m6g.large"])["InstanceTypes"]
    everything = instance_catalog.all_type_facts(ec2)

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
    assert instance_catalog.all_type_facts(ec2) is everything
    assert len(sent.of("DescribeInstanceTypes")) == 1, "types never change: described once"
    assert sent.of("DescribeInstanceTypes")[0]["MaxResults"] == instance_catalog.TYPES_PAGE


def test_zone_offerings_are_kept_for_an_hour_per_region(aws, clock):
    ec2, west = aws("ec2"), aws("ec2", "us-west-2")
    sent = Requests(ec2)
    offerings = instance_catalog.zone_offerings(ec2)
    direct = aws("ec2").describe_instance_type_offerings(
        LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": ["m5.large"]}])
    assert offerings["m5.large"] == sorted(o["Location"] for o in direct["InstanceTypeOfferings"])
    assert all(zone.startswith("us-east-1") for zones in offerings.values() for zone in zones)
    assert all(zone.startswith("us-west-2") for zone in instance_catalog.zone_offerings(west)["m5.large"])

    clock.now += instance_catalog.OFFERINGS_SECONDS - 1
    instance_catalog.zone_offerings(ec2)
    assert len(sent.of("DescribeInstanceTypeOfferings")) == 1
    clock.now += 2
    instance_catalog.zone_offerings(ec2)
    reads = sent.of("DescribeInstanceTypeOfferings")
    assert len(reads) == 2 and reads[-1]["LocationType"] == "availability-zone"


def test_spot_prices_per_type_and_zone_read_only_for_the_types_asked(aws, clock):
    ec2 = aws("ec2")
    sent = Requests(ec2)
    zones = instance_catalog.zone_offerings(ec2)
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


def test_many_types_are_asked_in_bounded_calls(aws, clock):
    ec2 = aws("ec2")
    sent = Requests(ec2)
    names = sorted(instance_catalog.zone_offerings(ec2))[:instance_catalog.SPOT_TYPES_PER_CALL + 20]
    prices = instance_catalog.spot_prices(ec2, names)
    calls = sent.of("DescribeSpotPriceHistory")
    assert [len(c["InstanceTypes"]) for c in calls] == [instance_catalog.SPOT_TYPES_PER_CALL, 20]
    assert {name for name, _ in prices} == set(names)


def test_a_failed_read_keeps_nothing(aws, clock):
    broken = boto3.client("ec2", region_name="eu-west-3", endpoint_url="http://127.0.0.1:9",
                          config=Config(retries={"max_attempts": 1}, connect_timeout=1))
    with pytest.raises(EndpointConnectionError):
        instance_catalog.zone_offerings(broken)
    assert "m5.large" in instance_catalog.zone_offerings(aws("ec2", "eu-west-3"))
