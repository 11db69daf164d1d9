"""A cluster's AWS leftovers in moto, and the tools cluster-gc's tests drive them with.

Shared by tests/cluster_gc/test_cluster_gc_moto.py, tests/e2e/test_cluster_gc.py and
bench/cluster_gc.py:

- ``build_cluster``: load balancers (ELBv2 and classic), target groups with
  listeners, security groups and volumes tagged the way the cloud controller
  (or the AWS Load Balancer Controller, or a volume provisioner) tags them,
  and instances, ENIs and Elastic IPs as a nodewarden Machine, the VPC CNI
  or the cluster's own tooling tags them;
- ``Faults``: AWS errors moto never raises (DependencyViolation, throttling,
  a refused tagging API), injected through botocore's ``before-call`` event:
  the request never reaches moto and the client raises the error as AWS's;
- ``Late``: an answer that takes longer than a client's read timeout (moto
  answers at once), through botocore's ``before-send`` event;
- ``Calls``: counts AWS calls per operation (``after-call``);
- ``finalize_until_done``: calls the finalize hook the way Metacontroller
  does, merging returned annotations into the parent between calls.
"""
from __future__ import annotations

import dataclasses

import collections
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from botocore.exceptions import ReadTimeoutError

from hooks import machine_names
from hooks.contract import DECORATOR, parse_request
from hooks.controllers import cluster_gc
from worlds.envelope import apply_decorator_response, hook_request  # noqa: F401 - re-exported for the bench
from worlds.fake_kube import FakeKube  # noqa: F401 - re-exported for the bench

REGION = "us-east-1"


def cluster_tags(cluster: str, service: str | None = "default/web") -> list[dict]:
    tags = [{"Key": f"kubernetes.io/cluster/{cluster}", "Value": "owned"}]
    if service:
        tags.append({"Key": "kubernetes.io/service-name", "Value": service})
    return tags


def lb_controller_tags(cluster: str) -> list[dict]:
    return [
        {"Key": "elbv2.k8s.aws/cluster", "Value": cluster},
        {"Key": "service.k8s.aws/stack", "Value": "default/api"},
    ]


def machine_tags(cluster: str, machine: str) -> list[dict]:
    """An instance's tags as a nodewarden Machine launches it (hooks.machine_names.instance_tags)."""
    return machine_names.instance_tags(cluster, "pool-a", machine, f"uid-{machine}")


def cni_tags(cluster: str, created: str = "2026-01-01T00:00:00Z", instance: str = "i-0123456789abcdef0") -> list[dict]:
    """An ENI's tags as the VPC CNI (with CLUSTER_NAME set) creates it."""
    return [
        {"Key": "cluster.k8s.amazonaws.com/name", "Value": cluster},
        {"Key": "node.k8s.amazonaws.com/instance_id", "Value": instance},
        {"Key": "node.k8s.amazonaws.com/createdAt", "Value": created},
        {"Key": "eks:eni:owner", "Value": "amazon-vpc-cni"},
    ]


def _cluster_of(tags: list[dict]) -> str:
    key, value = tags[0]["Key"], tags[0]["Value"]
    return key.rsplit("/", 1)[-1] if key.startswith("kubernetes.io/cluster/") else value


@dataclass
class Network:
    vpc: str
    subnets: list[str]
    zones: list[str]


def network(ec2) -> Network:
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    zones = [f"{REGION}a", f"{REGION}b"]
    subnets = [
        ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{i}.0/24", AvailabilityZone=zone)["Subnet"]["SubnetId"]
        for i, zone in enumerate(zones)
    ]
    return Network(vpc, subnets, zones)


@dataclass
class Made:
    """What build_cluster made, by kind, as the ids cluster-gc deletes them by."""

    load_balancers: list[str] = field(default_factory=list)  # ELBv2 ARNs
    classic_elbs: list[str] = field(default_factory=list)  # names
    target_groups: list[str] = field(default_factory=list)  # ARNs
    security_groups: list[str] = field(default_factory=list)  # sg- ids
    volumes: list[str] = field(default_factory=list)  # vol- ids
    instances: list[str] = field(default_factory=list)  # i- ids
    network_interfaces: list[str] = field(default_factory=list)  # eni- ids
    elastic_ips: list[str] = field(default_factory=list)  # eipalloc- ids

    def extend(self, other: "Made") -> None:
        for name in self.__dataclass_fields__:
            getattr(self, name).extend(getattr(other, name))

    def count(self) -> int:
        return sum(len(getattr(self, name)) for name in self.__dataclass_fields__)


