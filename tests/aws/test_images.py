"""The architecture of a pool's image, read from moto (server mode) and kept per process; what a provisioning
pool's gather reads of it and of its subnets' zones.

moto 5.2.5 knows its default images (1,301 of them: ami-12c6146b, the local stack's, is x86_64) and answers
DescribeImages for any other id with InvalidAMIID.NotFound; RunInstances takes an image it does not know,
and never checks the instance type's architecture against the image's.
"""
from __future__ import annotations

import dataclasses
import time

import pytest
from botocore.stub import Stubber

from hooks.aws import images
from hooks.aws.timed_cache import TimedCache
from tests.aws.test_instance_catalog import Clock, Requests

pytestmark = pytest.mark.moto
KNOWN = "ami-12c6146b"


@pytest.fixture
def clock(monkeypatch):
    """Fresh caches on a clock the test moves."""
    clock = Clock()
    for name in ("ARCHITECTURES", "TEMPLATE_IMAGES"):
        monkeypatch.setattr(images, name, TimedCache(clock))
    return clock


def arm64_image(ec2) -> str:
    return next(i["ImageId"] for i in ec2.describe_images()["Images"] if i.get("Architecture") == "arm64")


def test_an_images_architecture_is_read_once_per_process(aws, clock):
    ec2 = aws("ec2")
    sent = Requests(ec2)
    graviton = arm64_image(aws("ec2"))
    assert images.architecture_of(ec2, KNOWN, None) == {"id": KNOWN, "architecture": "x86_64"}
    assert images.architecture_of(ec2, graviton, None) == {"id": graviton, "architecture": "arm64"}
    clock.now += 10 ** 6
    assert images.architecture_of(ec2, KNOWN, None)["architecture"] == "x86_64"
    assert [p["ImageIds"] for p in sent.of("DescribeImages")] == [[KNOWN], [graviton]]


def test_an_image_ec2_does_not_know_is_an_error_asked_again_after_a_while(aws, clock):
    ec2 = aws("ec2")
    sent = Requests(ec2)
    found = images.architecture_of(ec2, "ami-1", None)
    assert found["id"] == "ami-1" and found["error"].startswith("InvalidAMIID.NotFound")
    assert "error" in images.architecture_of(ec2, "ami-1", None)
    assert len(sent.of("DescribeImages")) == 1, "not asked every round"
    clock.now += images.RETRY_SECONDS
    images.architecture_of(ec2, "ami-1", None)
    assert len(sent.of("DescribeImages")) == 2, "an image may come to exist"


def test_a_launch_templates_image_is_the_one_its_version_names(aws, clock):
    ec2 = aws("ec2")
    graviton = arm64_image(ec2)
    made = ec2.create_launch_template(LaunchTemplateName="nodes", LaunchTemplateData={"ImageId": graviton})
    template_id = made["LaunchTemplate"]["LaunchTemplateId"]
    assert images.architecture_of(ec2, None, {"name": "nodes"}) == {"id": graviton, "architecture": "arm64"}
    ec2.create_launch_template_version(LaunchTemplateId=template_id, LaunchTemplateData={"ImageId": KNOWN})
    by_version = images.architecture_of(ec2, None, {"id": template_id, "version": "2"})
    assert by_version == {"id": KNOWN, "architecture": "x86_64"}
    sent = Requests(ec2)
    images.architecture_of(ec2, None, {"name": "nodes"})
    assert sent.of("DescribeLaunchTemplateVersions") == [], "kept a while"
    clock.now += images.TEMPLATE_SECONDS
    images.architecture_of(ec2, None, {"name": "nodes"})
    assert len(sent.of("DescribeLaunchTemplateVersions")) == 1, "$Default may have moved"
    assert "error" in images.architecture_of(ec2, None, {"name": "no-such-template"})


def test_a_template_naming_its_image_through_ssm_is_not_read_as_one(aws, clock):
    # EC2 answers a template's SSM parameter reference as its ImageId (resolved only at launch): a Stubber plays it.
    ec2 = aws("ec2")
    stub = Stubber(ec2)
    stub.add_response("describe_launch_template_versions", {"LaunchTemplateVersions": [
        {"LaunchTemplateData": {"ImageId": "resolve:ssm:/aws/service/eks/optimized-ami/1.31/amazon-linux-2023"}}]})
    with stub:
        found = images.architecture_of(ec2, None, {"name": "nodes"})
    assert found["id"] == "" and "through SSM" in found["error"]


def test_a_pools_gather_reads_its_subnets_zones_and_the_image_of_a_pool_of_mixed_types(aws, clock, make_ctx):
    from hooks.contract import parse_request
    from hooks.controllers import nodepool
    from tests.provisioning.test_rounds import pool_object
    from tests.support.provisioning import NOW, raw_pod
    from worlds.envelope import hook_request
    from worlds.fake_kube import FakeKube

    ec2 = aws("ec2")
    subnets = {s["AvailabilityZone"]: s["SubnetId"] for s in ec2.describe_subnets(
        Filters=[{"Name": "default-for-az", "Values": ["true"]}])["Subnets"]}
    mixed = pool_object("mixed")
    mixed["spec"]["template"]["spec"].update(subnets=[subnets["us-east-1a"], subnets["us-east-1b"]], imageId=KNOWN)
    x86 = pool_object("x86", requirements=[{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}])
    x86["spec"]["template"]["spec"].update(subnets=[subnets["us-east-1c"]], imageId="ami-1")
    for pool in (mixed, x86):
        pool["metadata"]["generation"] = 1
    kube = FakeKube([mixed, x86, raw_pod("web-0")])
    ctx = make_ctx({}, now=NOW, kube=kube)
    request = dataclasses.replace(parse_request(hook_request("nodepool", mixed), "composite", "sync"), verified=True)
    # The zones offering each type are read once per process in the background: a gather that comes while
    # that read runs says so (NotReadYet) and the next one has them.
    deadline = time.monotonic() + 120
    observed = nodepool.gather(request, ctx, NOW)
    while "NotReadYet" in (observed.get("provisioningError") or "") and time.monotonic() < deadline:
        time.sleep(0.2)
        observed = nodepool.gather(request, ctx, NOW)
    assert "provisioning" in observed, observed.get("provisioningError")
    readings = observed["provisioning"]
    assert readings["subnetZones"] == {subnets[z]: z for z in ("us-east-1a", "us-east-1b", "us-east-1c")}
    assert readings["images"] == {"mixed": {"id": KNOWN, "architecture": "x86_64"}}, \
        "a pool whose requirements name one architecture needs no image read"
