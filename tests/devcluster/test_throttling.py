"""The local stack's AWS throttles as AWS does (devcluster/throttling.py): token buckets, AWS's own errors on the
wire, faults on demand, and the control API. The bucket logic runs on an injected clock; the rest goes through
the tests' in-process moto with boto3."""
from __future__ import annotations

from urllib.parse import parse_qsl, urlencode

import boto3
import botocore.exceptions
import botocore.serialize
import botocore.session
import pytest
import requests
from botocore.config import Config
from moto.core import DEFAULT_ACCOUNT_ID
from moto.moto_server.werkzeug_app import DomainDispatcherApplication
from werkzeug.test import EnvironBuilder

from devcluster import components, moto_server, throttling
from devcluster.components import Ports
from devcluster.fleet import IMAGE_ID
from devcluster.throttling import Call, ControlRequestError, Throttling, identify
from hooks import aws_rate_buckets
from worlds.clock import ManualClock

REGION = "us-east-1"
FILTERED = {"Action": "DescribeInstances", "Filter.1.Name": "tag:Name", "Filter.1.Value.1": "web"}
NON_MUTATING_KEY = "ec2:DescribeInstances:ec2-non-mutating"


def _moto_stand_in(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"moto"]


@pytest.fixture
def clock():
    return ManualClock()


@pytest.fixture
def slept():
    return []


@pytest.fixture
def metered(clock, slept):
    return Throttling(_moto_stand_in, clock=clock, sleep=slept.append)


def _service(name: str) -> throttling.Service:
    (found,) = [s for group in throttling.services_by_signing_name().values() for s in group if s.name == name]
    return found


def _call(service: str, operation: str, fields: dict | None = None, region: str = REGION,
          account: str = DEFAULT_ACCOUNT_ID) -> Call:
    return Call(_service(service), operation, account, region, {"Action": operation, **(fields or {})})


def _admitted(metered: Throttling, call: Call, times: int) -> list[bool]:
    return [metered.admit(call) is None for _ in range(times)]


def _bucket(metered: Throttling, key: str, region: str = REGION) -> dict:
    (found,) = [b for b in metered.buckets.report() if b["key"] == key and b["region"] == region]
    return found


# -- the buckets, on the injected clock --------------------------------------------------------------------


def test_describe_instances_takes_100_then_is_refused_and_refills_at_20_a_second(metered, clock):
    describe = Call(_service("ec2"), "DescribeInstances", DEFAULT_ACCOUNT_ID, REGION, FILTERED)
    assert _admitted(metered, describe, 100) == [True] * 100
    refusal = metered.admit(describe)
    assert refusal is not None and refusal.status_code == 503
    assert b"<Code>RequestLimitExceeded</Code>" in refusal.get_data()
    clock.advance(0.25)
    assert _admitted(metered, describe, 6) == [True] * 5 + [False], "20 tokens a second: 5 in a quarter"
    clock.advance(3600)
    assert _bucket(metered, NON_MUTATING_KEY)["tokens"] == 100, "never above its capacity"
    assert _bucket(metered, NON_MUTATING_KEY)["admitted"] == 105
    assert _bucket(metered, NON_MUTATING_KEY)["throttled"] == 2


def test_a_bare_describe_instances_draws_from_the_unfiltered_bucket_of_50(metered):
    assert _admitted(metered, _call("ec2", "DescribeInstances"), 51) == [True] * 50 + [False]
    assert metered.admit(Call(_service("ec2"), "DescribeInstances", DEFAULT_ACCOUNT_ID, REGION, FILTERED)) is None


def test_ec2_meters_each_api_on_its_own(metered):
    describe_instances = Call(_service("ec2"), "DescribeInstances", DEFAULT_ACCOUNT_ID, REGION, FILTERED)
    assert _admitted(metered, describe_instances, 101)[-1] is False
    assert _admitted(metered, _call("ec2", "DescribeSubnets", {"SubnetId.1": "subnet-1"}), 100) == [True] * 100


