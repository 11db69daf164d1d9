"""Fencing's reads of its instances, against moto: each fresh (what DescribeInstances answers now), and those
that arrive together sent as one DescribeInstances by an instance-id filter (ClusterInstances.fresh_by_id)."""
from __future__ import annotations

import threading
import time

import pytest
from botocore.exceptions import ClientError

from hooks import fencing_names
from hooks.aws import ec2_power
from hooks.aws.instance_view import ClusterInstances
from worlds.clock import ManualClock
from worlds.cluster_gc import Calls
from worlds.fake_kube import FakeKube
from worlds.fencing import CLUSTER_TAG, RequestHarness, launch, unready_node

pytestmark = pytest.mark.moto

REGION = "us-east-1"
UNKNOWN = "i-0123456789abcdef0"
OOS = (fencing_names.OUT_OF_SERVICE_TAINT, fencing_names.OUT_OF_SERVICE_VALUE, fencing_names.OUT_OF_SERVICE_EFFECT)


def _held_open(ctx, reads: int) -> ClusterInstances:
    """The context's ClusterInstances, each batch's first read waiting until ``reads`` have joined it: the
    test sends that many at once and never rests on how fast its threads start (10 s of the machine's time
    is only the bound of a test that fails)."""
    def until_joined(_window: float) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            open_batches = [b._open for b in instances._batchers.values() if b._open is not None]
            if open_batches and len(open_batches[0].keys) >= reads:
                return
            time.sleep(0.001)

    instances = ClusterInstances(lambda region: ctx.aws.client("ec2", region or None), ctx.settings.cluster_name,
                                 ctx.settings.instance_view_seconds, ctx.settings.instance_read_window_seconds,
                                 sleep=until_joined)
    return instances


