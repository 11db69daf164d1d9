"""What EC2 tells a provisioning NodePool about a region: every instance type, where each is offered, spot prices.

Each read is paginated and kept per process and region. Instance types
(kept for the life of the process: they never change) and zone offerings
(``OFFERINGS_SECONDS``) are read on a thread of their own (``Refreshed``),
with a client that waits ``READ_TIMEOUT_SECONDS`` for an answer: a round
never waits for DescribeInstanceTypes, which can take longer than a hook
has (one answer of every type, on the local stack). Until a read of the
types succeeds, a round is answered the bundled facts (``instance_types.json``,
made by scripts/generate_instance_types.py); offerings past their hour are
answered as last read while they are read again, and only a process's first
round waits for them (``OFFERINGS_WAIT_SECONDS`` at most). A read that fails
keeps what was read before and is tried again ``RETRY_SECONDS`` later.
Spot prices are read by the round that misses them (``TimedCache``): a
bounded call per 100 types. On-demand prices are hooks/aws/pricing.py's.
"""
from __future__ import annotations

import datetime as dt
import functools
import json
from pathlib import Path

from hooks.aws.instances import type_facts
from hooks.aws.timed_cache import FOREVER, Refreshed, TimedCache

OFFERINGS_SECONDS = 3600.0
SPOT_SECONDS = 300.0
# The catalog's reads are off the hooks' path: a slow answer holds no call, so it is waited for this long.
READ_TIMEOUT_SECONDS = 60.0
RETRY_SECONDS = 30.0
# Nothing bundled answers where a type is offered: a process's first round waits this long for the read.
OFFERINGS_WAIT_SECONDS = 3.0
# DescribeInstanceTypes answers at most 100 a page; the others up to 1,000.
TYPES_PAGE = 100
PAGE = 1000
# Instance types named per DescribeSpotPriceHistory call: a bounded request, however many types are asked.
SPOT_TYPES_PER_CALL = 100
# The Linux spot markets; an instance launched in a VPC is priced as the second.
LINUX_PRODUCTS = ("Linux/UNIX", "Linux/UNIX (Amazon VPC)")
BUNDLED_TYPES = Path(__file__).with_name("instance_types.json")

TYPE_FACTS = Refreshed("instance-types", RETRY_SECONDS)
OFFERINGS = Refreshed("zone-offerings", RETRY_SECONDS)
SPOT = TimedCache()


class NotReadYet(RuntimeError):
    """EC2's answer a round needs has not been read yet in this process."""


def _region(ec2) -> str:
    return ec2.meta.region_name


def client(aws, region: str):
    """The EC2 client the catalog reads the region with (``aws``: the process's AwsClients)."""
    return aws.client("ec2", region, read_timeout=READ_TIMEOUT_SECONDS)


def read_type_facts(ec2) -> dict[str, dict]:
    """Every instance type of the client's region, read now: ``type_facts`` of each, by name."""
    found = {}
    for page in ec2.get_paginator("describe_instance_types").paginate(PaginationConfig={"PageSize": TYPES_PAGE}):
        for described in page.get("InstanceTypes") or []:
            found[described["InstanceType"]] = type_facts(described)
    return found


def read_zone_offerings(ec2) -> dict[str, list[str]]:
    """The availability zones of the client's region that offer each instance type, sorted, read now."""
    zones: dict[str, set[str]] = {}
    for page in ec2.get_paginator("describe_instance_type_offerings").paginate(
            LocationType="availability-zone", PaginationConfig={"PageSize": PAGE}):
        for offering in page.get("InstanceTypeOfferings") or []:
            zones.setdefault(offering["InstanceType"], set()).add(offering["Location"])
    return {name: sorted(found) for name, found in sorted(zones.items())}


@functools.cache
def bundled_type_facts() -> dict[str, dict]:
    """The bundled facts of every instance type (``type_facts`` of each, as DescribeInstanceTypes answered
    them when the table was made), by name; one object for the process, never to be changed."""
    table = json.loads(BUNDLED_TYPES.read_text())
    fields = table["fields"]
    return {name: dict(zip(fields, row)) for name, row in table["types"].items()}


def all_type_facts(aws, region: str) -> dict[str, dict]:
    """Every instance type of ``region``: ``type_facts`` of each (with its supported usage classes, on-demand
    and spot, and whether it is of the current generation), by name, as last read from EC2; the bundled
    facts until a read has succeeded. Never waits for a read (``aws``: the process's AwsClients)."""
    found = TYPE_FACTS.get(region, lambda: (read_type_facts(client(aws, region)), FOREVER))
    return found if found is not None else bundled_type_facts()


def zone_offerings(aws, region: str) -> dict[str, list[str]]:
    """The availability zones of ``region`` that offer each instance type, sorted, as last read from EC2.

    Raises NotReadYet when none has been read in this process within ``OFFERINGS_WAIT_SECONDS``."""
    found = OFFERINGS.get(region, lambda: (read_zone_offerings(client(aws, region)), OFFERINGS_SECONDS),
                          wait=OFFERINGS_WAIT_SECONDS)
    if found is None:
        failure = OFFERINGS.failure(region)
        raise NotReadYet(f"the zones offering each instance type in {region} are not read yet"
                         + (f"; the last read failed: {failure}" if failure else " (a read is running)"))
    return found


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
