"""The kubelet stand-in on the real control plane: an instance tagged as a Machine's,
launched in moto with the Machines' default user data, becomes a Node with the
labels and taints of its kubelet flags, which kwok keeps Ready; when the
instance is terminated the Node leaves kwok's selector, its Lease stops being
renewed and the Node stays (deleting it is the Machine's job).

The stand-in is the session cluster's own (Cluster starts it), as in `make up`.
"""
from __future__ import annotations

import time
import uuid

import pytest

from devcluster import fleet, kwok
from devcluster.api import wait_for
from devcluster.cluster import CLUSTER_NAME
from devcluster.kwok import LEASES
from hooks import ec2_names, machine_names
from hooks.aws.instances import type_facts
from hooks.machines.capacity import resources
from tests.support.user_data import default_user_data

pytestmark = pytest.mark.e2e


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def _launch(cloud: fleet.Aws, machine: str, user_data: str) -> dict:
    tags = [{"Key": ec2_names.cluster_tag(CLUSTER_NAME), "Value": ec2_names.OWNED},
            {"Key": machine_names.TAG_POOL, "Value": "standin"}, {"Key": machine_names.TAG_MACHINE, "Value": machine},
            {"Key": machine_names.TAG_MACHINE_UID, "Value": unique("uid")}, {"Key": machine_names.TAG_NAME, "Value": machine}]
    reservation = cloud.ec2.run_instances(
        ImageId=fleet.IMAGE_ID, MinCount=1, MaxCount=1, InstanceType="m5.large", UserData=user_data,
        Placement={"AvailabilityZone": fleet.ZONE}, TagSpecifications=[{"ResourceType": "instance", "Tags": tags}])
    return reservation["Instances"][0]


def test_a_machines_instance_registers_stays_alive_and_dies_with_its_instance(cluster, api, cloud):
    standin = cluster.kubelet_standin
    period = kwok.FAST.renewal_seconds  # how often kwok renews a Lease
    machine = unique("standin")
    instance = _launch(cloud, machine, default_user_data(CLUSTER_NAME, machine, "standin"))
    never = _launch(cloud, unique("never"), default_user_data(CLUSTER_NAME, "never", "standin")
                    + "# --nodewarden-standin=never-register\n")
    instance_id, name = instance["InstanceId"], instance["PrivateDnsName"]
    try:
        node = kwok.wait_ready(api, name)
        labels = node["metadata"]["labels"]
        assert labels[kwok.LABEL] == kwok.VALUE
        assert labels[machine_names.MACHINE_LABEL] == machine and labels[machine_names.POOL_LABEL] == "standin"
        assert labels["node.kubernetes.io/instance-type"] == "m5.large"
        assert labels["topology.kubernetes.io/zone"] == fleet.ZONE
        assert node["spec"]["providerID"] == f"aws:///{fleet.ZONE}/{instance_id}"
        assert {"key": machine_names.UNREGISTERED_TAINT, "value": "true", "effect": machine_names.UNREGISTERED_EFFECT} \
            in node["spec"]["taints"]
        # The stand-in's status (the instance's), kwok's conditions. Capacity and allocatable are the hooks' own
        # in-flight figures for the type, so the kube-scheduler places pods by the allocatable the hooks plan with.
        described = cloud.ec2.describe_instance_types(InstanceTypes=["m5.large"])["InstanceTypes"][0]
        capacity, allocatable = resources(type_facts(described))
        assert node["status"]["capacity"] == capacity and node["status"]["allocatable"] == allocatable
        assert capacity["cpu"] == "2" and capacity["pods"] == "29" and allocatable["cpu"] == "1930m"
        assert {"type": "InternalIP", "address": instance["PrivateIpAddress"]} in node["status"]["addresses"]
        assert kwok.ready(node)["reason"] == "KubeletReady"
        uid = node["metadata"]["uid"]

        # Alive: kwok renews the Lease (its first one may take a moment).
        lease = wait_for(lambda: api.get_or_none(f"{LEASES}/{name}"), "the Node's Lease", timeout=15)
        first = lease["spec"]["renewTime"]
        wait_for(lambda: api.get(f"{LEASES}/{name}")["spec"]["renewTime"] != first, "a renewal",
                 timeout=period * 3, interval=0.2)
        assert never["InstanceId"] in standin.skipped, "the never-register hook was ignored"
        assert api.get_or_none(f"/api/v1/nodes/{never['PrivateDnsName']}") is None

        # Dead: the instance ends, the Node leaves kwok's selector, the Lease stops, the Node stays.
        cloud.ec2.terminate_instances(InstanceIds=[instance_id])
        wait_for(lambda: instance_id in standin.dead, "the stand-in to see the instance end", timeout=10)
        assert kwok.LABEL not in api.get(f"/api/v1/nodes/{name}")["metadata"]["labels"]
        time.sleep(1)  # kwok hears of it through its watch; a renewal already under way may land
        last = api.get(f"{LEASES}/{name}")["spec"]["renewTime"]
        time.sleep(period * 2 + 1)
        assert api.get(f"{LEASES}/{name}")["spec"]["renewTime"] == last, "a dead kubelet's Lease was renewed"
        node = api.get(f"/api/v1/nodes/{name}")
        assert node["metadata"]["uid"] == uid, "the Node was deleted or registered again"
        assert instance_id not in standin.nodes
    finally:
        cloud.ec2.terminate_instances(InstanceIds=[instance_id, never["InstanceId"]])
        api.delete(f"/api/v1/nodes/{name}")