def build_cluster(
    client,
    net: Network,
    prefix: str,
    tags: list[dict],
    *,
    load_balancers: int = 0,
    classic_elbs: int = 0,
    target_groups: int = 0,
    security_groups: int = 0,
    volumes: int = 0,
    instances: int = 0,
    network_interfaces: int = 0,
    elastic_ips: int = 0,
    sg_tags: list[dict] | None = None,
    volume_tags: list[dict] | None = None,
    instance_tags: list[dict] | None = None,
    eni_tags: list[dict] | None = None,
    eip_tags: list[dict] | None = None,
) -> Made:
    """Resources as a controller leaves them; each target group behind a listener when there is a load balancer.

    Instances default to a Machine's tags, ENIs to the VPC CNI's (available,
    made long ago), Elastic IPs to the cluster's tag (unassociated); all for
    the cluster ``tags`` name.
    """
    ec2, elb, elbv2 = client("ec2"), client("elb"), client("elbv2")
    made = Made()
    for i in range(load_balancers):
        lb = elbv2.create_load_balancer(
            Name=f"{prefix}-nlb-{i}", Subnets=net.subnets, Type="network", Tags=tags
        )["LoadBalancers"][0]
        made.load_balancers.append(lb["LoadBalancerArn"])
    for i in range(target_groups):
        tg = elbv2.create_target_group(
            Name=f"{prefix}-tg-{i}", Protocol="TCP", Port=30000 + i, VpcId=net.vpc, Tags=tags
        )["TargetGroups"][0]
        made.target_groups.append(tg["TargetGroupArn"])
        if made.load_balancers:
            elbv2.create_listener(
                LoadBalancerArn=made.load_balancers[i % len(made.load_balancers)],
                Protocol="TCP",
                Port=1000 + i,
                DefaultActions=[{"Type": "forward", "TargetGroupArn": tg["TargetGroupArn"]}],
            )
    for i in range(classic_elbs):
        name = f"{prefix}-elb-{i}"
        elb.create_load_balancer(
            LoadBalancerName=name,
            Listeners=[{"Protocol": "TCP", "LoadBalancerPort": 80, "InstancePort": 30080}],
            AvailabilityZones=net.zones[:1],
            Tags=tags,
        )
        made.classic_elbs.append(name)
    sg_spec = [{"ResourceType": "security-group", "Tags": sg_tags if sg_tags is not None else tags[:1]}]
    for i in range(security_groups):
        group = ec2.create_security_group(
            GroupName=f"k8s-elb-{prefix}-{i}", Description="Security group for Kubernetes ELB",
            VpcId=net.vpc, TagSpecifications=sg_spec,
        )
        made.security_groups.append(group["GroupId"])
    vol_spec = [{"ResourceType": "volume", "Tags": volume_tags if volume_tags is not None else tags[:1] + [
        {"Key": "kubernetes.io/created-for/pv/name", "Value": f"pvc-{prefix}"}]}]
    for _ in range(volumes):
        volume = ec2.create_volume(Size=1, AvailabilityZone=net.zones[0], TagSpecifications=vol_spec)
        made.volumes.append(volume["VolumeId"])
    cluster = _cluster_of(tags)
    for i in range(instances):
        image = ec2.describe_images()["Images"][0]["ImageId"]
        spec = instance_tags if instance_tags is not None else machine_tags(cluster, f"{prefix}-machine-{i}")
        launched = ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, SubnetId=net.subnets[0],
                                     TagSpecifications=[{"ResourceType": "instance", "Tags": spec}])
        made.instances.append(launched["Instances"][0]["InstanceId"])
    for _ in range(network_interfaces):
        eni = ec2.create_network_interface(
            SubnetId=net.subnets[0], Description="aws-K8S-i-0123456789abcdef0",
            TagSpecifications=[{"ResourceType": "network-interface",
                                "Tags": eni_tags if eni_tags is not None else cni_tags(cluster)}])
        made.network_interfaces.append(eni["NetworkInterface"]["NetworkInterfaceId"])
    for _ in range(elastic_ips):
        address = ec2.allocate_address(Domain="vpc", TagSpecifications=[
            {"ResourceType": "elastic-ip", "Tags": eip_tags if eip_tags is not None else tags[:1]}])
        made.elastic_ips.append(address["AllocationId"])
    return made