def test_elb_describe_calls_share_one_bucket_of_40(metered):
    assert _admitted(metered, _call("elbv2", "DescribeLoadBalancers"), 20) == [True] * 20
    assert _admitted(metered, _call("elbv2", "DescribeTargetGroups"), 20) == [True] * 20
    refusal = metered.admit(_call("elbv2", "DescribeTargetHealth"))
    assert refusal is not None and refusal.status_code == 400 and b"<Code>Throttling</Code>" in refusal.get_data()
    assert metered.admit(_call("elbv2", "RegisterTargets")) is None, "mutating calls have a bucket of their own"
    assert metered.admit(_call("elb", "DescribeLoadBalancers")) is None, "so does each ELB API version"


def test_run_instances_takes_5_requests_then_is_refused(metered):
    assert _admitted(metered, _call("ec2", "RunInstances", {"MaxCount": "1"}), 6) == [True] * 5 + [False]


def test_run_instances_takes_a_token_per_instance_from_the_launched_bucket(metered):
    assert metered.admit(_call("ec2", "RunInstances", {"MinCount": "3", "MaxCount": "3"})) is None
    assert _bucket(metered, "ec2:RunInstances:instances")["tokens"] == 997
    assert _bucket(metered, "ec2:RunInstances")["tokens"] == 4


def test_a_call_short_in_one_bucket_takes_from_none(metered):
    assert metered.admit(_call("ec2", "RunInstances", {"MaxCount": "999"})) is None
    assert metered.admit(_call("ec2", "RunInstances", {"MaxCount": "2"})) is not None, "1 instance token left"
    requests_bucket = _bucket(metered, "ec2:RunInstances")
    launched = _bucket(metered, "ec2:RunInstances:instances")
    assert (requests_bucket["tokens"], requests_bucket["throttled"]) == (4, 0)
    assert (launched["tokens"], launched["throttled"]) == (1, 1)


def test_terminate_instances_takes_a_token_per_instance_named(metered):
    assert metered.admit(_call("ec2", "TerminateInstances", {"InstanceId.1": "i-1", "InstanceId.2": "i-2"})) is None
    assert _bucket(metered, "ec2:TerminateInstances:instances")["tokens"] == 998


def test_each_region_and_account_has_buckets_of_its_own(metered):
    assert _admitted(metered, _call("ec2", "RunInstances"), 6)[-1] is False
    assert metered.admit(_call("ec2", "RunInstances", region="us-west-2")) is None
    assert metered.admit(_call("ec2", "RunInstances", account="111111111111")) is None


def test_buckets_off_admit_everything_and_count_nothing(clock):
    off = Throttling(_moto_stand_in, enabled=False, clock=clock)
    assert _admitted(off, _call("ec2", "RunInstances"), 50) == [True] * 50
    assert off.buckets.report() == []


def test_a_scaled_account_has_buckets_that_many_times_larger(metered, clock):
    metered.buckets.reset(scale=10)
    assert _admitted(metered, _call("ec2", "RunInstances"), 51) == [True] * 50 + [False]
    clock.advance(1)
    assert _admitted(metered, _call("ec2", "RunInstances"), 21) == [True] * 20 + [False], "refill 2/s times 10"


def test_reset_fills_every_bucket(metered):
    assert _admitted(metered, _call("ec2", "RunInstances"), 6)[-1] is False
    metered.buckets.reset()
    assert _admitted(metered, _call("ec2", "RunInstances"), 5) == [True] * 5


# -- faults, on the injected clock -------------------------------------------------------------------------


def test_a_count_limited_fault_stops_after_its_calls_and_takes_no_tokens(metered):
    metered.faults.add({"service": "ec2", "operation": "RunInstances", "kind": "throttle", "count": 2})
    assert _admitted(metered, _call("ec2", "RunInstances"), 7) == [False, False] + [True] * 5
    assert _bucket(metered, "ec2:RunInstances")["admitted"] == 5
    assert metered.faults.report() == []


