"""EC2 instances of Machines: what a Machine needs of one, launch one, describe types, terminate.

The Machine's UID, tagged on the instance at creation, is what makes a launch
safe to repeat: a Machine with no instance recorded looks for its instances
by that tag, read fresh, before it launches (hooks/aws/instance_view.py), so
a crash after the launch and before the record finds the instance on the
next call instead of launching another, and an instance of a launch EC2
showed late is found as a second one. The ClientToken (one per Machine,
launch request and candidate) makes a retried call idempotent on AWS within
its own window; moto ignores it, so correctness never rests on it.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import threading
from dataclasses import dataclass

from botocore.exceptions import ClientError

from hooks import ec2_names, machine_names, timefmt
from hooks.aws.clients import error_code

NOT_FOUND = ("InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed")
_ANSWERED_AT_ONCE = "nodewarden-run-instances-answered-at-once"


@dataclass(frozen=True)
class Candidate:
    """One way to launch: an instance type in a subnet, in order of preference."""

    instance_type: str
    subnet_id: str | None


class Refused(ClientError):
    """RunInstances refused one candidate for capacity (ec2_names.CAPACITY_ERRORS): EC2's error, with the
    candidate named in its message (EC2's own message may name neither the type nor the subnet)."""

    def __init__(self, refused: ClientError, candidate: Candidate):
        error = dict(refused.response.get("Error") or {})
        where = f"{candidate.instance_type} in {candidate.subnet_id or 'the default subnet'}"
        error["Message"] = f"no capacity for {where}: {error.get('Message') or ''}".rstrip(": ")
        super().__init__({**refused.response, "Error": error}, refused.operation_name)


def summary(instance: dict) -> dict:
    """What a Machine needs of an instance, JSON-able (fixtures give the same)."""
    tags = {t.get("Key"): t.get("Value") for t in instance.get("Tags") or []}
    launched = instance.get("LaunchTime")
    if isinstance(launched, dt.datetime):
        launched = timefmt.fmt(launched)
    zone = (instance.get("Placement") or {}).get("AvailabilityZone")
    return {
        "instanceID": instance.get("InstanceId"),
        "providerID": f"aws:///{zone or ''}/{instance.get('InstanceId')}",
        "state": (instance.get("State") or {}).get("Name", "unknown"),
        "instanceType": instance.get("InstanceType"),
        "zone": zone,
        "imageId": instance.get("ImageId"),
        "launchTime": launched,
        "privateDnsName": instance.get("PrivateDnsName") or "",
        "privateIp": instance.get("PrivateIpAddress"),
        "lifecycle": instance.get("InstanceLifecycle") or "on-demand",
        "tags": tags,
    }


def subnets(ec2, ids: list[str], selector: dict[str, str]) -> list[dict]:
    """The subnets named by id joined with those the selector's tags find ("*" matches any value).

    Those named by id come first, in the order given; then the selected ones by id.
    """
    found: dict[str, dict] = {}
    responses = []
    if ids:
        responses.append(ec2.describe_subnets(SubnetIds=list(ids)))
    if selector:
        filters = [{"Name": f"tag:{k}", "Values": [v]} if v != "*" else {"Name": "tag-key", "Values": [k]}
                   for k, v in sorted(selector.items())]
        responses.append(ec2.describe_subnets(Filters=filters))
    for response in responses:
        for s in response.get("Subnets") or []:
            found[s["SubnetId"]] = {"id": s["SubnetId"], "zone": s.get("AvailabilityZone")}
    order = {sid: i for i, sid in enumerate(ids)}
    return sorted(found.values(), key=lambda s: (order.get(s["id"], len(order)), s["id"]))


class _TypeCache:
    """Instance type facts never change: each is described once per process."""

    def __init__(self):
        self._lock = threading.Lock()
        self._known: dict[str, dict] = {}

    def get(self, ec2, types: list[str]) -> dict[str, dict]:
        with self._lock:
            missing = [t for t in types if t not in self._known]
        if missing:
            response = ec2.describe_instance_types(InstanceTypes=missing)
            described = {t["InstanceType"]: type_facts(t) for t in response.get("InstanceTypes") or []}
            with self._lock:
                self._known.update(described)
        with self._lock:
            return {t: self._known[t] for t in types if t in self._known}

    def clear(self) -> None:
        with self._lock:
            self._known.clear()


TYPES = _TypeCache()


def _default_card_enis(network: dict) -> int | None:
    """The ENIs of the default network card: the only card the VPC CNI gives pods addresses on."""
    index = network.get("DefaultNetworkCardIndex")
    for card in network.get("NetworkCards") or []:
        if card.get("NetworkCardIndex") == index:
            return card.get("MaximumNetworkInterfaces")
    return network.get("MaximumNetworkInterfaces")


def type_facts(described: dict) -> dict:
    """The parts of DescribeInstanceTypes a Machine's capacity and a provisioning catalog are computed from."""
    network = described.get("NetworkInfo") or {}
    gpus = (described.get("GpuInfo") or {}).get("Gpus") or []
    ebs = described.get("EbsInfo") or {}
    return {
        "vcpus": (described.get("VCpuInfo") or {}).get("DefaultVCpus"),
        "memoryMiB": (described.get("MemoryInfo") or {}).get("SizeInMiB"),
        "maxENIs": _default_card_enis(network),
        "ipv4PerENI": network.get("Ipv4AddressesPerInterface"),
        "gpus": sum(int(g.get("Count") or 0) for g in gpus),
        "gpuManufacturer": (gpus[0].get("Manufacturer") or "") if gpus else "",
        "architectures": list((described.get("ProcessorInfo") or {}).get("SupportedArchitectures") or []),
        "supportedUsageClasses": list(described.get("SupportedUsageClasses") or []),
        "currentGeneration": bool(described.get("CurrentGeneration")),
        "hypervisor": described.get("Hypervisor") or "",
        "ebsAttachments": ebs.get("MaximumEbsAttachments"),
    }


def client_token(uid: str, launch_request: str, candidate: Candidate) -> str:
    """≤64 characters, one per (Machine, launch request, candidate).

    A call retried within one launch request asks EC2 for the same launch of
    the same candidate; a token is never sent again for another candidate or
    another launch request (EC2 would answer IdempotentParameterMismatch, or
    the instance of that other launch).
    """
    digest = hashlib.sha256(f"{uid}\n{launch_request}\n{candidate.instance_type}\n{candidate.subnet_id or ''}"
                            .encode()).hexdigest()
    return f"{uid[:36]}-{digest}"[:64]


def _answered_at_once(response=None, operation=None, **_):
    """botocore's needs-retry for RunInstances: EC2's error answers the call at once, never after botocore's
    retries (capacity errors and throttling included, with their backoff sleeps): the launch's next candidate,
    or a later hook call, is the retry, and a call stays within its time. A connection error is retried as
    usual (the ClientToken makes that the same launch)."""
    if response is not None and response[1].get("Error"):
        raise ClientError(response[1], operation.name)
    return None


def run_instance(ec2, *, uid: str, launch_request: str, candidate: Candidate, tag_list: list[dict],
                 image_id: str | None, launch_template: dict | None, security_groups: list[str],
                 instance_profile: str | None, user_data: str, spot: bool = False) -> dict:
    """RunInstances for one candidate; the instance's summary.

    Instance and volumes are tagged at creation, in the same call, so no
    instance of ours ever exists untagged. Raises Refused when EC2 refused
    the candidate for capacity, and any other error as it came.
    """
    request: dict = {
        "MinCount": 1, "MaxCount": 1,
        "InstanceType": candidate.instance_type,
        "ClientToken": client_token(uid, launch_request, candidate),
        "UserData": user_data,  # botocore base64-encodes it for RunInstances
        "TagSpecifications": [{"ResourceType": "instance", "Tags": tag_list},
                              {"ResourceType": "volume", "Tags": tag_list}],
        "MetadataOptions": {"HttpTokens": "required"},
    }
    if image_id:
        request["ImageId"] = image_id
    if launch_template:
        request["LaunchTemplate"] = {k: v for k, v in (
            ("LaunchTemplateId", launch_template.get("id")), ("LaunchTemplateName", launch_template.get("name")),
            ("Version", launch_template.get("version") or "$Default")) if v}
    if candidate.subnet_id:
        request["SubnetId"] = candidate.subnet_id
    if security_groups:
        request["SecurityGroupIds"] = list(security_groups)
    if instance_profile:
        request["IamInstanceProfile"] = {"Name": instance_profile}
    if spot:
        # A one-time spot request: EC2 reclaims it with a two-minute warning, never restarts it.
        request["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": {
            "SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}}
    ec2.meta.events.register("needs-retry.ec2.RunInstances", _answered_at_once, unique_id=_ANSWERED_AT_ONCE)
    try:
        response = ec2.run_instances(**request)
    except ClientError as exc:
        if error_code(exc) in ec2_names.CAPACITY_ERRORS:
            raise Refused(exc, candidate) from exc
        raise
    return summary(response["Instances"][0])


def terminate(ec2, instance_id: str) -> str:
    """TerminateInstances; an instance EC2 no longer knows counts as terminated."""
    try:
        response = ec2.terminate_instances(InstanceIds=[instance_id])
    except ClientError as exc:
        if error_code(exc) in NOT_FOUND:
            return ec2_names.TERMINATED
        raise
    for change in response.get("TerminatingInstances") or []:
        if change.get("InstanceId") == instance_id:
            return (change.get("CurrentState") or {}).get("Name", "unknown")
    return "unknown"
