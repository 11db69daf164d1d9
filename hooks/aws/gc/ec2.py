"""EC2 security groups and EBS volumes: look-ups by tag or id, and deletion.

EC2 filters on tags server-side, so no tag reads in chunks are needed here.
A security group still used by an ENI (a load balancer's, for minutes after
the load balancer went) answers ``DependencyViolation``.
"""
from __future__ import annotations


from hooks.aws.gc.resources import chunked, delete_unless_gone, tags_to_dict

FILTER_VALUES_LIMIT = 200  # values per EC2 filter
SG_NOT_FOUND = ("InvalidGroup.NotFound", "InvalidGroupId.NotFound")
VOLUME_NOT_FOUND = ("InvalidVolume.NotFound",)


def _security_groups(ec2, filters: list[dict]) -> dict[str, dict]:
    found: dict[str, dict] = {}
    for page in ec2.get_paginator("describe_security_groups").paginate(Filters=filters):
        for group in page.get("SecurityGroups", []):
            found[group["GroupId"]] = {"tags": tags_to_dict(group.get("Tags")), "state": None}
    return found


def security_groups_tagged(ec2, key: str, value: str) -> dict[str, dict]:
    """Security groups carrying tag key=value: {group id: {"tags", "state"}}."""
    return _security_groups(ec2, [{"Name": f"tag:{key}", "Values": [value]}])


def security_groups_by_id(ec2, group_ids: list[str]) -> dict[str, dict]:
    """The groups of ``group_ids`` that still exist (a filter, unlike GroupIds, ignores missing ones)."""
    found: dict[str, dict] = {}
    for chunk in chunked(sorted(set(group_ids)), FILTER_VALUES_LIMIT):
        found.update(_security_groups(ec2, [{"Name": "group-id", "Values": chunk}]))
    return found


def _volumes(ec2, filters: list[dict]) -> dict[str, dict]:
    found: dict[str, dict] = {}
    for page in ec2.get_paginator("describe_volumes").paginate(Filters=filters):
        for volume in page.get("Volumes", []):
            found[volume["VolumeId"]] = {"tags": tags_to_dict(volume.get("Tags")), "state": volume.get("State")}
    return found


def volumes_tagged(ec2, key: str, value: str) -> dict[str, dict]:
    return _volumes(ec2, [{"Name": f"tag:{key}", "Values": [value]}])


def volumes_by_id(ec2, volume_ids: list[str]) -> dict[str, dict]:
    found: dict[str, dict] = {}
    for chunk in chunked(sorted(set(volume_ids)), FILTER_VALUES_LIMIT):
        found.update(_volumes(ec2, [{"Name": "volume-id", "Values": chunk}]))
    return found


def delete_security_group(ec2, group_id: str) -> str:
    return delete_unless_gone(ec2.delete_security_group, SG_NOT_FOUND, GroupId=group_id)


def delete_volume(ec2, volume_id: str) -> str:
    return delete_unless_gone(ec2.delete_volume, VOLUME_NOT_FOUND, VolumeId=volume_id)
