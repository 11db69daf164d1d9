"""The devcluster kubelet stand-in: user-data parsing, the Node it builds, and one
pass against moto (server mode) with an in-memory API server."""
from __future__ import annotations

import base64
import copy
import gzip
import json

import pytest
import requests

from devcluster import fleet, kwok
from devcluster.api import ApiError
from devcluster.kubelet import (ADC_ANNOTATION, UNKNOWN_TYPE, BadFlag, KubeletFlags, KubeletStandin,
                                decode_user_data, node_arch, node_manifest, parse_labels, parse_taints,
                                parse_user_data)
from hooks import ec2_names, machine_names
from hooks.aws.instances import type_facts
from hooks.machines import capacity
from tests.support.user_data import default_user_data
from worlds.fake_kube import apply_merge_patch

CLUSTER = "test-cluster"


# -- parsing -------------------------------------------------------------------------

def test_the_default_template_gives_the_machine_labels_and_the_unregistered_taint():
    flags = parse_user_data(default_user_data())
    assert flags.labels == {machine_names.MACHINE_LABEL: "pool-abc12", machine_names.POOL_LABEL: "pool"}
    assert flags.taints == [{"key": machine_names.UNREGISTERED_TAINT, "value": "true", "effect": machine_names.UNREGISTERED_EFFECT}]
    assert not flags.never_register


