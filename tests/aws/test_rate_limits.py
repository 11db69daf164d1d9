"""The process's share of AWS's buckets, on the code's clock (no test sleeps for a refill)."""
from __future__ import annotations

import threading

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, ReadTimeoutError

from hooks import aws_rate_buckets
from hooks.aws import rate_limits
from hooks.aws.clients import AwsClients, limiter_of
from hooks.config import load_settings
from worlds.clock import ManualClock


def _limiter(share=1.0, shares=None):
    clock = ManualClock()
    return rate_limits.Limiter(share, shares, clock=clock, sleep=clock.sleep), clock


def _describe(limiter, region="us-east-1"):
    return limiter.acquire(region, "DescribeInstances",
                           aws_rate_buckets.request_draws("ec2", "DescribeInstances", {"InstanceId.1": "i-1"}))


def test_a_full_bucket_admits_its_capacity_at_once_then_waits_for_the_refill():
    limiter, clock = _limiter()
    with rate_limits.hook_call(10):
        assert [_describe(limiter) for _ in range(100)] == [0.0] * 100
        assert _describe(limiter) == pytest.approx(1 / 20)  # EC2 non-mutating refills 20 a second
    assert clock.slept == [pytest.approx(0.05)]


def test_a_call_that_cannot_get_its_token_within_the_hook_calls_wait_is_not_sent_and_takes_nothing():
    limiter, clock = _limiter()
    run = aws_rate_buckets.request_draws("ec2", "RunInstances", {"MaxCount": "1"})
    with rate_limits.hook_call(0.4):
        for _ in range(5):
            limiter.acquire("us-east-1", "RunInstances", run)
        with pytest.raises(rate_limits.Limited) as raised:
            limiter.acquire("us-east-1", "RunInstances", run)  # the next token in 0.5 s
    assert raised.value.response["Error"]["Code"] == "RequestLimitExceeded"
    assert clock.slept == []
    clock.now += 0.5
    with rate_limits.hook_call(0):
        assert limiter.acquire("us-east-1", "RunInstances", run) == 0.0, "the refused call took no token"


def test_the_hook_calls_wait_is_shared_by_its_calls():
    limiter, clock = _limiter(shares={"ec2-run-instances": 0.2})  # one token, one more every 2.5 s
    run = aws_rate_buckets.request_draws("ec2", "RunInstances", {"MaxCount": "1"})
    with rate_limits.hook_call(3):
        limiter.acquire("us-east-1", "RunInstances", run)
        assert limiter.acquire("us-east-1", "RunInstances", run) == pytest.approx(2.5)
        with pytest.raises(rate_limits.Limited):
            limiter.acquire("us-east-1", "RunInstances", run)  # 2.5 s more: past the 3 s the call had


def test_waiting_callers_queue_behind_each_others_reservations():
    clock = ManualClock()
    # Two callers reserve before either has slept.
    limiter = rate_limits.Limiter(1.0, {"ec2-run-instances": 0.2}, clock=clock, sleep=lambda seconds: None)
    run = aws_rate_buckets.request_draws("ec2", "RunInstances", {"MaxCount": "1"})
    limiter.acquire("us-east-1", "RunInstances", run)
    waits = [limiter.acquire("us-east-1", "RunInstances", run) for _ in range(2)]
    assert waits == [pytest.approx(2.5), pytest.approx(5.0)]


def test_buckets_are_per_api_in_ec2_per_category_in_elb_and_per_region():
    limiter, clock = _limiter()
    with rate_limits.hook_call(0):
        for _ in range(100):
            _describe(limiter)
        with pytest.raises(rate_limits.Limited):
            _describe(limiter)
        limiter.acquire("us-east-1", "DescribeSubnets",
                        aws_rate_buckets.request_draws("ec2", "DescribeSubnets", {"SubnetId.1": "s"}))
        _describe(limiter, region="eu-west-1")
        for operation in ["DescribeTargetHealth"] * 20 + ["DescribeLoadBalancers"] * 20:
            limiter.acquire("us-east-1", operation, aws_rate_buckets.request_draws("elbv2", operation, {}))
        with pytest.raises(rate_limits.Limited) as raised:
            limiter.acquire("us-east-1", "DescribeTargetGroups",
                            aws_rate_buckets.request_draws("elbv2", "DescribeTargetGroups", {}))
    assert raised.value.response["Error"]["Code"] == "Throttling"


