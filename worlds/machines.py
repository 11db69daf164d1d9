"""Machines against moto, with Metacontroller and the kubelet played by the test.

Shared by tests/machines/test_machines_moto.py and bench/machines.py:

- ``MachineWorld``: one Machine stored in a FakeKube (the API server) and
  synced or finalized through the real hook (``serve``), applying each
  response's status the way Metacontroller does; its related Nodes are the
  FakeKube's Nodes with the Machine's label, as customize asks;
- ``boot``: what a kubelet does once the instance runs: register the Node
  with the label and taint its user data names (no kubelet here: a test
  stand-in, like devcluster's);
- ``Crash``: raised from botocore's ``after-call`` event after the N-th AWS
  call has been carried out by moto: the hook process "dies" there, the
  response is lost, and nothing of that call is recorded;
- ``machine_instances``: every instance tagged with a Machine's UID;
- ``NotShownYet``: EC2's eventual consistency, which moto does not have: for
  a while after RunInstances, DescribeInstances does not list an instance
  and names it InvalidInstanceID.NotFound (injected through botocore's
  before-call event, without calling moto);
- ``NoCapacityFor``: EC2 out of capacity for some instance types, which moto
  never is: RunInstances of one of them answers InsufficientInstanceCapacity
  (injected the same way).
"""
from __future__ import annotations

import copy
import datetime as dt

from devcluster import kubelet
from hooks import machine_names
from hooks.dispatch import serve
from worlds.envelope import hook_request
from worlds.fake_kube import FakeKube

REGION = "us-east-1"
# moto stamps LaunchTime with the real clock, and liveness counts from it: the world's clock starts now.
T0 = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
IMAGE = "ami-12c6146b"


class Crash(BaseException):
    """The hook process dying mid-call (not an Exception: nothing in the hook catches it)."""


class CrashAfter:
    """Crash right after the ``n``-th AWS call (1-based) of the attached clients succeeded at moto."""

    def __init__(self, n: int):
        self.n, self.seen = n, 0
        self.operations: list[str] = []

    def attach(self, aws, services=("ec2",), region: str = REGION) -> "CrashAfter":
        for service in services:
            aws.client(service, region).meta.events.register("after-call", self._after_call)
        return self

    def detach(self, aws, services=("ec2",), region: str = REGION) -> None:
        for service in services:
            aws.client(service, region).meta.events.unregister("after-call", self._after_call)

    def _after_call(self, model=None, **_):
        self.seen += 1
        self.operations.append(model.name)
        if self.seen == self.n:
            raise Crash(f"crashed after AWS call {self.n} ({model.name})")


def _remember_params(params=None, context=None, **_):
    if context is not None:
        context["api_params"] = dict(params or {})  # before-call sees only the serialized request


class _Answer:
    def __init__(self, status: int):
        self.status_code, self.headers, self.content, self.text = status, {}, b"", ""


class NotShownYet:
    """DescribeInstances and TerminateInstances as EC2 answers them right after a launch: the hidden
    instances are not listed, and naming one is InvalidInstanceID.NotFound. ``shown()`` ends it.

    ``ec2`` is the test's own client: a filtered listing is asked of moto through it, and the hidden
    instances are taken out of the answer.
    """

    def __init__(self, ec2, *instance_ids: str):
        self.ec2 = ec2
        self.hidden = set(instance_ids)
        self.answered = 0

    def attach(self, aws, region: str = REGION) -> "NotShownYet":
        events = aws.client("ec2", region).meta.events
        events.register("before-parameter-build", _remember_params)
        events.register("before-call", self._before_call)
        return self

    def detach(self, aws, region: str = REGION) -> None:
        events = aws.client("ec2", region).meta.events
        events.unregister("before-parameter-build", _remember_params)
        events.unregister("before-call", self._before_call)

    def hide(self, *instance_ids: str) -> None:
        self.hidden.update(instance_ids)

    def shown(self) -> None:
        self.hidden.clear()

    def _before_call(self, model=None, context=None, **_):
        if model.name not in ("DescribeInstances", "TerminateInstances") or not self.hidden:
            return None
        params = (context or {}).get("api_params") or {}
        named = set(params.get("InstanceIds") or [])
        if named & self.hidden:
            self.answered += 1
            return _Answer(400), {"Error": {"Code": "InvalidInstanceID.NotFound", "Message": "injected: not shown yet"},
                                  "ResponseMetadata": {"HTTPStatusCode": 400}}
        if model.name == "DescribeInstances" and not named:
            self.answered += 1
            listed = self.ec2.describe_instances(**params)
            for reservation in listed.get("Reservations") or []:
                reservation["Instances"] = [i for i in reservation["Instances"] if i["InstanceId"] not in self.hidden]
            listed["Reservations"] = [r for r in listed.get("Reservations") or [] if r["Instances"]]
            return _Answer(200), listed
        return None


