"""What EC2 says now about instances an interruption names: tags, state, lifecycle, spot requests, impaired checks."""
from __future__ import annotations

import re

from botocore.exceptions import ClientError

from hooks.aws import instance_view, instances
from hooks.aws.clients import error_code

# DescribeInstanceStatus takes at most 100 ids per call.
_STATUS_IDS = 100
_ID = re.compile(r"i-[0-9a-f]{8,17}")


def _filtered(paginator, key: str, instance_ids: list[str]):
    """Each item under ``key`` of the paginator's pages, asked for by an instance-id filter in batches (by
    InstanceIds, one id EC2 does not know fails the whole call), with the batch it belongs to."""
    ids = sorted(set(instance_ids))
    for start in range(0, len(ids), instance_view.FILTER_VALUES):
        batch = ids[start:start + instance_view.FILTER_VALUES]
        for page in paginator.paginate(Filters=[{"Name": "instance-id", "Values": batch}]):
            for item in page.get(key) or []:
                yield batch, item


def describe(ec2, instance_ids: list[str]) -> dict[str, dict]:
    """The instances EC2 knows among ``instance_ids``, by id (``instances.summary``, its ``lifecycle``
    included); an id EC2 does not know is simply absent."""
    return instance_view.read_by_ids(ec2, instance_ids)


def spot_requests(ec2, instance_ids: list[str]) -> dict[str, str]:
    """The status code of the spot request behind each of ``instance_ids`` that has one, by instance id
    (``fulfilled``, ``marked-for-termination``, ...)."""
    found: dict[str, str] = {}
    for batch, request in _filtered(ec2.get_paginator("describe_spot_instance_requests"), "SpotInstanceRequests",
                                    instance_ids):
        code = (request.get("Status") or {}).get("Code")
        if request.get("InstanceId") in batch and isinstance(code, str):
            found[request["InstanceId"]] = code
    return found


def impaired(ec2, instance_ids: list[str]) -> list[str]:
    """The running instances among ``instance_ids`` whose instance or system status check is impaired."""
    out: list[str] = []
    ids = sorted(set(instance_ids))
    for start in range(0, len(ids), _STATUS_IDS):
        batch = ids[start:start + _STATUS_IDS]
        for status in _statuses(ec2, batch):
            if "impaired" in ((status.get("InstanceStatus") or {}).get("Status"),
                              (status.get("SystemStatus") or {}).get("Status")):
                out.append(status.get("InstanceId"))
    return sorted(i for i in out if isinstance(i, str))


def _statuses(ec2, batch: list[str]) -> list[dict]:
    """One batch's statuses; ids EC2 no longer knows (named in the error) are left out and the rest asked again."""
    try:
        return ec2.describe_instance_status(InstanceIds=batch, IncludeAllInstances=False).get("InstanceStatuses") or []
    except ClientError as exc:
        if error_code(exc) not in instances.NOT_FOUND:
            raise
        unknown = set(_ID.findall(str(exc.response.get("Error", {}).get("Message", ""))))
        rest = [i for i in batch if i not in unknown]
        if not unknown or len(rest) == len(batch):
            raise
        if not rest:
            return []
        return ec2.describe_instance_status(InstanceIds=rest, IncludeAllInstances=False).get("InstanceStatuses") or []