def test_a_fault_for_some_seconds_ends_on_the_clock(metered, clock):
    metered.faults.add({"service": "elbv2", "kind": "error", "seconds": 60, "status": 503})
    refusal = metered.admit(_call("elbv2", "DeregisterTargets"))
    assert refusal is not None and refusal.status_code == 503 and b"<Code>InternalFailure</Code>" in refusal.get_data()
    clock.advance(59.9)
    assert metered.admit(_call("elbv2", "DescribeTargetGroups")) is not None, "any operation: \"*\""
    clock.advance(0.1)
    assert metered.admit(_call("elbv2", "DeregisterTargets")) is None


def test_a_fault_leaves_other_operations_and_services_alone(metered):
    metered.faults.add({"service": "ec2", "operation": "DescribeInstances", "kind": "throttle"})
    assert metered.admit(_call("ec2", "DescribeSubnets")) is None
    assert metered.admit(_call("elbv2", "DescribeLoadBalancers")) is None
    assert metered.admit(_call("ec2", "DescribeInstances")) is not None


def test_a_slow_fault_waits_then_lets_moto_answer(metered, slept):
    metered.faults.add({"service": "*", "kind": "slow", "delay": 6.0})
    assert metered.admit(_call("sqs", "ReceiveMessage")) is None
    assert slept == [6.0]


def test_faults_apply_with_the_buckets_off(clock):
    off = Throttling(_moto_stand_in, enabled=False, clock=clock)
    off.faults.add({"service": "ec2", "kind": "error"})
    refusal = off.admit(_call("ec2", "DescribeVpcs"))
    assert refusal is not None and refusal.status_code == 500 and b"<Code>InternalError</Code>" in refusal.get_data()


@pytest.mark.parametrize("body, complaint", [
    ([], "JSON object"),
    ({"service": "s3", "kind": "throttle"}, "service must be one of"),
    ({"service": "ec2", "kind": "explode"}, "kind must be one of"),
    ({"service": "ec2", "kind": "throttle", "seconds": -1}, "seconds must be"),
    ({"service": "ec2", "kind": "throttle", "count": 0}, "count must be"),
    ({"service": "ec2", "kind": "throttle", "count": 1.5}, "count must be"),
    ({"service": "ec2", "kind": "slow"}, "needs delay"),
    ({"service": "ec2", "kind": "throttle", "delay": 3}, "delay is for kind"),
    ({"service": "ec2", "kind": "error", "status": 404}, "status must be"),
    ({"service": "ec2", "kind": "throttle", "status": 500}, "status is for kind"),
    ({"service": "ec2", "kind": "throttle", "secs": 5}, "unknown fields ['secs']"),
])
def test_a_fault_that_makes_no_sense_is_refused_with_the_reason(metered, body, complaint):
    with pytest.raises(ControlRequestError) as refused:
        metered.faults.add(body)
    assert complaint in str(refused.value)


# -- recognising a call on the wire ------------------------------------------------------------------------


def _environ(body: str, service: str, region: str = REGION, target: str | None = None,
             content_type: str = "application/x-www-form-urlencoded; charset=utf-8") -> dict:
    headers = {"Authorization": f"AWS4-HMAC-SHA256 Credential=AKID/20260101/{region}/{service}/aws4_request, "
                                "SignedHeaders=host;x-amz-date, Signature=abc"}
    if target:
        headers["X-Amz-Target"] = target
    return EnvironBuilder(method="POST", path="/", data=body, content_type=content_type,
                          headers=headers).get_environ()


def test_a_form_call_is_read_and_moto_gets_the_same_bytes():
    body = "Action=RunInstances&Version=2016-11-15&ImageId=ami-1&MinCount=3&MaxCount=3"
    environ = _environ(body, "ec2", region="eu-west-1")
    call = identify(environ)
    assert (call.service.name, call.operation, call.region, call.account) == (
        "ec2", "RunInstances", "eu-west-1", DEFAULT_ACCOUNT_ID)
    assert call.fields["MaxCount"] == "3"
    assert environ["wsgi.input"].read() == body.encode()
    assert environ["CONTENT_LENGTH"] == str(len(body))