class NoCapacityFor:
    """RunInstances of the listed instance types answers InsufficientInstanceCapacity, as EC2 does when it has
    none, without calling moto; ``refused`` counts the answers per (instance type, subnet)."""

    def __init__(self, *instance_types: str):
        self.types = set(instance_types)
        self.refused: dict[tuple, int] = {}

    def attach(self, aws, region: str = REGION) -> "NoCapacityFor":
        events = aws.client("ec2", region).meta.events
        events.register("before-parameter-build.ec2.RunInstances", _remember_params)
        events.register("before-call.ec2.RunInstances", self._before_call)
        return self

    def _before_call(self, context=None, **_):
        params = (context or {}).get("api_params") or {}
        if params.get("InstanceType") not in self.types:
            return None
        key = (params["InstanceType"], params.get("SubnetId"))
        self.refused[key] = self.refused.get(key, 0) + 1
        return _Answer(500), {"Error": {"Code": "InsufficientInstanceCapacity",
                                        "Message": f"injected: no {params['InstanceType']} capacity"},
                              "ResponseMetadata": {"HTTPStatusCode": 500}}


def fmt(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def machine_spec(subnet_id: str, **overrides) -> dict:
    spec = {"instanceTypes": ["m5.large", "c5.large"], "subnets": [subnet_id], "imageId": IMAGE,
            "labels": {"team": "web"}, "annotations": {"example.com/owner": "web"},
            "taints": [{"key": "dedicated", "value": "web", "effect": "NoSchedule"}],
            "startupTaints": [{"key": "example.com/agent-not-ready", "effect": "NoExecute"}],
            "registrationTTL": "15m", "drainTimeout": "10m"}
    spec.update(overrides)
    return spec


def machine_object(name: str, uid: str, spec: dict, pool: str = "web", created: dt.datetime = T0) -> dict:
    return {"apiVersion": machine_names.API_VERSION, "kind": machine_names.MACHINE_KIND,
            "metadata": {"name": name, "uid": uid, "generation": 1, "creationTimestamp": fmt(created),
                         "labels": {machine_names.POOL_LABEL: pool}, "annotations": {machine_names.TEMPLATE_HASH: "h0"}},
            "spec": spec}


def default_subnet(ec2) -> str:
    return sorted(ec2.describe_subnets()["Subnets"], key=lambda s: s["AvailabilityZone"])[0]["SubnetId"]


def machine_instances(ec2, uid: str, *, live_only: bool = True) -> list[dict]:
    found = []
    for r in ec2.describe_instances(Filters=[{"Name": f"tag:{machine_names.TAG_MACHINE_UID}", "Values": [uid]}])["Reservations"]:
        for i in r["Instances"]:
            if not live_only or i["State"]["Name"] not in ("terminated", "shutting-down"):
                found.append(i)
    return found


class MachineWorld:
    """One Machine, its hook calls, and the clock."""

    def __init__(self, make_ctx, aws, *, name: str = "web-a1b2c", uid: str = "uid-machine-1",
                 spec: dict | None = None, env: dict | None = None, kube: FakeKube | None = None):
        self.aws, self.ec2 = aws, aws("ec2")
        self.kube = kube or FakeKube()
        self.now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
        self.ctx = make_ctx({"NODEWARDEN_MACHINE_DETACH_WAIT_SECONDS": "0", **(env or {})}, kube=self.kube)
        self.ctx.clock = lambda: self.now
        self.name, self.uid = name, uid
        self.kube.add_object(machine_object(name, uid, spec or machine_spec(default_subnet(self.ec2)),
                                            created=self.now))
        self.responses: list[dict] = []

    # -- the API server's copy ---------------------------------------------
    @property
    def machine(self) -> dict:
        return self.kube.objects[(machine_names.MACHINE_KIND, "", self.name)]

    @property
    def status(self) -> dict:
        return self.machine.get("status") or {}

    def condition(self, ctype: str) -> str | None:
        for c in self.status.get("conditions") or []:
            if c.get("type") == ctype:
                return c.get("status")
        return None

    def delete(self) -> None:
        """What deleting the Machine does while our finalizer holds it."""
        self.machine["metadata"]["deletionTimestamp"] = fmt(self.now)

    @property
    def gone(self) -> bool:
        return (machine_names.MACHINE_KIND, "", self.name) not in self.kube.objects

    # -- Metacontroller ----------------------------------------------------
    def related_nodes(self) -> list[dict]:
        return [copy.deepcopy(n) for n in self.kube.nodes.values()
                if (n["metadata"].get("labels") or {}).get(machine_names.MACHINE_LABEL) == self.name]

    def call(self, after: float = 0.0) -> dict | None:
        """One sync (or finalize, once deleted); None when the hook crashed (nothing applied)."""
        self.now += dt.timedelta(seconds=after)
        finalizing = bool(self.machine["metadata"].get("deletionTimestamp"))
        body = hook_request("machine", copy.deepcopy(self.machine), related=self.related_nodes(),
                            finalizing=finalizing)
        try:
            response = serve("machine", "finalize" if finalizing else "sync", body, self.ctx)
        except Crash:
            return None
        self.responses.append(response)
        if not self.gone:
            self.machine["status"] = response["status"]
            if finalizing and response.get("finalized"):
                del self.kube.objects[(machine_names.MACHINE_KIND, "", self.name)]
        return response

    def until(self, check, *, calls: int = 30, step: float = 1.0) -> dict | None:
        for _ in range(calls):
            response = self.call(after=step)
            if check():
                return response
        raise AssertionError(f"not reached after {calls} calls; status: {self.status}")


# ------------------------------------------------------------------ the kubelet


def user_data(ec2, instance_id: str) -> str:
    raw = ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")["UserData"].get("Value", "")
    return kubelet.decode_user_data(raw)


def boot(ec2, instance_id: str, kube: FakeKube, *, ready: bool = True, node_name: str | None = None,
         uid: str | None = None) -> dict:
    """Register the Node a kubelet on this instance would: labels and taints from its user data
    (read as devcluster's kubelet stand-in reads them)."""
    flags = kubelet.parse_user_data(user_data(ec2, instance_id))
    labels, taints = dict(flags.labels), list(flags.taints)
    described = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
    name = node_name or described.get("PrivateDnsName") or instance_id
    zone = described["Placement"]["AvailabilityZone"]
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": uid or f"uid-{name}", "labels": labels, "annotations": {}},
            "spec": {"providerID": f"aws:///{zone}/{instance_id}", "taints": taints},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                       "reason": "KubeletReady", "lastTransitionTime": fmt(T0)}],
                       "allocatable": {"cpu": "2", "memory": "7Gi", "pods": "29"}}}
    kube.add_node(node)
    return kube.nodes[name]

