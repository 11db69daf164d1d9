"""The local stack's moto: its routing remembered per host, every service still answering as moto does, behind
the throttling (tests/devcluster/test_throttling.py)."""
from __future__ import annotations

import os
import subprocess

import boto3

from devcluster import components
from devcluster.throttling import ThrottlingControl
from devcluster.waits import free_port, http_ok, wait_until


def _clients(endpoint: str):
    kw = dict(endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    return boto3.client("ec2", **kw), boto3.client("elbv2", **kw), boto3.client("sts", **kw)


def _ask_each_service(endpoint: str) -> None:
    ec2, elbv2, sts = _clients(endpoint)
    assert ec2.describe_vpcs()["Vpcs"], "ec2 answered as ec2"
    assert elbv2.describe_target_groups()["TargetGroups"] == []
    assert sts.get_caller_identity()["Account"]


def test_a_routed_host_is_not_looked_up_again(moto_endpoint, monkeypatch):
    """moto lists its package's directories for every request it routes; once a host is routed, never again."""
    import moto

    _ask_each_service(moto_endpoint)
    listed = []
    real = os.listdir
    package = os.path.dirname(moto.__file__)

    def listdir(path="."):  # moto's own directories only: other threads of the process may list theirs
        if os.path.abspath(os.fspath(path)).startswith(package):
            listed.append(path)
        return real(path)

    monkeypatch.setattr(os, "listdir", listdir)
    _ask_each_service(moto_endpoint)
    assert listed == []


def test_the_launcher_serves_every_service_behind_the_throttling():
    port = free_port()
    proc = subprocess.Popen(components.moto_argv(port, throttled=True), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, cwd="/")
    try:
        wait_until(http_ok(f"http://127.0.0.1:{port}/moto-api/"), "moto", timeout=60, watch=[])
        _ask_each_service(f"http://127.0.0.1:{port}")
        state = ThrottlingControl(f"http://127.0.0.1:{port}").state()
        assert state["enabled"]
        assert "ec2:DescribeVpcs:ec2-unfiltered-unpaginated" in {bucket["key"] for bucket in state["buckets"]}
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_remembering_twice_changes_nothing():
    from moto.moto_server import werkzeug_app

    from devcluster.moto_server import remember_routing

    remember_routing()
    patched = werkzeug_app.DomainDispatcherApplication.get_backend_for_host
    remember_routing()
    assert werkzeug_app.DomainDispatcherApplication.get_backend_for_host is patched


def test_tags_read_by_resource_are_the_ones_moto_finds_by_filtering():
    from moto import mock_aws
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ec2.models import ec2_backends

    from devcluster.moto_server import look_up_tags_by_resource

    look_up_tags_by_resource()
    look_up_tags_by_resource()  # idempotent
    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
        ids = [i["InstanceId"] for i in ec2.run_instances(ImageId="ami-12c6146b", MinCount=3, MaxCount=3)["Instances"]]
        for n, instance_id in enumerate(ids[:2]):
            ec2.create_tags(Resources=[instance_id],
                            Tags=[{"Key": "uid", "Value": f"u-{n}"}, {"Key": "pool", "Value": "a"}])
        backend = ec2_backends[DEFAULT_ACCOUNT_ID]["us-east-1"]
        for reservation in backend.reservations.values():
            for instance in reservation.instances:
                assert instance.get_tags() == backend.describe_tags(filters={"resource-id": [instance.id]})
        found = ec2.describe_instances(Filters=[{"Name": "tag:uid", "Values": ["u-1"]}])["Reservations"]
        assert [i["InstanceId"] for r in found for i in r["Instances"]] == [ids[1]]


def test_the_tagging_api_lists_a_classic_elb_under_the_type_aws_files_it_under(moto_endpoint):
    kw = dict(endpoint_url=moto_endpoint, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    elb, tagging = boto3.client("elb", **kw), boto3.client("resourcegroupstaggingapi", **kw)
    elb.create_load_balancer(LoadBalancerName="typed-classic", AvailabilityZones=["us-east-1a"],
                             Listeners=[{"Protocol": "TCP", "LoadBalancerPort": 80, "InstancePort": 30080}],
                             Tags=[{"Key": "typed-classic", "Value": "yes"}])
    try:
        listed = tagging.get_resources(TagFilters=[{"Key": "typed-classic"}],
                                       ResourceTypeFilters=["elasticloadbalancing:loadbalancer"])
        assert [m["ResourceARN"].rsplit("/", 1)[-1] for m in listed["ResourceTagMappingList"]] == ["typed-classic"]
    finally:
        elb.delete_load_balancer(LoadBalancerName="typed-classic")