def existing(client, made: Made) -> Made:
    """Which of ``made`` still exist in moto."""
    ec2, elb, elbv2 = client("ec2"), client("elb"), client("elbv2")
    lbs = {lb["LoadBalancerArn"] for page in elbv2.get_paginator("describe_load_balancers").paginate()
           for lb in page["LoadBalancers"]}
    tgs = {tg["TargetGroupArn"] for page in elbv2.get_paginator("describe_target_groups").paginate()
           for tg in page["TargetGroups"]}
    classic = {lb["LoadBalancerName"] for lb in elb.describe_load_balancers()["LoadBalancerDescriptions"]}
    sgs = {g["GroupId"] for page in ec2.get_paginator("describe_security_groups").paginate()
           for g in page["SecurityGroups"]}
    vols = {v["VolumeId"] for page in ec2.get_paginator("describe_volumes").paginate() for v in page["Volumes"]}
    running = {i["InstanceId"] for page in ec2.get_paginator("describe_instances").paginate()
               for r in page["Reservations"] for i in r["Instances"] if i["State"]["Name"] != "terminated"}
    enis = {n["NetworkInterfaceId"] for page in ec2.get_paginator("describe_network_interfaces").paginate()
            for n in page["NetworkInterfaces"]}
    eips = {a["AllocationId"] for a in ec2.describe_addresses()["Addresses"]}
    return Made(
        [a for a in made.load_balancers if a in lbs],
        [n for n in made.classic_elbs if n in classic],
        [a for a in made.target_groups if a in tgs],
        [g for g in made.security_groups if g in sgs],
        [v for v in made.volumes if v in vols],
        [i for i in made.instances if i in running],
        [n for n in made.network_interfaces if n in enis],
        [a for a in made.elastic_ips if a in eips],
    )


# ------------------------------------------------------------ fault injection


class _Response:
    def __init__(self, status: int):
        self.status_code = status
        self.headers: dict = {}
        self.content = b""
        self.text = ""


@dataclass
class _Rule:
    operation: str
    code: str
    times: float
    after: int = 0  # let this many matching calls through first
    seen: int = 0
    message: str = ""  # AWS's words for it, when the code under test reads them


class Faults:
    """Answer chosen operations with an AWS error, a number of times, without calling moto."""

    def __init__(self):
        self.rules: list[_Rule] = []
        self.injected: collections.Counter = collections.Counter()

    def add(self, operation: str, code: str, times: float = 1, after: int = 0, message: str = "") -> "Faults":
        self.rules.append(_Rule(operation, code, times, after, message=message))
        return self

    def attach(self, aws, services=("resourcegroupstaggingapi", "elbv2", "elb", "ec2"), region: str = REGION):
        for service in services:
            self.attach_client(aws.client(service, region))
        return self

    def attach_client(self, client) -> "Faults":
        client.meta.events.register("before-call", self._before_call)
        return self

    def _before_call(self, model=None, **_):
        for rule in self.rules:
            if rule.operation != model.name or rule.times <= 0:
                continue
            rule.seen += 1
            if rule.seen <= rule.after:
                continue
            rule.times -= 1
            self.injected[(model.name, rule.code)] += 1
            status = 403 if "Denied" in rule.code else 400
            return _Response(status), {
                "Error": {"Code": rule.code, "Message": rule.message or f"injected by the test: {rule.code}"},
                "ResponseMetadata": {"HTTPStatusCode": status},
            }
        return None