def test_elb_and_elbv2_share_a_signing_name_and_are_told_apart_by_version():
    v1 = identify(_environ("Action=DescribeLoadBalancers&Version=2012-06-01", "elasticloadbalancing"))
    v2 = identify(_environ("Action=DescribeLoadBalancers&Version=2015-12-01", "elasticloadbalancing"))
    assert (v1.service.name, v2.service.name) == ("elb", "elbv2")


def test_a_json_call_is_recognised_by_its_target():
    call = identify(_environ("{}", "sqs", target="AmazonSQS.ReceiveMessage", content_type="application/x-amz-json-1.0"))
    assert (call.service.name, call.operation, call.fields) == ("sqs", "ReceiveMessage", {})


@pytest.mark.parametrize("environ", [
    _environ("Action=GetCallerIdentity&Version=2011-06-15", "sts"),
    EnvironBuilder(method="POST", path="/", data="Action=DescribeVpcs",
                   content_type="application/x-www-form-urlencoded").get_environ(),
    _environ("Action=DescribeLoadBalancers&Version=1999-01-01", "elasticloadbalancing"),
], ids=["a service with no buckets", "unsigned", "an unknown API version"])
def test_anything_else_is_not_a_metered_call(environ):
    assert identify(environ) is None


def _on_the_wire(serializer, params: dict, operation_model) -> dict[str, str]:
    """The form fields botocore sends for ``params``, as the server reads them back."""
    return dict(parse_qsl(urlencode(serializer.serialize_to_request(params, operation_model)["body"])))


@pytest.mark.parametrize("operation, narrowing", [
    ("DescribeInstances", {"Filters": [{"Name": "tag:x", "Values": ["y"]}]}),
    ("DescribeInstances", {"InstanceIds": ["i-1"]}),
    ("DescribeInstances", {"MaxResults": 5}),
    ("DescribeInstances", {"NextToken": "t"}),
    ("DescribeSubnets", {"SubnetIds": ["subnet-1"]}),
    ("DescribeImages", {"Owners": ["self"]}),
    ("DescribeSnapshots", {"OwnerIds": ["self"]}),
])
def test_a_describe_is_unfiltered_on_the_wire_only_when_bare(operation, narrowing):
    """As botocore serialises the call: bare, it draws from the unfiltered bucket; with ids, a filter or a page
    size, from the non-mutating one."""
    operation_model = botocore.session.get_session().get_service_model("ec2").operation_model(operation)
    serializer = botocore.serialize.create_serializer("ec2")
    bare = aws_rate_buckets.request_draws("ec2", operation, _on_the_wire(serializer, {}, operation_model))
    narrowed = aws_rate_buckets.request_draws("ec2", operation, _on_the_wire(serializer, narrowing, operation_model))
    assert [d.bucket for d in bare] == [aws_rate_buckets.EC2_UNFILTERED]
    assert [d.bucket for d in narrowed] == [aws_rate_buckets.EC2_NON_MUTATING]


@pytest.mark.parametrize("operation, params, instances", [
    ("RunInstances", {"ImageId": "ami-1", "MinCount": 1, "MaxCount": 7}, 7),
    ("TerminateInstances", {"InstanceIds": ["i-1", "i-2", "i-3"]}, 3),
])
def test_the_wire_form_counts_the_instances(operation, params, instances):
    operation_model = botocore.session.get_session().get_service_model("ec2").operation_model(operation)
    wire = _on_the_wire(botocore.serialize.create_serializer("ec2"), params, operation_model)
    drawn = aws_rate_buckets.request_draws("ec2", operation, wire)
    assert [d.tokens for d in drawn] == [1.0, float(instances)]


# -- through moto, with boto3 ------------------------------------------------------------------------------


def _client(service: str, endpoint: str, **config) -> object:
    # One attempt: a client config's "max_attempts" counts retries, so 1 would still retry once.
    return boto3.client(service, region_name=REGION, endpoint_url=endpoint, aws_access_key_id="testing",
                        aws_secret_access_key="testing",
                        config=Config(retries={"total_max_attempts": 1}, **config))


