"""EC2 security groups, EBS volumes, ENIs, Elastic IPs and instances: look-ups by tag or id, and deletion.

EC2 filters on tags server-side, so no tag reads in chunks are needed here.
A security group still used by an ENI (a load balancer's, for minutes after
the load balancer went) answers ``DependencyViolation``; an ENI still
attached ``InvalidNetworkInterface.InUse``; an Elastic IP still associated
``InvalidIPAddress.InUse``. Terminated instances are gone: never listed.
"""
from __future__ import annotations

from hooks.aws import instances
from hooks.aws.gc.resources import DELETED, GONE, chunked, delete_unless_gone, tags_to_dict
from hooks.ec2_names import TERMINATED
from hooks.teardown.plan import ASSOCIATED, UNASSOCIATED
from hooks.teardown.tasks import EC2_INSTANCE, EIP, ENI, SG, VOL

FILTER_VALUES_LIMIT = 200  # values per EC2 filter
SG_NOT_FOUND = ("InvalidGroup.NotFound", "InvalidGroupId.NotFound")
VOLUME_NOT_FOUND = ("InvalidVolume.NotFound",)
ENI_NOT_FOUND = ("InvalidNetworkInterfaceID.NotFound",)
ADDRESS_NOT_FOUND = ("InvalidAllocationID.NotFound",)

# What each kind is called in EC2's Describe calls: (operation, list key, id key, id filter).
_SG = ("describe_security_groups", "SecurityGroups", "GroupId", "group-id")
_VOLUME = ("describe_volumes", "Volumes", "VolumeId", "volume-id")
_ENI = ("describe_network_interfaces", "NetworkInterfaces", "NetworkInterfaceId", "network-interface-id")
_ADDRESS = ("describe_addresses", "Addresses", "AllocationId", "allocation-id")
_INSTANCE = ("describe_instances", "Reservations", "InstanceId", "instance-id")
DESCRIBED = {SG: _SG, VOL: _VOLUME, ENI: _ENI, EIP: _ADDRESS, EC2_INSTANCE: _INSTANCE}


def _state(kind: str, item: dict) -> str | None:
    if kind == VOL:
        return item.get("State")
    if kind == ENI:
        return item.get("Status")
    if kind == EIP:
        return ASSOCIATED if item.get("AssociationId") or item.get("InstanceId") or \
            item.get("NetworkInterfaceId") else UNASSOCIATED
    if kind == EC2_INSTANCE:
        return (item.get("State") or {}).get("Name")
    return None


def _pages(ec2, operation: str, filters: list[dict]):
    if ec2.can_paginate(operation):
        yield from ec2.get_paginator(operation).paginate(Filters=filters)
    else:  # DescribeAddresses answers everything at once
        yield getattr(ec2, operation)(Filters=filters)


def _described(ec2, kind: str, filters: list[dict]) -> dict[str, dict]:
    """{id: {"tags", "state"}} of the kind's resources matching ``filters``; terminated instances left out."""
    operation, list_key, id_key, _ = DESCRIBED[kind]
    found: dict[str, dict] = {}
    for page in _pages(ec2, operation, filters):
        items = page.get(list_key, [])
        if kind == EC2_INSTANCE:
            items = [i for reservation in items for i in reservation.get("Instances", [])]
        for item in items:
            state = _state(kind, item)
            if kind == EC2_INSTANCE and state == TERMINATED:
                continue
            found[item[id_key]] = {"tags": tags_to_dict(item.get("Tags") or item.get("TagSet")), "state": state}
    return found


def tagged(ec2, kind: str, key: str, value: str | None = None) -> dict[str, dict]:
    """The kind's resources carrying tag ``key`` (= ``value``, or with any value when None)."""
    if value is None:
        return _described(ec2, kind, [{"Name": "tag-key", "Values": [key]}])
    return _described(ec2, kind, [{"Name": f"tag:{key}", "Values": [value]}])


def by_id(ec2, kind: str, ids: list[str]) -> dict[str, dict]:
    """The ones of ``ids`` that still exist (a filter, unlike the ids parameter, ignores missing ones)."""
    found: dict[str, dict] = {}
    for chunk in chunked(sorted(set(ids)), FILTER_VALUES_LIMIT):
        found.update(_described(ec2, kind, [{"Name": DESCRIBED[kind][3], "Values": chunk}]))
    return found


def delete_security_group(ec2, group_id: str) -> str:
    return delete_unless_gone(ec2.delete_security_group, SG_NOT_FOUND, GroupId=group_id)


def delete_volume(ec2, volume_id: str) -> str:
    return delete_unless_gone(ec2.delete_volume, VOLUME_NOT_FOUND, VolumeId=volume_id)


def delete_network_interface(ec2, eni_id: str) -> str:
    return delete_unless_gone(ec2.delete_network_interface, ENI_NOT_FOUND, NetworkInterfaceId=eni_id)


def release_address(ec2, allocation_id: str) -> str:
    return delete_unless_gone(ec2.release_address, ADDRESS_NOT_FOUND, AllocationId=allocation_id)


def terminate_instance(ec2, instance_id: str) -> str:
    """TerminateInstances; one EC2 no longer knows, or already terminated, counts as gone."""
    return GONE if instances.terminate(ec2, instance_id) == TERMINATED else DELETED