def test_a_launch_of_several_instances_draws_them_from_the_resource_bucket():
    limiter, clock = _limiter(shares={"ec2-run-instances-launched": 0.01})  # 10 instances, 0.02 a second
    with rate_limits.hook_call(0):
        limiter.acquire("us-east-1", "RunInstances",
                        aws_rate_buckets.request_draws("ec2", "RunInstances", {"MaxCount": "8"}))
        with pytest.raises(rate_limits.Limited):
            limiter.acquire("us-east-1", "RunInstances",
                            aws_rate_buckets.request_draws("ec2", "RunInstances", {"MaxCount": "3"}))


def test_a_bare_describe_draws_from_the_unfiltered_bucket():
    bare = aws_rate_buckets.request_draws("ec2", "DescribeInstances", {"Action": "DescribeInstances",
                                                                       "Version": "2016-11-15"})
    filtered = aws_rate_buckets.request_draws("ec2", "DescribeInstances", {"Filter.1.Name": "tag:x"})
    assert [d.bucket for d in bare] == [aws_rate_buckets.EC2_UNFILTERED]
    assert [d.bucket for d in filtered] == [aws_rate_buckets.EC2_NON_MUTATING]


def test_a_share_of_zero_turns_the_bucket_off():
    limiter, clock = _limiter(shares={"ec2-non-mutating": 0})
    with rate_limits.hook_call(0):
        assert all(_describe(limiter) == 0.0 for _ in range(1000))