def test_the_101st_describe_instances_is_refused_as_aws_refuses_it(throttling_aws, throttling_clock, moto_endpoint):
    ec2 = _client("ec2", moto_endpoint)
    filters = [{"Name": "instance-state-name", "Values": ["running"]}]
    for _ in range(100):
        ec2.describe_instances(Filters=filters)
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        ec2.describe_instances(Filters=filters)
    assert refused.value.response["Error"]["Code"] == "RequestLimitExceeded"
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    bucket = throttling_aws.bucket(NON_MUTATING_KEY)
    assert (bucket["admitted"], bucket["throttled"], bucket["tokens"]) == (100, 1, 0)
    throttling_clock.advance(0.1)
    ec2.describe_instances(Filters=filters)


def test_a_refused_run_instances_launches_nothing(throttling_aws, throttling_clock, moto_endpoint):
    ec2 = _client("ec2", moto_endpoint)
    for _ in range(5):
        ec2.run_instances(ImageId=IMAGE_ID, MinCount=1, MaxCount=1)
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        ec2.run_instances(ImageId=IMAGE_ID, MinCount=1, MaxCount=1)
    assert refused.value.response["Error"]["Code"] == "RequestLimitExceeded"
    throttling_aws.disable()
    launched = [i for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]]
    assert len(launched) == 5


# One cheap call of each metered service, and the error code and HTTP status AWS throttles it with.
THROTTLED = [("ec2", "describe_vpcs", "RequestLimitExceeded", 503),
             ("elbv2", "describe_target_groups", "Throttling", 400),
             ("elb", "describe_load_balancers", "Throttling", 400),
             ("autoscaling", "describe_auto_scaling_groups", "Throttling", 400),
             ("sqs", "list_queues", "Throttling", 400),
             ("resourcegroupstaggingapi", "get_resources", "Throttling", 400)]


@pytest.mark.parametrize("service, method, code, status", THROTTLED, ids=[t[0] for t in THROTTLED])
def test_botocore_reads_a_throttled_call_as_aws_throttling(throttling_aws, moto_endpoint, service, method,
                                                           code, status):
    throttling_aws.add_fault(service, "throttle", count=1)
    client = _client(service, moto_endpoint)
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        getattr(client, method)()
    assert refused.value.response["Error"]["Code"] == code
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == status
    getattr(client, method)()


@pytest.mark.parametrize("service, method", [t[:2] for t in THROTTLED], ids=[t[0] for t in THROTTLED])
def test_botocore_reads_a_failed_call_as_aws_internal_error(throttling_aws, moto_endpoint, service, method):
    throttling_aws.add_fault(service, "error", count=1)
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        getattr(_client(service, moto_endpoint), method)()
    assert refused.value.response["Error"]["Code"] == ("InternalError" if service == "ec2" else "InternalFailure")
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500


def test_a_slow_call_outlasts_the_clients_read_timeout(throttling_aws, moto_endpoint):
    throttling_aws.add_fault("ec2", "slow", "DescribeVpcs", delay=0.5, count=1)
    with pytest.raises(botocore.exceptions.ReadTimeoutError):
        _client("ec2", moto_endpoint, read_timeout=0.2).describe_vpcs()
    # A client that waits longer: on a busy machine moto itself may take 0.2 s.
    assert _client("ec2", moto_endpoint).describe_vpcs()["Vpcs"]
    assert throttling_aws.state()["faults"] == [], "one call only"


def test_a_count_limited_fault_through_the_control_api(throttling_aws, moto_endpoint):
    fault = throttling_aws.add_fault("ec2", "error", "DescribeSubnets", count=2)
    assert (fault["kind"], fault["remaining"], fault["status"]) == ("error", 2, 500)
    ec2 = _client("ec2", moto_endpoint)
    for _ in range(2):
        with pytest.raises(botocore.exceptions.ClientError):
            ec2.describe_subnets()
    assert ec2.describe_subnets()["Subnets"]
    assert throttling_aws.state()["faults"] == []


