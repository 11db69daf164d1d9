"""AWS's request rate limits: which token bucket each API call draws from, and how big each bucket is.

AWS meters every account and region with token buckets: a call takes a
token (and, for RunInstances and TerminateInstances, one more per instance
from a resource bucket); a bucket refills at a steady rate up to its
capacity; a call that finds its bucket empty is refused
(``RequestLimitExceeded`` in EC2, ``Throttling`` elsewhere). Everything in
the account shares them: the cloud controller manager, the VPC CNI, the EBS
CSI driver, an autoscaler, and nodewarden.

The EC2 and ELB figures are AWS's documented defaults ("Request throttling
for the Amazon EC2 API", "Request throttling for the ELB API"). EC2 meters
each API on its own, with a bucket of its category's size; ELB meters each
category as one bucket. AWS publishes no default for the figures marked
``assumed``: they are conservative guesses, there so that the local stack
pushes back on those calls too.

Both the local stack's throttling AWS (devcluster/throttling.py) and the
hooks' own limiter (hooks/aws/rate_limits.py) read this table, so the two
agree on what a call costs.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class Bucket:
    name: str
    capacity: float
    refill_per_second: float
    # The error code AWS answers when it is empty.
    throttle_code: str
    documented: bool = True


EC2_THROTTLED = "RequestLimitExceeded"
THROTTLED = "Throttling"
# Every code an AWS service answers "slow down" with (botocore's throttling codes and S3's).
THROTTLE_CODES = (
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestLimitExceeded",
    "RequestThrottled",
    "RequestThrottledException",
    "TooManyRequestsException",
    "SlowDown",
)

EC2_NON_MUTATING = Bucket("ec2-non-mutating", 100, 20, EC2_THROTTLED)
EC2_UNFILTERED = Bucket("ec2-unfiltered-unpaginated", 50, 10, EC2_THROTTLED)
EC2_MUTATING = Bucket("ec2-mutating", 50, 5, EC2_THROTTLED)
RUN_INSTANCES = Bucket("ec2-run-instances", 5, 2, EC2_THROTTLED)
RUN_INSTANCES_LAUNCHED = Bucket("ec2-run-instances-launched", 1000, 2, EC2_THROTTLED)
TERMINATE_INSTANCES = Bucket("ec2-terminate-instances", 100, 5, EC2_THROTTLED)
TERMINATE_INSTANCES_TERMINATED = Bucket("ec2-terminate-instances-terminated", 1000, 20, EC2_THROTTLED)
EC2_TAGS = Bucket("ec2-tags", 100, 10, EC2_THROTTLED)
ELB_DESCRIBE = Bucket("elb-describe", 40, 10, THROTTLED)
ELB_MUTATING = Bucket("elb-mutating", 20, 4, THROTTLED, documented=False)
AUTOSCALING = Bucket("autoscaling", 40, 10, THROTTLED, documented=False)
TAGGING = Bucket("resource-tagging", 20, 5, THROTTLED, documented=False)
SQS = Bucket("sqs", 300, 100, THROTTLED, documented=False)

BUCKETS = (EC2_NON_MUTATING, EC2_UNFILTERED, EC2_MUTATING, RUN_INSTANCES, RUN_INSTANCES_LAUNCHED,
           TERMINATE_INSTANCES, TERMINATE_INSTANCES_TERMINATED, EC2_TAGS, ELB_DESCRIBE, ELB_MUTATING,
           AUTOSCALING, TAGGING, SQS)

# Every Describe* that EC2 counts as unfiltered and unpaginated when asked with no filter, no id and no
# page size (it then lists the whole region).
_UNFILTERED_WHEN_BARE = frozenset({
    "DescribeInstances", "DescribeInstanceStatus", "DescribeSubnets", "DescribeSecurityGroups",
    "DescribeVolumes", "DescribeNetworkInterfaces", "DescribeImages", "DescribeSnapshots",
    "DescribeSpotInstanceRequests", "DescribeLaunchTemplates", "DescribeVpcs",
})
_NON_MUTATING_PREFIXES = ("Describe", "Get", "List")
_CATEGORY_SERVICES = {"elbv2": "elb", "elb": "elb", "autoscaling": "autoscaling",
                      "resourcegroupstaggingapi": "tagging", "sqs": "sqs"}
# Every service with buckets here (botocore's names).
SERVICES = ("ec2", *_CATEGORY_SERVICES)


@dataclass(frozen=True)
class Draw:
    """Tokens one call takes from one bucket. ``key`` names the bucket's state within a region: one per API
    for EC2, one per category for the others."""

    bucket: Bucket
    key: str
    tokens: float = 1.0


def draws(service: str, operation: str, *, narrowed: bool = True, instances: int = 1) -> tuple[Draw, ...]:
    """The buckets a call of ``operation`` on ``service`` takes tokens from.

    ``narrowed``: the call names ids, a filter or a page size (only EC2's
    bare Describe* calls count as unfiltered); ``instances``: how many
    instances RunInstances asks for (MaxCount) or TerminateInstances names.
    A service with no bucket here is never throttled: an empty tuple.
    """
    if service == "ec2":
        return _ec2(operation, narrowed, instances)
    category = _CATEGORY_SERVICES.get(service)
    if category == "elb":
        bucket = ELB_DESCRIBE if operation.startswith("Describe") else ELB_MUTATING
        # Each ELB API version has buckets of its own.
        return (Draw(bucket, f"{service}:{bucket.name}"),)
    if category == "autoscaling":
        return (Draw(AUTOSCALING, f"{service}:{AUTOSCALING.name}"),)
    if category == "tagging":
        return (Draw(TAGGING, f"{service}:{TAGGING.name}"),)
    if category == "sqs":
        return (Draw(SQS, f"{service}:{SQS.name}"),)
    return ()


def _ec2(operation: str, narrowed: bool, instances: int) -> tuple[Draw, ...]:
    count = float(max(1, instances))
    if operation == "RunInstances":
        return (Draw(RUN_INSTANCES, f"ec2:{operation}"),
                Draw(RUN_INSTANCES_LAUNCHED, f"ec2:{operation}:instances", count))
    if operation == "TerminateInstances":
        return (Draw(TERMINATE_INSTANCES, f"ec2:{operation}"),
                Draw(TERMINATE_INSTANCES_TERMINATED, f"ec2:{operation}:instances", count))
    if operation in ("CreateTags", "DeleteTags"):
        return (Draw(EC2_TAGS, f"ec2:{operation}"),)
    if operation.startswith(_NON_MUTATING_PREFIXES):
        bucket = EC2_UNFILTERED if (not narrowed and operation in _UNFILTERED_WHEN_BARE) else EC2_NON_MUTATING
        return (Draw(bucket, f"ec2:{operation}:{bucket.name}"),)
    return (Draw(EC2_MUTATING, f"ec2:{operation}"),)


# The parameters that narrow what a Describe* call lists (ids, filters, a page size or token), as EC2's
# query protocol spells them on the wire: each list member as ``InstanceId.1``, each filter as
# ``Filter.1.Name``; DescribeImages' Owners and DescribeSnapshots' OwnerIds are both ``Owner.1``.
_NARROWING = frozenset({
    "Filter", "InstanceId", "MaxResults", "SubnetId", "GroupId", "VolumeId", "ImageId", "NetworkInterfaceId",
    "SpotInstanceRequestId", "LaunchTemplateId", "LaunchTemplateName", "VpcId", "SnapshotId", "Owner",
    "NextToken",
})


def request_draws(service: str, operation: str, form: Mapping[str, str]) -> tuple[Draw, ...]:
    """``draws`` of a call as it goes on the wire, ``form`` being its query-protocol parameters
    (``Filter.1.Name``, ``InstanceId.1``, ``MaxCount``; a JSON-protocol call may pass an empty form).

    A Describe* call is narrowed by ids, a filter, a page size or a page token.
    """
    narrowed = any(value and key.partition(".")[0] in _NARROWING for key, value in form.items())
    if operation == "RunInstances":
        instances = _whole(form.get("MaxCount"))
    elif operation == "TerminateInstances":
        instances = sum(1 for key in form if key.startswith("InstanceId."))
    else:
        instances = 1
    return draws(service, operation, narrowed=narrowed, instances=instances)


def _whole(raw) -> int:
    try:
        return max(1, int(raw))
    except (TypeError, ValueError):
        return 1


def parse_shares(raw: str) -> dict[str, float]:
    """``name=share,...`` (or a JSON object) by bucket name; ValueError naming what is wrong."""
    raw = (raw or "").strip()
    if not raw:
        return {}
    if raw.startswith("{"):
        pairs = json.loads(raw).items()
    else:
        pairs = [item.split("=", 1) if "=" in item else (item, "") for item in raw.split(",") if item.strip()]
    known = {bucket.name for bucket in BUCKETS}
    shares = {}
    for name, value in pairs:
        name = str(name).strip()
        if name not in known:
            raise ValueError(f"no bucket {name!r}; known: {', '.join(sorted(known))}")
        try:
            share = float(value)
        except ValueError:
            raise ValueError(f"{name}: {value!r} is not a number") from None
        if not 0 <= share <= 1:
            raise ValueError(f"{name}: a share is from 0 to 1, got {value!r}")
        shares[name] = share
    return shares