def _at_once(calls: list) -> list:
    """Each callable on a thread of its own, started together; their results (or errors) in order."""
    results: list = [None] * len(calls)

    def run(index: int) -> None:
        try:
            results[index] = calls[index]()
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            results[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def _filtered_ids(ctx) -> list[list[str]]:
    """The instance ids of each DescribeInstances the context's EC2 client sends, as it sends them."""
    sent: list[list[str]] = []

    def remember(params=None, **_):
        sent.append(sorted(v for f in params.get("Filters") or [] if f["Name"] == "instance-id" for v in f["Values"]))

    ctx.aws.client("ec2", REGION).meta.events.register("before-parameter-build.ec2.DescribeInstances", remember)
    return sent


def test_requests_confirming_their_power_off_together_share_each_describe_instances(aws, make_ctx):
    """Four requests waiting for their stops to be confirmed, synced at once in one process. Each sync
    reads its instance three times: on the body, again on the request and Node the API server confirmed,
    and right before the taint (the instance still off). Each of those is one DescribeInstances for all
    four: 3 calls, not 12."""
    ec2, kube, clock = aws("ec2"), FakeKube(), ManualClock(0.0)
    shared = make_ctx(kube=kube)
    requests, instances = [], []
    for n in range(4):
        instances.append(launch(ec2))
        kube.add_node(unready_node(instances[-1], name=f"node-{n}", uid=f"uid-node-{n}"))
        requests.append(RequestHarness(make_ctx, kube, {}, name=f"fence-node-{n}", node=f"node-{n}",
                                       uid=f"uid-fr-{n}", ctx=shared, clock=clock))
    for request in requests:
        request.call()  # StopInstances; moto stops at once
    assert all(r.status["phase"] == fencing_names.POWERING_OFF for r in requests)

    clock.advance(2)
    shared._instances = _held_open(shared, len(requests))
    calls = Calls().attach(shared.aws, services=("ec2",))
    sent = _filtered_ids(shared)
    results = _at_once([r.call for r in requests])

    assert not [r for r in results if isinstance(r, Exception)], results
    assert calls.by_operation["DescribeInstances"] == 3, calls.by_operation
    assert sent == [sorted(instances)] * 3
    for n, request in enumerate(requests):
        assert request.condition(fencing_names.FENCING_SUCCEEDED)["status"] == "True", request.status
        assert request.status["phase"] == fencing_names.RECOVERING
        assert OOS in {(t["key"], t.get("value"), t["effect"]) for t in kube.taints(f"node-{n}")}


def test_an_instance_ec2_does_not_know_is_not_found_though_its_batch_answers(aws, make_ctx):
    """A filter on an unknown id is no error, so the batch answers; the id missing from the answer is
    InstanceNotFound (never "off"), and the other read of the batch gets its instance."""
    ec2 = aws("ec2")
    known = launch(ec2)
    ctx = make_ctx()
    ctx._instances = _held_open(ctx, 2)
    calls = Calls().attach(ctx.aws, services=("ec2",))
    found, missing = _at_once([lambda: ec2_power.describe(ctx.instances, REGION, known),
                               lambda: ec2_power.describe(ctx.instances, REGION, UNKNOWN)])
    assert calls.by_operation["DescribeInstances"] == 1
    assert found["instanceID"] == known and found["state"] == "running"
    assert isinstance(missing, ec2_power.InstanceNotFound) and UNKNOWN in str(missing)


def test_the_state_tags_and_address_are_what_describe_instances_answers_now(aws, make_ctx):
    ec2 = aws("ec2")
    instance = launch(ec2)
    ctx = make_ctx()
    described = ec2.describe_instances(InstanceIds=[instance])["Reservations"][0]["Instances"][0]
    seen = ec2_power.describe(ctx.instances, REGION, instance)
    assert seen["state"] == "running"
    assert seen["tags"] == {CLUSTER_TAG["Key"]: CLUSTER_TAG["Value"]}
    assert seen["privateIp"] == described["PrivateIpAddress"]

    ec2.stop_instances(InstanceIds=[instance], Force=True)
    assert ec2_power.state(ctx.instances, REGION, instance) == "stopped", "read again, not kept"
    assert ec2_power.state(ctx.instances, None, instance) == "stopped", "the default region's client"


def test_a_throttled_read_is_each_callers_error_and_never_a_power_off(aws, make_ctx, throttling_aws,
                                                                     retries_at_once):
    """The instance is stopped, but DescribeInstances is throttled: no caller of the refused batch is told
    anything, no request records a power-off, and the first read EC2 answers confirms it."""
    throttling_aws.disable()  # only the fault refuses
    ec2, kube = aws("ec2"), FakeKube()
    instance = launch(ec2)
    kube.add_node(unready_node(instance))
    request = RequestHarness(make_ctx, kube, {})
    request.call()
    assert request.status["phase"] == fencing_names.POWERING_OFF and request.status["providerStatus"]["stopAttempts"] == 1

    throttling_aws.add_fault("ec2", "throttle", operation="DescribeInstances")
    request.ctx._instances = _held_open(request.ctx, 2)
    reads = _at_once([lambda: ec2_power.state(request.ctx.instances, REGION, instance)] * 2)
    for refused in reads:
        assert isinstance(refused, ClientError) and not isinstance(refused, ec2_power.InstanceNotFound)
        assert refused.response["Error"]["Code"] == "RequestLimitExceeded"
    request.ctx._instances = None  # the hook's own again: one read, no one to wait for
    request.call(after=2)
    assert request.condition(fencing_names.FENCING_SUCCEEDED) is None, "a refused read proves nothing"
    assert request.status["phase"] == fencing_names.POWERING_OFF
    assert "RequestLimitExceeded" in request.status["providerStatus"]["lastDescribeError"]
    assert request.status["providerStatus"]["stopAttempts"] == 1, "no stop again on a guess"
    assert all(t["key"] != fencing_names.OUT_OF_SERVICE_TAINT for t in kube.taints("node-a"))

    throttling_aws.clear_faults()
    request.call(after=2)
    assert request.condition(fencing_names.FENCING_SUCCEEDED)["status"] == "True"
    assert request.status["providerStatus"]["instanceState"] == "stopped"