def test_the_control_api_scales_resets_and_switches_the_buckets(throttling_aws, throttling_clock, moto_endpoint):
    ec2 = _client("ec2", moto_endpoint)
    throttling_aws.scale(2)
    for _ in range(10):
        ec2.run_instances(ImageId=IMAGE_ID, MinCount=1, MaxCount=1)
    with pytest.raises(botocore.exceptions.ClientError):
        ec2.run_instances(ImageId=IMAGE_ID, MinCount=1, MaxCount=1)
    assert throttling_aws.bucket("ec2:RunInstances")["capacity"] == 10
    throttling_aws.reset()
    assert throttling_aws.bucket("ec2:RunInstances") is None, "no bucket drawn from since"
    ec2.run_instances(ImageId=IMAGE_ID, MinCount=1, MaxCount=1)
    throttling_aws.disable()
    assert throttling_aws.state()["enabled"] is False
    for _ in range(12):
        ec2.run_instances(ImageId=IMAGE_ID, MinCount=1, MaxCount=1)


@pytest.mark.parametrize("method, path, body, status, complaint", [
    ("POST", "/faults", "{not json", 400, "not JSON"),
    ("POST", "/faults", "", 400, "empty"),
    ("POST", "/faults", '{"service": "ec2", "kind": "slow"}', 400, "needs delay"),
    ("PUT", "/enabled", '{"enabled": "no"}', 400, '{"enabled": false}'),
    ("POST", "/scale", '{"factor": 0}', 400, "above 0"),
    ("POST", "/scale", b"\xff", 400, "not JSON"),
    ("GET", "/enabled", None, 405, "takes PUT"),
    ("GET", "/nothing", None, 404, "POST /_throttling/faults"),
])
def test_the_control_api_answers_a_bad_request_with_the_reason(throttling_aws, moto_endpoint, method, path, body,
                                                               status, complaint):
    answer = requests.request(method, f"{moto_endpoint}/_throttling{path}", data=body, timeout=10)
    assert answer.status_code == status
    assert complaint in answer.json()["error"]


def test_moto_api_passes_through_untouched(throttling_aws, moto_endpoint):
    throttling_aws.add_fault("*", "error")
    assert requests.post(f"{moto_endpoint}/moto-api/reset", timeout=10).status_code == 200
    assert throttling_aws.state()["buckets"] == []


# -- where it runs -------------------------------------------------------------------------------------------


@pytest.fixture
def served(monkeypatch):
    """The app moto_server.main would serve, without serving it."""
    found = []
    monkeypatch.setattr(moto_server, "run_simple", lambda host, port, app, **kwargs: found.append(app))
    monkeypatch.delenv(throttling.ENVIRONMENT_SWITCH, raising=False)
    return found


def test_the_local_stacks_moto_throttles_by_default(served):
    moto_server.main(["-H", "127.0.0.1", "-p", "5999"])
    (app,) = served
    assert isinstance(app, Throttling) and app.enabled
    assert isinstance(app.app, DomainDispatcherApplication)


@pytest.mark.parametrize("argv, environ", [(["--no-throttling"], "on"), ([], "off"), ([], "OFF")])
def test_the_switch_leaves_moto_bare(served, monkeypatch, argv, environ):
    monkeypatch.setenv(throttling.ENVIRONMENT_SWITCH, environ)
    moto_server.main(["-p", "5999", *argv])
    (app,) = served
    assert isinstance(app, DomainDispatcherApplication)


def test_an_explicit_flag_outweighs_the_environment(served, monkeypatch):
    monkeypatch.setenv(throttling.ENVIRONMENT_SWITCH, "off")
    moto_server.main(["-p", "5999", "--throttling"])
    (app,) = served
    assert isinstance(app, Throttling)


def test_the_cluster_tells_moto_which_it_wants():
    ports = Ports(**{name: 1 for name in Ports.PREFERRED})
    assert components.moto(ports, False)[-1] == "--no-throttling"
    assert components.moto(ports, True)[-1] == "--throttling"
    assert throttling.wanted_by_environment({}) is True
    assert throttling.wanted_by_environment({throttling.ENVIRONMENT_SWITCH: "off"}) is False