class Late:
    """AWS answers ``operation`` ("*": every operation of the client's service) ``latency`` seconds late,
    when the test releases the answer.

    A client whose read timeout is shorter gives up, as it would once its timeout passed (at once:
    botocore's ReadTimeoutError, which its retries see); a more patient one waits until ``release()``
    (or ``latency`` seconds of the machine's time, as a bound) and is answered by moto."""

    def __init__(self, operation: str, latency: float):
        self.operation, self.latency = operation, latency
        self.asked = threading.Event()  # a patient client's request is waiting
        self._released = threading.Event()
        self.timed_out = 0  # requests of a client that gave up
        self.answered = 0  # requests let through to moto
        self._handlers: dict[int, tuple[str, Callable]] = {}

    def attach_client(self, client) -> "Late":
        if id(client) not in self._handlers:
            patient = (client.meta.config.read_timeout or 0) > self.latency
            service = client.meta.service_model.service_id.hyphenize()
            event = f"before-send.{service}" + ("" if self.operation == "*" else f".{self.operation}")

            def handler(request=None, **_):
                return self._before_send(request, patient)
            self._handlers[id(client)] = (event, handler)
            client.meta.events.register(event, handler)
        return self

    def detach_client(self, client) -> None:
        """AWS answers the client on time again."""
        event, handler = self._handlers.pop(id(client))
        client.meta.events.unregister(event, handler)

    def _before_send(self, request, patient: bool):
        if not patient:
            self.timed_out += 1
            raise ReadTimeoutError(endpoint_url=getattr(request, "url", ""))
        self.asked.set()
        self._released.wait(self.latency)
        self.answered += 1
        return None

    def release(self) -> None:
        self._released.set()


class Calls:
    """AWS calls per operation made through the attached clients: answered ones (``after-call``, refusals
    included), or with ``event="before-call"`` every one asked for, answered or not."""

    def __init__(self):
        self.by_operation: collections.Counter = collections.Counter()

    def attach(self, aws, services=("resourcegroupstaggingapi", "elbv2", "elb", "ec2"), region: str = REGION,
               event: str = "after-call"):
        for service in services:
            aws.client(service, region).meta.events.register(event, self._count)
        return self

    def _count(self, model=None, **_):
        self.by_operation[model.name] += 1

    @property
    def total(self) -> int:
        return sum(self.by_operation.values())


# -------------------------------------------------------------- hook driving


def aws_cluster(
    name: str = "alpha",
    *,
    cluster: str | None = "alpha",
    annotations: dict | None = None,
    deleting: bool = True,
    region: str | None = REGION,
    kind: str = "AWSCluster",
) -> dict:
    meta: dict = {"name": name, "namespace": "default", "uid": f"uid-{name}", "annotations": dict(annotations or {})}
    if cluster:
        meta["labels"] = {"cluster.x-k8s.io/cluster-name": cluster}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        meta["finalizers"] = ["metacontroller.io/decoratorcontroller-cluster-gc"]
    group = "controlplane" if kind == "AWSManagedControlPlane" else "infrastructure"
    parent = {"apiVersion": f"{group}.cluster.x-k8s.io/v1beta2", "kind": kind, "metadata": meta, "spec": {}}
    if region:
        parent["spec"]["region"] = region
    return parent


def parse_finalize(parent: dict, verified: bool = False):
    """The parsed request of a finalize call on ``parent``, as Metacontroller (hook v2) sends it.

    ``verified``: as the pipeline has it once the API server confirmed it.
    """
    body = hook_request("cluster-gc", parent, finalizing=True)
    return dataclasses.replace(parse_request(body, DECORATOR, "finalize"), verified=verified)


def finalize_once(ctx, parent: dict) -> dict:
    """One finalize call, with the API server's copy of ``parent`` kept current in the stand-in.

    cluster-gc re-reads the parent before deleting anything; the stand-in
    answers with the same object the request carries, as the API server would.
    """
    if hasattr(ctx.kube, "add_object"):
        ctx.kube.add_object(parent)
    return cluster_gc.finalize(parse_finalize(parent), ctx=ctx)


@dataclass
class Run:
    responses: list[dict]
    seconds: list[float]
    parent: dict

    @property
    def finalized(self) -> bool:
        return bool(self.responses and self.responses[-1].get("finalized"))


def finalize_until_done(ctx, parent: dict, max_calls: int = 30, advance=None) -> Run:
    """Call finalize until finalized (or max_calls), like Metacontroller on resync.

    ``advance(seconds)`` moves the test clock by the requested resync, so
    backoff shows without sleeping.
    """
    responses, seconds = [], []
    for _ in range(max_calls):
        started = time.perf_counter()
        response = finalize_once(ctx, parent)
        seconds.append(time.perf_counter() - started)
        responses.append(response)
        parent = apply_decorator_response(parent, response)
        if response.get("finalized"):
            break
        if advance:
            advance(response.get("resyncAfterSeconds", 0))
    return Run(responses, seconds, parent)
