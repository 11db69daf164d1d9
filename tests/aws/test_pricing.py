"""On-demand prices: the Price List API, and the bundled table when it cannot answer.

moto 5.2.5 has no pricing service (its server answers GetProducts with an
HTTP 500), so against moto only the fallback is seen; GetProducts' own
answers, pages included, are played with botocore's Stubber, the one stand-in
allowed for a service moto lacks.
"""
from __future__ import annotations

import json

import boto3
import pytest
from botocore.config import Config
from botocore.stub import Stubber

from devcluster.waits import free_port
from hooks.aws import pricing
from hooks.aws.timed_cache import TimedCache
from tests.support.stubbed_aws import stubbed_client


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(pricing, "PRICES", TimedCache(clock))
    return clock


def item(instance_type: str | None, price: str, currency: str = "USD") -> str:
    """One PriceList entry as GetProducts returns it: a JSON document in a string."""
    attributes = {"instanceType": instance_type, "operatingSystem": "Linux", "tenancy": "Shared"}
    if instance_type is None:
        del attributes["instanceType"]
    return json.dumps({
        "product": {"productFamily": "Compute Instance", "attributes": attributes, "sku": "SKU1"},
        "serviceCode": "AmazonEC2",
        "terms": {"OnDemand": {"SKU1.JRTCKXETXF": {"priceDimensions": {"SKU1.JRTCKXETXF.6YS6EN2CT7": {
            "unit": "Hrs", "pricePerUnit": {currency: price}, "description": "per On Demand Linux hour"}},
            "sku": "SKU1", "effectiveDate": "2026-11-01T00:00:00Z"}},
            "Reserved": {"SKU1.X": {"priceDimensions": {"SKU1.X.Y": {"unit": "Quantity", "pricePerUnit": {"USD": "999"}}}}}},
    })


def expected_params(region: str, tenancy: str, family: str, token: str | None = None) -> dict:
    fields = {"regionCode": region, "operatingSystem": "Linux", "tenancy": tenancy, "preInstalledSw": "NA",
              "capacitystatus": "Used", "marketoption": "OnDemand", "productFamily": family}
    params = {"ServiceCode": "AmazonEC2", "FormatVersion": "aws_v1", "MaxResults": pricing.PAGE,
              "Filters": [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in fields.items()]}
    if token:
        params["NextToken"] = token
    return params


def test_the_price_list_is_read_page_by_page_and_kept_for_hours(clock):
    client = stubbed_client("pricing")
    made = []
    with Stubber(client) as stub:
        stub.add_response("get_products", {"FormatVersion": "aws_v1", "NextToken": "page-2",
                                           "PriceList": [item("m5.large", "0.0960000000"), item("c5.large", "0.085")]},
                          expected_params("eu-west-1", "Shared", "Compute Instance"))
        stub.add_response("get_products", {"FormatVersion": "aws_v1", "PriceList": [item("r5.large", "0.141")]},
                          expected_params("eu-west-1", "Shared", "Compute Instance", "page-2"))
        stub.add_response("get_products", {"FormatVersion": "aws_v1", "PriceList": [item("m5.metal", "5.136")]},
                          expected_params("eu-west-1", "Dedicated", "Compute Instance (bare metal)"))

        def factory(region):
            made.append(region)
            return client

        prices = pricing.on_demand_prices(factory, "eu-west-1")
        stub.assert_no_pending_responses()
    assert made == ["us-east-1"], "the Price List API is asked in us-east-1"
    assert {k: prices[k] for k in ("m5.large", "c5.large", "r5.large", "m5.metal")} == \
        {"m5.large": 0.096, "c5.large": 0.085, "r5.large": 0.141, "m5.metal": 5.136}
    # A type the live list lacks keeps the bundled price (eu-west-1 is not bundled: us-east-1's).
    assert prices["t3.micro"] == pricing.bundled_prices("us-east-1")["t3.micro"]

    clock.now += pricing.LIVE_SECONDS - 1
    assert pricing.on_demand_prices(factory, "eu-west-1") is prices and made == ["us-east-1"]


def test_a_refusal_falls_back_to_the_bundled_table_and_asks_again_later(clock):
    client = stubbed_client("pricing")
    with Stubber(client) as stub:
        stub.add_client_error("get_products", "AccessDeniedException", "not authorized to perform pricing:GetProducts")
        fallback = pricing.on_demand_prices(lambda region: client, "us-east-1")
        assert fallback == pricing.bundled_prices("us-east-1")
        stub.assert_no_pending_responses()
        clock.now += pricing.FALLBACK_SECONDS - 1
        assert pricing.on_demand_prices(lambda region: client, "us-east-1") is fallback, "kept, not asked again"

        clock.now += 2
        stub.add_response("get_products", {"PriceList": [item("m5.large", "0.1")]})
        stub.add_response("get_products", {"PriceList": []})
        assert pricing.on_demand_prices(lambda region: client, "us-east-1")["m5.large"] == 0.1
        stub.assert_no_pending_responses()


def test_an_empty_answer_is_no_answer(clock):
    client = stubbed_client("pricing")
    with Stubber(client) as stub:
        stub.add_response("get_products", {"PriceList": []})
        stub.add_response("get_products", {"PriceList": []})
        assert pricing.on_demand_prices(lambda region: client, "us-gov-west-1") == \
            pricing.bundled_prices("us-gov-west-1")


def test_an_unreachable_endpoint_falls_back(clock):
    port = free_port()  # nothing listens there

    def factory(region):
        return boto3.client("pricing", region_name=region, endpoint_url=f"http://127.0.0.1:{port}",
                            aws_access_key_id="x", aws_secret_access_key="x",
                            config=Config(connect_timeout=1, read_timeout=1, retries={"max_attempts": 1}))
    assert pricing.on_demand_prices(factory, "us-east-1") == pricing.bundled_prices("us-east-1")


@pytest.mark.moto
def test_moto_has_no_price_list_so_the_process_answers_the_bundled_table(aws, make_ctx, clock):
    ctx = make_ctx()
    asked = []
    ctx.aws.client("pricing", pricing.PRICING_REGION).meta.events.register(
        "before-parameter-build", lambda model=None, **_: asked.append(model.name))
    assert pricing.on_demand_prices(ctx.aws, "us-east-1") == pricing.bundled_prices("us-east-1")
    assert asked == ["GetProducts"]
    assert pricing.on_demand_prices(boto3.session.Session(), "us-west-2") == pricing.bundled_prices("us-east-1")


def test_price_list_items_that_are_not_prices_are_skipped():
    items = [item("m5.large", "0.096"), item(None, "1.0"), item("t3.nano", "0.0000000000"), "not json",
             json.dumps({"product": {}}), item("c5.large", "free"), item("r5.large", "0.9", currency="CNY")]
    assert pricing.parse_price_list(items) == {"m5.large": 0.096}
    assert pricing.parse_price_list(items, currency="CNY") == {"r5.large": 0.9}


def test_the_bundled_table():
    table = json.loads(pricing.BUNDLED.read_text())
    assert set(table) == {"generated", "source", "regions"}
    assert {"us-east-1", "us-gov-west-1"} <= set(table["regions"])
    for region, prices in table["regions"].items():
        assert len(prices) > 100, region
        assert all("." in name and isinstance(p, float) and p >= 0 for name, p in prices.items()), region
        assert list(prices) == sorted(prices), "sorted, so a regeneration diffs line by line"
    east = pricing.bundled_prices("us-east-1")
    assert 0.05 < east["m5.large"] < east["m5.xlarge"] < east["m5.2xlarge"]
    assert pricing.bundled_prices("ap-southeast-7") == east
