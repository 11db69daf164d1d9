"""A provisioning pool's round against moto in server mode, with the API server of worlds/fake_kube.FakeKube.

moto answers DescribeInstanceTypes at once; on a busy machine it can take longer than the hooks' 5 s
read timeout to answer with all its types (one response: moto ignores MaxResults). That latency is
injected (worlds.cluster_gc.Late), and so is an error (worlds.cluster_gc.Faults).
"""
from __future__ import annotations

import datetime as dt

import pytest

from hooks import machine_names
from hooks.aws import instance_catalog
from hooks.aws.clients import AwsClients
from hooks.aws.timed_cache import Refreshed
from hooks.dispatch import serve
from hooks.provisioning_names import PROVISIONED_FOR
from worlds.cluster_gc import Faults, Late
from worlds.envelope import hook_request
from worlds.fake_kube import FakeKube
from worlds.machines import T0, default_subnet, fmt

pytestmark = pytest.mark.moto
REGION = "us-east-1"


@pytest.fixture
def catalog(monkeypatch):
    """This process's instance catalog, empty: nothing read from EC2 yet, as in a new hook worker."""
    for name, read in (("TYPE_FACTS", "instance-types"), ("OFFERINGS", "zone-offerings")):
        monkeypatch.setattr(instance_catalog, name, Refreshed(read, instance_catalog.RETRY_SECONDS))
    # The zones offering each type are bundled nowhere: this first round waits for moto's answer to them.
    monkeypatch.setattr(instance_catalog, "OFFERINGS_WAIT_SECONDS", 60.0)


def _every_ec2_client(monkeypatch, attach) -> None:
    """``attach(client)`` on every EC2 client the process makes, whatever its read timeout."""
    made = AwsClients.client

    def client(self, service, *args, **kwargs):
        found = made(self, service, *args, **kwargs)
        if service == "ec2":
            attach(found)
        return found
    monkeypatch.setattr(AwsClients, "client", client)


def _world(ec2) -> tuple[dict, FakeKube]:
    pool = {"apiVersion": "nodewarden.io/v1alpha1", "kind": "NodePool",
            "metadata": {"name": "general", "uid": "uid-general", "generation": 1, "creationTimestamp": fmt(T0)},
            "spec": {"template": {"spec": {"instanceTypes": ["m5.large", "m5.xlarge"],
                                           "subnets": [default_subnet(ec2)], "imageId": "ami-1"}}}}
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "web-1", "namespace": "default", "uid": "uid-web-1", "labels": {"app": "web"}},
           "spec": {"containers": [{"name": "c", "image": "web",
                                    "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]},
           "status": {"phase": "Pending", "conditions": [
               {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "lastTransitionTime": fmt(T0 - dt.timedelta(seconds=30))}]}}
    kube = FakeKube([pool])
    kube.add_pod(pod)
    return pool, kube


def _machines_made(response: dict) -> list[dict]:
    return [c for c in response["children"] if c["kind"] == machine_names.MACHINE_KIND]


def test_a_round_creates_its_machine_while_describe_instance_types_is_slower_than_a_hook(
        aws, make_ctx, catalog, monkeypatch):
    late = Late("DescribeInstanceTypes", latency=30.0)
    _every_ec2_client(monkeypatch, late.attach_client)
    pool, kube = _world(aws("ec2"))
    ctx = make_ctx({"AWS_REGION": REGION}, now=T0, kube=kube)
    try:
        response = serve("nodepool", "sync", hook_request("nodepool", pool), ctx)
        assert late.answered == 0, "the round was decided while EC2 had not answered"
    finally:
        late.release()
    [machine] = _machines_made(response)
    assert machine["metadata"]["annotations"][PROVISIONED_FOR].count("default/web-1") == 1
    assert machine["spec"]["instanceTypes"] == ["m5.large", "m5.xlarge"]
    assert not [e for e in kube.reasons() if e == "FailedProvisioning"]
    assert instance_catalog.TYPE_FACTS.join(REGION, 60)
    assert late.timed_out == 0, "no client that gives up after the hooks' 5 s asked"


def test_a_round_goes_on_with_the_bundled_facts_while_describe_instance_types_fails(
        aws, make_ctx, catalog, monkeypatch):
    faults = Faults().add("DescribeInstanceTypes", "RequestLimitExceeded", times=float("inf"))
    _every_ec2_client(monkeypatch, faults.attach_client)
    pool, kube = _world(aws("ec2"))
    ctx = make_ctx({"AWS_REGION": REGION}, now=T0, kube=kube)
    for _ in range(2):
        response = serve("nodepool", "sync", hook_request("nodepool", pool), ctx)
        [machine] = _machines_made(response)
        assert machine["spec"]["instanceTypes"] == ["m5.large", "m5.xlarge"]
        assert instance_catalog.TYPE_FACTS.join(REGION, 60)
        assert instance_catalog.TYPE_FACTS.failure(REGION).startswith("RequestLimitExceeded"), \
            "the read failed, and the round went on (again after the failure was known)"
    assert faults.injected[("DescribeInstanceTypes", "RequestLimitExceeded")] == 1, "tried again only later"
