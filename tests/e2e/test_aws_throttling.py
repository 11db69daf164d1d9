"""The suite's AWS says no: moto behind AWS's token buckets (devcluster/throttling.py), as every other e2e test
runs against unless NODEWARDEN_E2E_AWS_THROTTLING=off."""
from __future__ import annotations

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from tests.e2e.conftest import AWS_THROTTLING

pytestmark = pytest.mark.e2e

# A bucket no hook and no other test draws from (EC2 keeps one per API), so the burst below spends only its own.
OPERATION, BUCKET_KEY = "DescribeKeyPairs", "ec2:DescribeKeyPairs:ec2-non-mutating"


@pytest.mark.skipif(not AWS_THROTTLING, reason="NODEWARDEN_E2E_AWS_THROTTLING=off: moto is bare")
def test_a_burst_past_a_bucket_is_answered_with_request_limit_exceeded(cluster):
    env = cluster.aws_env()
    # Not metered by the stack's own limiter, and no retries: the test sees AWS's first answer.
    ec2 = boto3.client("ec2", region_name=env.get("AWS_REGION", "us-east-1"), endpoint_url=env["AWS_ENDPOINT_URL"],
                       aws_access_key_id=env.get("AWS_ACCESS_KEY_ID", "testing"),
                       aws_secret_access_key=env.get("AWS_SECRET_ACCESS_KEY", "testing"),
                       config=Config(retries={"total_max_attempts": 1, "mode": "standard"}))
    control = cluster.throttling_control
    capacity = control.state()["scale"] * 100
    before = control.bucket(BUCKET_KEY) or {"admitted": 0, "throttled": 0}
    refused, sent = None, 0
    while refused is None and sent < 20 * capacity:
        sent += 1
        try:
            ec2.describe_key_pairs()
        except ClientError as exc:
            refused = exc.response
    assert refused is not None, f"{sent} calls in a row, none throttled"
    assert refused["Error"]["Code"] == "RequestLimitExceeded"
    assert refused["ResponseMetadata"]["HTTPStatusCode"] == 503
    assert sent > capacity, "the bucket's capacity is admitted before the first refusal"
    after = control.bucket(BUCKET_KEY)
    assert (after["admitted"] - before["admitted"], after["throttled"] - before["throttled"]) == (sent - 1, 1)
