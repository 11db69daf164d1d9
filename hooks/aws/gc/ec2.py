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


# What each kind is called in EC2's Describe calls: (operation, list key, id key, id filter, state key).
_SG = ("describe_security_groups", "SecurityGroups", "GroupId", "group-id", None)
_VOLUME = ("describe_volumes", "Volumes", "VolumeId", "volume-id", "State")


def _described(ec2, kind: tuple, filters: list[dict]) -> dict[str, dict]:
    operation, list_key, id_key, _, state_key = kind
    found: dict[str, dict] = {}
    for page in ec2.get_paginator(operation).paginate(Filters=filters):
        for item in page.get(list_key, []):
            found[item[id_key]] = {"tags": tags_to_dict(item.get("Tags")),
                                   "state": item.get(state_key) if state_key else None}
    return found


def _tagged(ec2, kind: tuple, key: str, value: str) -> dict[str, dict]:
    return _described(ec2, kind, [{"Name": f"tag:{key}", "Values": [value]}])


def _by_id(ec2, kind: tuple, ids: list[str]) -> dict[str, dict]:
    """The ones of ``ids`` that still exist (a filter, unlike the ids parameter, ignores missing ones)."""
    found: dict[str, dict] = {}
    for chunk in chunked(sorted(set(ids)), FILTER_VALUES_LIMIT):
        found.update(_described(ec2, kind, [{"Name": kind[3], "Values": chunk}]))
    return found


def security_groups_tagged(ec2, key: str, value: str) -> dict[str, dict]:
    """Security groups carrying tag key=value: {group id: {"tags", "state"}}."""
    return _tagged(ec2, _SG, key, value)


def security_groups_by_id(ec2, group_ids: list[str]) -> dict[str, dict]:
    return _by_id(ec2, _SG, group_ids)


def volumes_tagged(ec2, key: str, value: str) -> dict[str, dict]:
    return _tagged(ec2, _VOLUME, key, value)


def volumes_by_id(ec2, volume_ids: list[str]) -> dict[str, dict]:
    return _by_id(ec2, _VOLUME, volume_ids)


def delete_security_group(ec2, group_id: str) -> str:
    return delete_unless_gone(ec2.delete_security_group, SG_NOT_FOUND, GroupId=group_id)


def delete_volume(ec2, volume_id: str) -> str:
    return delete_unless_gone(ec2.delete_volume, VOLUME_NOT_FOUND, VolumeId=volume_id)
