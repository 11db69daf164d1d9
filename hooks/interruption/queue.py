"""An InterruptionQueue's spec, read through the bounding parsers (pure)."""
from __future__ import annotations

import re
from dataclasses import dataclass

from hooks import bounds, fields
from hooks.contract import RequestError

# An SQS queue URL: https://sqs.<region>.amazonaws.com/<account>/<name> in AWS; any http(s) URL in moto.
_URL = re.compile(r"https?://[A-Za-z0-9.:\-\[\]]{1,253}/[0-9A-Za-z]{1,64}/[A-Za-z0-9_\-]{1,80}(\.fifo)?")
_REGION = re.compile(r"[a-z]{2}(-[a-z]+)+-[0-9]{1,2}")
# SQS answers at most 10 messages per ReceiveMessage.
MAX_MESSAGES = 10
# A long poll must end well within Metacontroller's 10 s hook timeout, with the look-ups and writes after
# it, and within botocore's read timeout (5 s, hooks/aws/clients.py), which would retry it.
MAX_WAIT_SECONDS = 3


@dataclass(frozen=True)
class QueueSpec:
    queue_url: str
    region: str  # "" means the hook server's region
    status_checks: bool
    status_check_interval: float
    wait_seconds: int
    max_messages: int
    poll_interval: float


def parse(parent: dict) -> QueueSpec:
    spec = parent.get("spec")
    if not isinstance(spec, dict):
        raise RequestError("spec", "is required")
    url = fields.string(parent, "spec", "queueURL")
    if not url or len(url) > 512 or not _URL.fullmatch(url):
        raise RequestError("spec.queueURL",
                           "must be an SQS queue URL (https://sqs.<region>.amazonaws.com/<account>/<name>)")
    region = spec.get("region")
    if region is not None and (not isinstance(region, str) or (region and not _REGION.fullmatch(region))):
        raise RequestError("spec.region", "must be an AWS region such as us-east-1")
    checks = fields.boolean(parent, "spec", "statusChecks", default=True)
    return QueueSpec(
        queue_url=url,
        region=region or "",
        status_checks=checks,
        status_check_interval=bounds.duration(spec.get("statusCheckInterval"), "spec.statusCheckInterval",
                                              default=30.0, minimum=5.0, maximum=3600.0),
        wait_seconds=bounds.whole_number(spec.get("waitSeconds"), "spec.waitSeconds", minimum=0,
                                         maximum=MAX_WAIT_SECONDS, default=1),
        max_messages=bounds.whole_number(spec.get("maxMessagesPerCall"), "spec.maxMessagesPerCall", minimum=1,
                                         maximum=MAX_MESSAGES, default=MAX_MESSAGES),
        poll_interval=bounds.duration(spec.get("pollInterval"), "spec.pollInterval", default=1.0, minimum=0.1,
                                      maximum=60.0),
    )
