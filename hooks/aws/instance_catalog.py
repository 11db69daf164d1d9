"""What EC2 tells a provisioning NodePool about a region: every instance type, where each is offered, spot prices.

Each read is paginated and kept per process and region (``TimedCache``):
instance types for the life of the process (they never change), zone
offerings for ``OFFERINGS_SECONDS``, spot prices for ``SPOT_SECONDS``. A
read that fails raises botocore's error and keeps nothing, so the next call
reads again. On-demand prices are hooks/aws/pricing.py's.
"""
from __future__ import annotations

import datetime as dt

from hooks.aws.instances import type_facts
from hooks.aws.timed_cache import FOREVER, TimedCache

OFFERINGS_SECONDS = 3600.0
SPOT_SECONDS = 300.0
# DescribeInstanceTypes answers at most 100 a page; the others up to 1,000.
TYPES_PAGE = 100
PAGE = 1000
# Instance types named per DescribeSpotPriceHistory call: a bounded request, however many types are asked.
SPOT_TYPES_PER_CALL = 100
# The Linux spot markets; an instance launched in a VPC is priced as the second.
LINUX_PRODUCTS = ("Linux/UNIX", "Linux/UNIX (Amazon VPC)")

TYPE_FACTS = TimedCache()
OFFERINGS = TimedCache()
SPOT = TimedCache()


def _region(ec2) -> str:
    return ec2.meta.region_name


def all_type_facts(ec2) -> dict[str, dict]:
    """Every instance type of the client's region: ``type_facts`` of each (with its supported usage classes,
    on-demand and spot, and whether it is of the current generation), by name."""
    def read():
        found = {}
        for page in ec2.get_paginator("describe_instance_types").paginate(
                PaginationConfig={"PageSize": TYPES_PAGE}):
            for described in page.get("InstanceTypes") or []:
                found[described["InstanceType"]] = type_facts(described)
        return found, FOREVER
    return TYPE_FACTS.get(_region(ec2), read)


def zone_offerings(ec2) -> dict[str, list[str]]:
    """The availability zones of the client's region that offer each instance type, sorted."""
    def read():
        zones: dict[str, set[str]] = {}
        for page in ec2.get_paginator("describe_instance_type_offerings").paginate(
                LocationType="availability-zone", PaginationConfig={"PageSize": PAGE}):
            for offering in page.get("InstanceTypeOfferings") or []:
                zones.setdefault(offering["InstanceType"], set()).add(offering["Location"])
        return {name: sorted(found) for name, found in sorted(zones.items())}, OFFERINGS_SECONDS
    return OFFERINGS.get(_region(ec2), read)


def _timestamp(entry: dict) -> float:
    stamp = entry.get("Timestamp")
    return stamp.timestamp() if isinstance(stamp, dt.datetime) else 0.0


def _read_spot(ec2, types: list[str]) -> dict[str, dict[str, float]]:
    """Per type, its latest Linux spot price in each zone (a zone without one is absent)."""
    latest: dict[tuple[str, str], tuple[float, bool, float]] = {}  # (type, zone) -> (time, in a VPC, price)
    now = dt.datetime.now(dt.timezone.utc)
    for start in range(0, len(types), SPOT_TYPES_PER_CALL):
        # StartTime now: the price in effect now, per type, zone and product.
        pages = ec2.get_paginator("describe_spot_price_history").paginate(
            InstanceTypes=types[start:start + SPOT_TYPES_PER_CALL], ProductDescriptions=list(LINUX_PRODUCTS),
            StartTime=now, PaginationConfig={"PageSize": PAGE})
        for page in pages:
            for entry in page.get("SpotPriceHistory") or []:
                try:
                    price = float(entry["SpotPrice"])
                    key = (entry["InstanceType"], entry["AvailabilityZone"])
                except (KeyError, TypeError, ValueError):
                    continue
                rank = (_timestamp(entry), entry.get("ProductDescription") == LINUX_PRODUCTS[1], price)
                if key not in latest or rank[:2] > latest[key][:2]:
                    latest[key] = rank
    found: dict[str, dict[str, float]] = {name: {} for name in types}
    for (name, zone), (_, _, price) in latest.items():
        if name in found:
            found[name][zone] = price
    return found


def spot_prices(ec2, types) -> dict[tuple[str, str], float]:
    """The latest Linux spot price (USD an hour) of each of ``types`` per availability zone of the client's region.

    A type is read again once its prices are ``SPOT_SECONDS`` old; only the
    types asked are read. A type and zone without a spot market are absent.
    """
    region = _region(ec2)

    def read(keys):
        prices = _read_spot(ec2, sorted(name for _, name in keys))
        return {(region, name): prices[name] for _, name in keys}, SPOT_SECONDS
    kept = SPOT.get_many(((region, name) for name in types), read)
    return {(name, zone): price for (_, name), zones in kept.items() for zone, price in sorted(zones.items())}