def test_threads_together_take_no_more_than_the_share():
    limiter, clock = _limiter(share=0.5)
    lock = threading.Lock()
    admitted, refused = [], []

    def call():
        try:
            with rate_limits.hook_call(0):
                _describe(limiter)
            with lock:
                admitted.append(1)
        except rate_limits.Limited:
            with lock:
                refused.append(1)

    threads = [threading.Thread(target=call) for _ in range(200)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(admitted) == 50 and len(refused) == 150


def test_the_deployment_share_is_split_over_its_processes():
    settings = load_settings({"NODEWARDEN_AWS_RATE_SHARE": "0.5", "NODEWARDEN_AWS_RATE_PROCESSES": "4",
                              "NODEWARDEN_AWS_RATE_SHARES": "ec2-run-instances=1"})
    limiter = limiter_of(settings)
    assert limiter.share_of(aws_rate_buckets.EC2_NON_MUTATING) == pytest.approx(0.125)
    assert limiter.share_of(aws_rate_buckets.RUN_INSTANCES) == pytest.approx(0.25)


def test_every_attempt_of_a_real_client_is_metered_and_a_limited_call_is_never_sent(aws):
    """Through moto: the limiter sits in botocore's send path, so a call it refuses never reaches AWS."""
    limiter, clock = _limiter(shares={"ec2-run-instances": 0.2})  # on the code's clock: moto may be slow
    ec2 = AwsClients(load_settings({"AWS_REGION": "us-east-1"}), limiter=limiter).client("ec2")
    sent = []
    ec2.meta.events.register("after-call.ec2.RunInstances", lambda **_: sent.append(1))
    launch = {"ImageId": "ami-12c6146b", "MinCount": 1, "MaxCount": 1}
    with rate_limits.hook_call(0):
        ec2.run_instances(**launch)
        with pytest.raises(rate_limits.Limited):
            ec2.run_instances(**launch)
    assert sent == [1]
    plain = boto3.client("ec2", region_name="us-east-1", config=Config(retries={"max_attempts": 1}))
    count = sum(len(r["Instances"]) for r in plain.describe_instances()["Reservations"])
    assert count == 1, "the refused launch reached nothing"


def test_a_bucket_aws_publishes_no_figure_for_is_limited_only_when_named():
    deregister = aws_rate_buckets.request_draws("elbv2", "DeregisterTargets", {})
    assert not deregister[0].bucket.documented
    unnamed, clock = _limiter(share=0.5)
    with rate_limits.hook_call(0):
        assert all(unnamed.acquire("us-east-1", "DeregisterTargets", deregister) == 0.0 for _ in range(500))
    named, clock = _limiter(share=0.5, shares={"elb-mutating": 0.5})
    with rate_limits.hook_call(0):
        for _ in range(10):
            named.acquire("us-east-1", "DeregisterTargets", deregister)
        with pytest.raises(rate_limits.Limited):
            named.acquire("us-east-1", "DeregisterTargets", deregister)


def test_an_unpublished_bucket_is_limited_for_a_while_once_aws_throttled_a_call_of_it():
    deregister = aws_rate_buckets.request_draws("elbv2", "DeregisterTargets", {})
    limiter, clock = _limiter(share=0.5)
    with rate_limits.hook_call(0):
        assert limiter.acquire("us-east-1", "DeregisterTargets", deregister) == 0.0
    limiter.throttled("us-east-1", deregister)
    with rate_limits.hook_call(0), pytest.raises(rate_limits.Limited):
        limiter.acquire("us-east-1", "DeregisterTargets", deregister)  # from empty: AWS said it is
    clock.now += 10  # half of the 4 a second the table assumes: refilled to half of its 20
    with rate_limits.hook_call(0):
        for _ in range(10):
            limiter.acquire("us-east-1", "DeregisterTargets", deregister)
        with pytest.raises(rate_limits.Limited):
            limiter.acquire("us-east-1", "DeregisterTargets", deregister)
    clock.now += rate_limits.ENGAGED_SECONDS + 1
    with rate_limits.hook_call(0):
        assert all(limiter.acquire("us-east-1", "DeregisterTargets", deregister) == 0.0 for _ in range(100))


def test_throttling_of_a_published_bucket_changes_nothing():
    describe = aws_rate_buckets.request_draws("ec2", "DescribeInstances", {"InstanceId.1": "i-1"})
    limiter, _ = _limiter(share=0.5)
    limiter.throttled("us-east-1", describe)
    assert limiter.share_of(describe[0].bucket) == 0.5


def test_a_real_client_stops_sending_what_aws_throttles(aws, throttling_aws, throttling_clock):
    """Through the throttling moto, its clock stopped: once AWS answered "Throttling" to an ELB write, the
    limiter holds the next ones back itself instead of sending attempts AWS refuses."""
    limiter, _ = _limiter(share=0.5)
    elbv2 = AwsClients(load_settings({"AWS_REGION": "us-east-1"}), limiter=limiter).client("elbv2")
    vpc = aws("ec2").describe_vpcs()["Vpcs"][0]["VpcId"]
    instance = aws("ec2").run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    arn = aws("elbv2").create_target_group(Name="paced", Protocol="TCP", Port=80, VpcId=vpc,
                                           TargetType="instance")["TargetGroups"][0]["TargetGroupArn"]
    throttling_aws.reset()
    outcomes = []
    with rate_limits.hook_call(0):
        for _ in range(60):
            try:
                elbv2.register_targets(TargetGroupArn=arn, Targets=[{"Id": instance, "Port": 80}])
                outcomes.append("sent")
            except rate_limits.Limited:
                outcomes.append("held back")
            except ClientError as exc:  # AWS's own answer, after botocore's retries
                outcomes.append(exc.response["Error"]["Code"])
    refused = throttling_aws.bucket("elbv2:elb-mutating")["throttled"]
    assert outcomes.count("sent") == 20, "the assumed bucket's 20 at once"
    assert "held back" in outcomes and outcomes[-1] == "held back"
    assert refused <= 3, "AWS refused the attempts of one call; every call after that was held back"


def _target_group(aws):
    vpc = aws("ec2").describe_vpcs()["Vpcs"][0]["VpcId"]
    instance = aws("ec2").run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    arn = aws("elbv2").create_target_group(Name="ahead", Protocol="TCP", Port=80, VpcId=vpc,
                                           TargetType="instance")["TargetGroups"][0]["TargetGroupArn"]
    return arn, [{"Id": instance, "Port": 80}]


def test_a_call_paid_ahead_takes_its_tokens_once_and_waits_no_more(aws):
    """Through moto, on the code's clock: the wait comes before the block, and nothing in it waits again."""
    limiter, clock = _limiter(shares={"elb-mutating": 0.05})  # one token, one more every 5 s
    elbv2 = AwsClients(load_settings({"AWS_REGION": "us-east-1"}), limiter=limiter).client("elbv2")
    arn, targets = _target_group(aws)
    with rate_limits.hook_call(10):
        with rate_limits.paid_ahead(elbv2, "RegisterTargets", 10):
            elbv2.register_targets(TargetGroupArn=arn, Targets=targets)
        assert clock.slept == [], "the bucket's one token, taken once"
        with rate_limits.paid_ahead(elbv2, "RegisterTargets", 10):
            assert clock.slept == [pytest.approx(5.0)], "waited for before the call"
            elbv2.register_targets(TargetGroupArn=arn, Targets=targets)
            with pytest.raises(rate_limits.Limited):
                elbv2.register_targets(TargetGroupArn=arn, Targets=targets)  # no token: not sent, no wait
        with pytest.raises(rate_limits.Limited):
            with rate_limits.paid_ahead(elbv2, "RegisterTargets", 1):  # the next token is 5 s away
                raise AssertionError("the block never runs without its tokens")
    assert clock.slept == [pytest.approx(5.0)]


def test_a_client_nothing_meters_is_paid_ahead_of_nothing(aws):
    elbv2 = aws("elbv2")
    arn, targets = _target_group(aws)
    with rate_limits.paid_ahead(elbv2, "RegisterTargets", 0):
        elbv2.register_targets(TargetGroupArn=arn, Targets=targets)
    assert len(elbv2.describe_target_health(TargetGroupArn=arn)["TargetHealthDescriptions"]) == 1


def test_a_retry_is_made_only_if_it_can_end_within_the_hook_calls_window():
    """On the code's clock: the back-off before the retry at its longest, and once an attempt has timed out,
    the attempt itself at its longest too."""
    clock = ManualClock()
    attempt = 7.0  # connect 2 s + read 5 s, as the hooks' clients have them
    assert rate_limits.retry_fits(1, attempt) and rate_limits.retry_fits(5, attempt), "outside a hook call"
    with rate_limits.hook_call(0, 8.5, clock=clock):
        clock.advance(7.0)
        assert rate_limits.retry_fits(1, attempt), "7 s in: up to 1 s of back-off, then a quick answer"
        assert not rate_limits.retry_fits(2, attempt), "a second retry's back-off is up to 2 s"
    with rate_limits.hook_call(0, 8.5, clock=clock):
        rate_limits.timed_out()
        clock.advance(0.5)
        assert rate_limits.retry_fits(1, attempt), "AWS is slow: 0.5 s in, 1 s of back-off, 7 s of attempt"
        clock.advance(0.5)
        assert not rate_limits.retry_fits(1, attempt), "1 s in, that retry could end at 9 s"
    with rate_limits.hook_call(0, None, clock=clock):
        assert rate_limits.retry_fits(4, attempt), "no window: botocore decides alone"


@pytest.mark.moto
def test_a_throttled_call_is_not_retried_past_the_hook_calls_window(aws, throttling_aws, retries_at_once):
    """Through the throttling moto, which refuses the first two attempts: with room in the window botocore
    retries until one goes through; with none, the hook call gets AWS's refusal after one attempt and answers."""
    throttling_aws.disable()
    ec2 = AwsClients(load_settings({"AWS_REGION": "us-east-1"}), limiter=_limiter()[0]).client("ec2")

    def attempts_refused() -> int:
        return sum(fault["matched"] for fault in throttling_aws.state()["faults"])

    throttling_aws.add_fault("ec2", "throttle", operation="DescribeInstances", count=2)
    with rate_limits.hook_call(0, 60.0):
        ec2.describe_instances()  # the third attempt goes through
    assert throttling_aws.state()["faults"] == [], "both refusals were spent on its retries"

    throttling_aws.add_fault("ec2", "throttle", operation="DescribeInstances", count=2)
    with rate_limits.hook_call(0, 0.5), pytest.raises(ClientError) as refused:  # less than a back-off
        ec2.describe_instances()
    assert refused.value.response["Error"]["Code"] == "RequestLimitExceeded"
    assert not isinstance(refused.value, rate_limits.Limited), "AWS's own answer, not the limiter's"
    assert attempts_refused() == 1, "one attempt, no retry"

    ec2.describe_instances()  # outside any hook call: botocore's retries as ever
    assert throttling_aws.state()["faults"] == []


@pytest.mark.moto
def test_once_an_attempt_timed_out_the_hook_call_sends_nothing_that_could_end_past_its_time(aws):
    """On the code's clock, AWS answering DescribeInstances later than the client waits
    (worlds/cluster_gc.Late: botocore's ReadTimeoutError): 5 s into a hook call of 9, a call that could take
    7 s is not sent once an attempt has timed out, and is sent when none has."""
    from worlds.cluster_gc import Late

    clock = ManualClock()
    ec2 = AwsClients(load_settings({"AWS_REGION": "us-east-1"}), limiter=_limiter()[0]).client("ec2")
    Late("DescribeInstances", latency=30).attach_client(ec2)
    sent = []
    ec2.meta.events.register("after-call.ec2.DescribeSubnets", lambda **_: sent.append(1))

    with rate_limits.hook_call(0, 9.0, clock=clock):
        clock.advance(5)
        ec2.describe_subnets()  # nothing has timed out: sent, whatever the time
        with pytest.raises(ReadTimeoutError):
            ec2.describe_instances()
        with pytest.raises(rate_limits.TimedOut) as held:
            ec2.describe_subnets()
    assert held.value.response["Error"]["Code"] == "RequestLimitExceeded", "a code every caller retries later"
    assert sent == [1], "the second DescribeSubnets never went out"

    with rate_limits.hook_call(0, 9.0, clock=clock):
        ec2.describe_subnets()  # a new hook call: its own time
    assert sent == [1, 1]