def test_several_labels_and_taints_with_and_without_a_value():
    flags = parse_user_data(default_user_data(
        labels="a=1,example.com/b=two,c=,d=x=y",
        taints="dedicated=gpu:NoSchedule,spot:PreferNoSchedule,nodewarden.io/unregistered=true:NoExecute"))
    assert flags.labels == {"a": "1", "example.com/b": "two", "c": "", "d": "x=y"}
    assert flags.taints == [
        {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
        {"key": "spot", "effect": "PreferNoSchedule"},
        {"key": "nodewarden.io/unregistered", "value": "true", "effect": "NoExecute"},
    ]


@pytest.mark.parametrize("script", [
    # double quotes, the flag's own quotes, a space instead of '=', flags on their own lines
    '/etc/eks/bootstrap.sh devcluster --kubelet-extra-args "--node-labels=a=1,b=2 --register-with-taints=k:NoSchedule"',
    "kubelet --node-labels='a=1,b=2' --register-with-taints='k:NoSchedule'",
    "kubelet --node-labels a=1,b=2 \\\n  --register-with-taints k:NoSchedule",
    "kubelet --node-labels=a=1 --node-labels=b=2 --register-with-taints=k:NoSchedule  # repeated flags add up",
])
def test_quoting_and_flag_forms(script):
    flags = parse_user_data("#!/bin/bash\n" + script + "\n")
    assert flags.labels == {"a": "1", "b": "2"}
    assert flags.taints == [{"key": "k", "effect": "NoSchedule"}]


def test_a_comment_is_not_a_flag_and_no_flags_means_no_extra_labels():
    assert parse_user_data("#!/bin/bash\n# --node-labels=a=1 --register-with-taints=k:NoSchedule\necho hi\n") \
        == KubeletFlags()
    assert parse_user_data("") == KubeletFlags()


def test_the_never_register_hook_anywhere_in_the_user_data():
    assert parse_user_data(default_user_data() + "# --nodewarden-standin=never-register\n").never_register
    assert parse_user_data("echo --nodewarden-standin=never-register").never_register


@pytest.mark.parametrize("value", ["k", "k=v", "k=v:Sometimes", ":NoSchedule", "=v:NoSchedule",
                                   "k:NoSchedule,k=v:NoSchedule"])
def test_taints_a_kubelet_refuses(value):
    with pytest.raises(BadFlag):
        parse_taints(value)


def test_labels_a_kubelet_refuses_and_a_taint_given_twice_across_flags():
    with pytest.raises(BadFlag):
        parse_labels("a=1,b")
    with pytest.raises(BadFlag):
        parse_user_data("kubelet --register-with-taints=k:NoSchedule --register-with-taints=k=v:NoSchedule")
    assert parse_labels(" a = 1 , ,b=2") == {"a": "1", "b": "2"}


def test_user_data_as_ec2_returns_it():
    text = default_user_data()
    assert decode_user_data(base64.b64encode(text.encode()).decode()) == text
    assert decode_user_data(base64.b64encode(gzip.compress(text.encode())).decode()) == text
    assert decode_user_data(None) == decode_user_data("") == ""


# -- the Node ----------------------------------------------------------------------

INSTANCE = {
    "InstanceId": "i-0123456789abcdef0",
    "InstanceType": "m5.large",
    "PrivateDnsName": "ip-10-0-1-23.ec2.internal",
    "PrivateIpAddress": "10.0.1.23",
    "Placement": {"AvailabilityZone": "us-east-1b"},
    "State": {"Name": "running"},
    "Tags": [{"Key": machine_names.TAG_MACHINE, "Value": "pool-abc12"}],
}


M5_LARGE = {"vcpus": 2, "memoryMiB": 8192, "maxENIs": 3, "ipv4PerENI": 10, "architectures": ["x86_64"]}


def test_the_node_a_kubelet_registers_for_an_instance():
    flags = parse_user_data(default_user_data())
    node = node_manifest(INSTANCE, flags, M5_LARGE, "us-east-1")
    meta, spec, status = node["metadata"], node["spec"], node["status"]
    assert meta["name"] == "ip-10-0-1-23.ec2.internal"
    assert meta["labels"] == {
        machine_names.MACHINE_LABEL: "pool-abc12", machine_names.POOL_LABEL: "pool",
        "kubernetes.io/hostname": "ip-10-0-1-23.ec2.internal", "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64", "node.kubernetes.io/instance-type": "m5.large",
        "topology.kubernetes.io/region": "us-east-1", "topology.kubernetes.io/zone": "us-east-1b",
    }
    assert meta["annotations"] == {ADC_ANNOTATION: "true"}
    assert spec == {"providerID": "aws:///us-east-1b/i-0123456789abcdef0",
                    "taints": [{"key": machine_names.UNREGISTERED_TAINT, "value": "true", "effect": "NoExecute"}]}
    # The Machine's in-flight figures: the kube-scheduler places pods by the allocatable the hooks plan with.
    assert (status["capacity"], status["allocatable"]) == capacity.resources(M5_LARGE)
    assert status["capacity"]["pods"] == "29" and status["allocatable"]["cpu"] == "1930m"
    assert "conditions" not in status, "kwok posts the conditions"
    assert {"type": "InternalIP", "address": "10.0.1.23"} in status["addresses"]


def test_no_private_dns_name_means_the_instance_id_and_no_taints_means_none():
    instance = {k: v for k, v in INSTANCE.items() if k not in ("PrivateDnsName", "PrivateIpAddress")}
    graviton = {"vcpus": 4, "memoryMiB": 16384, "maxENIs": 4, "ipv4PerENI": 15, "architectures": ["arm64"]}
    node = node_manifest(instance, KubeletFlags(), graviton, "us-east-1")
    assert node["metadata"]["name"] == "i-0123456789abcdef0"
    assert node["metadata"]["labels"]["kubernetes.io/arch"] == "arm64"
    assert "taints" not in node["spec"]
    assert node["status"]["capacity"]["cpu"] == "4"


def test_architecture_from_the_instance_type():
    def described(*archs):
        return type_facts({"VCpuInfo": {"DefaultVCpus": 2}, "MemoryInfo": {"SizeInMiB": 8192},
                           "ProcessorInfo": {"SupportedArchitectures": list(archs)}})
    assert node_arch(described("arm64")) == "arm64"
    assert node_arch(described("i386", "x86_64")) == "amd64"
    assert node_arch(described()) == "amd64"


def test_a_type_without_figures_registers_as_the_small_default():
    node = node_manifest(INSTANCE, KubeletFlags(), {"architectures": ["arm64"]}, "us-east-1")
    assert (node["status"]["capacity"], node["status"]["allocatable"]) == capacity.resources(UNKNOWN_TYPE)
    assert node["status"]["capacity"]["cpu"] == "2"


# -- one pass against moto ------------------------------------------------------------

def _error(status: int, method: str, path: str) -> ApiError:
    response = requests.Response()
    response.status_code = status
    response._content = json.dumps({"message": f"{method} {path}: {status}"}).encode()
    response.url = path
    response.request = requests.Request(method, "https://fake" + path).prepare()
    return ApiError(response)


class FakeApi:
    """The few AdminApi calls the stand-in makes, on objects kept by path."""

    def __init__(self):
        self.objects: dict[str, dict] = {}
        self.uids = iter(range(1, 10_000))

    def get(self, path: str, **_kw) -> dict:
        if path in self.objects:
            return copy.deepcopy(self.objects[path])
        items = [copy.deepcopy(o) for p, o in self.objects.items() if p.rsplit("/", 1)[0] == path]
        if items or path.endswith("/nodes"):
            return {"items": items}
        raise _error(404, "GET", path)

    def get_or_none(self, path: str) -> dict | None:
        return copy.deepcopy(self.objects.get(path))

    def create(self, path: str, body: dict) -> dict:
        key = f"{path}/{body['metadata']['name']}"
        if key in self.objects:
            raise _error(409, "POST", key)
        obj = copy.deepcopy(body)
        obj["metadata"]["uid"] = f"uid-{next(self.uids)}"
        self.objects[key] = obj
        return copy.deepcopy(obj)

    def patch(self, path: str, body: dict, content_type: str = "") -> dict:
        target = path.removesuffix("/status")
        if target not in self.objects:
            raise _error(404, "PATCH", path)
        apply_merge_patch(self.objects[target], body)
        return copy.deepcopy(self.objects[target])

    def node(self, name: str) -> dict | None:
        return self.objects.get(f"/api/v1/nodes/{name}")


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _launch(ec2, user_data: str | None, *, machine: bool = True, instance_type="m5.large",
            cluster: str = CLUSTER) -> dict:
    tags = [{"Key": ec2_names.cluster_tag(cluster), "Value": ec2_names.OWNED}]
    if machine:
        tags += [{"Key": machine_names.TAG_MACHINE, "Value": "pool-abc12"}, {"Key": machine_names.TAG_MACHINE_UID, "Value": "u-1"},
                 {"Key": machine_names.TAG_POOL, "Value": "pool"}]
    kwargs = {"UserData": user_data} if user_data is not None else {}
    reservation = ec2.run_instances(ImageId=fleet.IMAGE_ID, MinCount=1, MaxCount=1, InstanceType=instance_type,
                                    Placement={"AvailabilityZone": "us-east-1a"},
                                    TagSpecifications=[{"ResourceType": "instance", "Tags": tags}], **kwargs)
    instance = reservation["Instances"][0]
    ec2.describe_instances(InstanceIds=[instance["InstanceId"]])  # moto: pending -> running
    return instance


def _boot(standin) -> None:
    """Two passes, the boot delay apart: the first sees the instances run, the second registers them."""
    standin.poll_once()
    standin.fake_clock.now += standin.boot_delay
    standin.poll_once()


@pytest.fixture
def standin(aws, moto_endpoint):
    api, clock = FakeApi(), Clock()
    kubelet = KubeletStandin(api, fleet.Aws({"AWS_ENDPOINT_URL": moto_endpoint}), CLUSTER, boot_delay=1.0,
                             clock=clock)
    kubelet.fake_api, kubelet.fake_clock = api, clock
    yield kubelet
    kubelet.stop()


@pytest.mark.moto
def test_one_pass_registers_a_machines_instance_after_its_boot_delay(aws, standin):
    ec2 = aws("ec2")
    launched = _launch(ec2, default_user_data())
    _launch(ec2, default_user_data(), machine=False)  # like the demo's fleet: cluster tag, no Machine
    api, clock = standin.fake_api, standin.fake_clock
    name = launched["PrivateDnsName"]

    standin.poll_once()
    assert api.node(name) is None, "registered before its boot delay"
    clock.now += 1.0
    standin.poll_once()

    node = api.node(name)
    assert node["spec"]["providerID"] == f"aws:///us-east-1a/{launched['InstanceId']}"
    assert node["spec"]["taints"] == [{"key": machine_names.UNREGISTERED_TAINT, "value": "true", "effect": "NoExecute"}]
    labels = node["metadata"]["labels"]
    assert labels[machine_names.MACHINE_LABEL] == "pool-abc12" and labels[machine_names.POOL_LABEL] == "pool"
    assert labels["node.kubernetes.io/instance-type"] == "m5.large"
    assert labels["topology.kubernetes.io/zone"] == "us-east-1a" and labels["kubernetes.io/arch"] == "amd64"
    described = ec2.describe_instance_types(InstanceTypes=["m5.large"])["InstanceTypes"][0]
    assert node["status"]["capacity"] == capacity.resources(type_facts(described))[0]
    assert node["status"]["allocatable"] == capacity.resources(type_facts(described))[1]
    assert node["status"]["capacity"]["cpu"] == "2" and node["status"]["capacity"]["pods"] == "29"
    assert labels[kwok.LABEL] == kwok.VALUE, "handed to kwok"
    assert standin.nodes == {launched["InstanceId"]: name}
    assert [p for p in api.objects if p.startswith("/api/v1/nodes/")] == [f"/api/v1/nodes/{name}"], \
        "the fleet's instance (no machine-uid tag) is not a Machine's"

    ec2.terminate_instances(InstanceIds=[launched["InstanceId"]])
    standin.poll_once()
    assert standin.dead == {launched["InstanceId"]: name}
    assert kwok.LABEL not in api.node(name)["metadata"]["labels"], "still in kwok's hands"
    assert api.node(name) is not None, "the Machine controller deletes Nodes, not the kubelet"
    standin.poll_once()
    assert standin.nodes == {}


@pytest.mark.moto
def test_a_pass_describes_only_its_clusters_machine_instances(aws, standin):
    ec2 = aws("ec2")
    mine = _launch(ec2, default_user_data())
    _launch(ec2, default_user_data(), machine=False)  # a fleet's: described on every pass, it would cost moto
    _launch(ec2, default_user_data(), cluster="another")  # a Machine's of another cluster
    assert set(standin._instances()) == {mine["InstanceId"]}
    _boot(standin)
    assert standin.nodes == {mine["InstanceId"]: mine["PrivateDnsName"]}


@pytest.mark.moto
def test_plain_never_register_and_malformed_user_data(aws, standin):
    ec2 = aws("ec2")
    plain = _launch(ec2, None, instance_type="t3.large")
    never = _launch(ec2, default_user_data() + "# --nodewarden-standin=never-register\n")
    broken = _launch(ec2, default_user_data(taints="k=v"))
    _boot(standin)
    node = standin.fake_api.node(plain["PrivateDnsName"])
    assert "taints" not in node["spec"]
    assert not any(k.startswith("nodewarden.io/") for k in node["metadata"]["labels"])
    assert set(standin.skipped) == {never["InstanceId"], broken["InstanceId"]}
    assert standin.fake_api.node(never["PrivateDnsName"]) is None
    assert standin.fake_api.node(broken["PrivateDnsName"]) is None


@pytest.mark.moto
def test_adopts_its_own_node_and_leaves_another_alone(aws, standin):
    ec2 = aws("ec2")
    mine, other = _launch(ec2, default_user_data()), _launch(ec2, default_user_data())
    api = standin.fake_api
    # A restart: the Node is there, its unregistered taint already removed.
    api.create("/api/v1/nodes", {"metadata": {"name": mine["PrivateDnsName"], "labels": {"kept": "yes"}},
                                 "spec": {"providerID": f"aws:///us-east-1a/{mine['InstanceId']}"}})
    api.create("/api/v1/nodes", {"metadata": {"name": other["PrivateDnsName"]},
                                 "spec": {"providerID": "aws:///us-east-1a/i-somebodyelse"}})
    _boot(standin)
    adopted = api.node(mine["PrivateDnsName"])
    assert adopted["metadata"]["labels"] == {"kept": "yes", kwok.LABEL: kwok.VALUE}
    assert "taints" not in adopted["spec"]
    assert adopted["status"]["capacity"]["cpu"] == "2", "its status posted again"
    assert standin.nodes == {mine["InstanceId"]: mine["PrivateDnsName"]}
    left = api.node(other["PrivateDnsName"])
    assert left["spec"]["providerID"] == "aws:///us-east-1a/i-somebodyelse"
    assert "status" not in left and "labels" not in left["metadata"]


@pytest.mark.moto
def test_a_node_deleted_under_a_live_kubelet_is_not_registered_again(aws, standin):
    launched = _launch(aws("ec2"), default_user_data())
    _boot(standin)
    name = launched["PrivateDnsName"]
    del standin.fake_api.objects[f"/api/v1/nodes/{name}"]
    standin.poll_once()
    standin.poll_once()
    assert standin.dead == {launched["InstanceId"]: name}
    assert standin.fake_api.node(name) is None
