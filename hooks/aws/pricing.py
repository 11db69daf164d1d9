"""On-demand prices of a region's instance types: the AWS Price List API, or the table bundled with nodewarden.

The Price List API (GetProducts, served from us-east-1 for every
commercial region) gives Linux, shared-tenancy, no pre-installed software
prices of the region; bare metal types are listed there as dedicated
tenancy, so they are read too. An answer is kept per process and region for
``LIVE_SECONDS``. When the API cannot be reached, refuses (no
``pricing:GetProducts``, another partition) or answers nothing, the bundled
table (``on_demand_prices.json``, made by scripts/generate_prices.py) is
answered and kept for ``FALLBACK_SECONDS``, after which the API is asked
again; a type the API leaves out keeps its bundled price. A region the table
lacks is answered with us-east-1's prices: right in order for ranking types,
off in level. China regions' figures are in CNY, as AWS prices them there.
"""
from __future__ import annotations

import functools
import json
import logging
from pathlib import Path
from typing import Callable, Iterable

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from hooks.aws.clients import AwsClients, error_code
from hooks.aws.timed_cache import TimedCache

PRICING_REGION = "us-east-1"
LIVE_SECONDS = 12 * 3600.0
FALLBACK_SECONDS = 900.0
BUNDLED = Path(__file__).with_name("on_demand_prices.json")
BUNDLED_DEFAULT_REGION = "us-east-1"
PAGE = 100  # GetProducts' most per page
# A price list read must not hold a hook call for long: a short connection and read, one retry.
PRICING_CONFIG = Config(connect_timeout=2, read_timeout=5, retries={"mode": "standard", "max_attempts": 2})
# (tenancy, product family): the shared instances, and bare metal, which AWS lists as dedicated.
PRODUCT_KINDS = (("Shared", "Compute Instance"), ("Dedicated", "Compute Instance (bare metal)"))

PRICES = TimedCache()
_log = logging.getLogger(__name__)


class PricesUnavailable(RuntimeError):
    """The Price List API gave no prices for the region."""


def _filters(region: str, tenancy: str, family: str) -> list[dict]:
    wanted = {"regionCode": region, "operatingSystem": "Linux", "tenancy": tenancy, "preInstalledSw": "NA",
              "capacitystatus": "Used", "marketoption": "OnDemand", "productFamily": family}
    return [{"Type": "TERM_MATCH", "Field": field, "Value": value} for field, value in wanted.items()]


def parse_price_list(items: Iterable[str], currency: str = "USD") -> dict[str, float]:
    """Instance type -> its on-demand price an hour, from GetProducts' PriceList (each item a JSON string).

    Items without an instance type or a positive price in ``currency`` are skipped."""
    prices: dict[str, float] = {}
    for item in items:
        try:
            product = json.loads(item) if isinstance(item, str) else item
            name = product["product"]["attributes"]["instanceType"]
            terms = product["terms"]["OnDemand"]
        except (TypeError, ValueError, KeyError):
            continue
        if not isinstance(name, str) or not name or not isinstance(terms, dict):
            continue
        for term in terms.values():
            for dimension in ((term or {}).get("priceDimensions") or {}).values():
                try:
                    price = float(((dimension or {}).get("pricePerUnit") or {})[currency])
                except (KeyError, TypeError, ValueError):
                    continue
                if price > 0:
                    prices[name] = price
    return prices


@functools.cache
def _bundled_table() -> dict:
    return json.loads(BUNDLED.read_text())


def bundled_prices(region: str) -> dict[str, float]:
    """The bundled table's prices of ``region`` (us-east-1's when it has none for the region)."""
    regions = _bundled_table()["regions"]
    return dict(regions.get(region) or regions[BUNDLED_DEFAULT_REGION])


def _pricing_client(source):
    if isinstance(source, boto3.session.Session):
        return source.client("pricing", region_name=PRICING_REGION, config=PRICING_CONFIG)
    if isinstance(source, AwsClients):
        return source.client("pricing", PRICING_REGION)
    return source(PRICING_REGION)


def live_prices(client, region: str) -> dict[str, float]:
    """The region's on-demand prices from GetProducts; raises PricesUnavailable when it answers none."""
    prices: dict[str, float] = {}
    for tenancy, family in PRODUCT_KINDS:
        pages = client.get_paginator("get_products").paginate(
            ServiceCode="AmazonEC2", Filters=_filters(region, tenancy, family), FormatVersion="aws_v1",
            PaginationConfig={"PageSize": PAGE})
        for page in pages:
            for name, price in parse_price_list(page.get("PriceList") or []).items():
                prices.setdefault(name, price)
    if not prices:
        raise PricesUnavailable(f"the Price List API has no on-demand prices for {region}")
    return prices


def on_demand_prices(source: boto3.session.Session | AwsClients | Callable[[str], object],
                     region: str) -> dict[str, float]:
    """Instance type -> on-demand price (USD an hour, Linux) in ``region``.

    ``source`` makes the pricing client: a boto3 Session, the process's
    AwsClients, or a function of the pricing region that returns a client.
    Never raises for AWS's sake: when the API fails, the bundled table answers.
    """
    def read():
        bundled = bundled_prices(region)
        try:
            live = live_prices(_pricing_client(source), region)
        except (ClientError, BotoCoreError, PricesUnavailable) as exc:
            _log.warning("on-demand prices of %s from the bundled table for %.0f s: the Price List API failed: "
                         "%s: %s", region, FALLBACK_SECONDS, error_code(exc), exc)
            return bundled, FALLBACK_SECONDS
        return {**bundled, **live}, LIVE_SECONDS
    return PRICES.get(region, read)
