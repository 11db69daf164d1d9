"""What a pod's persistent volumes ask of its Node: topology, attachments, and when kube-scheduler runs it nowhere."""
from __future__ import annotations

import pytest

from hooks import provisioning_names as names
from hooks.machines import capacity
from hooks.provisioning import volumes
from hooks.provisioning.requirements import Requirements, Rule
from tests.support.provisioning import ZONES, raw_pod

EBS = names.EBS_CSI_DRIVER


def claim(name: str, *, volume: str | None = None, storage_class: str | None = "gp3", namespace: str = "default",
          owner: str | None = None, **meta) -> dict:
    spec = {"accessModes": ["ReadWriteOnce"]}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    if volume is not None:
        spec["volumeName"] = volume
    found = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
             "metadata": {"name": name, "namespace": namespace, **meta}, "spec": spec,
             "status": {"phase": "Bound" if volume else "Pending"}}
    if owner is not None:
        found["metadata"]["ownerReferences"] = [{"kind": "Pod", "name": "p", "uid": owner, "controller": True}]
    return found


def ebs_volume(name: str, zone: str | None = ZONES[1], *, key: str = names.ZONE_LABEL, labels: dict | None = None,
               csi: bool = True) -> dict:
    spec: dict = {"csi": {"driver": EBS, "volumeHandle": f"vol-{name}"}} if csi else \
        {"awsElasticBlockStore": {"volumeID": f"vol-{name}"}}
    if zone is not None:
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": key, "operator": "In", "values": [zone]}]}]}}
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name, "labels": dict(labels or {})},
            "spec": spec}


def storage_class(name: str = "gp3", *, mode: str = "WaitForFirstConsumer", provisioner: str = EBS,
                  zones: list[str] | None = None, key: str = names.ZONE_LABEL) -> dict:
    found = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
             "provisioner": provisioner, "volumeBindingMode": mode}
    if zones:
        found["allowedTopologies"] = [{"matchLabelExpressions": [{"key": key, "values": zones}]}]
    return found


def storage(*objects: dict, csi_nodes: tuple = ()) -> volumes.Storage:
    by_kind = {"PersistentVolumeClaim": "claims", "PersistentVolume": "volumes", "StorageClass": "storageClasses"}
    raw: dict = {"claims": [], "volumes": [], "storageClasses": [], "csiNodes": list(csi_nodes)}
    for obj in objects:
        raw[by_kind[obj["kind"]]].append(obj)
    return volumes.Storage.of(raw)


def with_claims(name: str = "db-0", *claims: str, ephemeral: tuple = ()) -> dict:
    listed = [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)]
    listed += [{"name": v, "ephemeral": {"volumeClaimTemplate": {"spec": {}}}} for v in ephemeral]
    return raw_pod(name, volumes=[{"name": "config", "configMap": {"name": "c"}}, *listed])


def zone_in(*zones: str) -> Requirements:
    return Requirements({names.ZONE_LABEL: Rule.of(names.IN, zones)})


def test_a_bound_claim_keeps_the_pod_where_its_volume_is():
    found = storage(claim("data", volume="pv-1"), ebs_volume("pv-1")).of_pod(with_claims("db-0", "data"))
    assert found.problem is None
    assert found.terms == (zone_in(ZONES[1]),)
    assert found.attachments == {(EBS, "default/data")}


@pytest.mark.parametrize("volume", [
    ebs_volume("pv-1", key="topology.ebs.csi.aws.com/zone"),  # the EBS CSI driver's own key, before v1.28
    ebs_volume("pv-1", zone=None, labels={names.ZONE_LABEL: ZONES[1]}),  # VolumeZone: the volume's zone label
    ebs_volume("pv-1", zone=None, labels={"failure-domain.beta.kubernetes.io/zone": ZONES[1]}, csi=False),
])
def test_every_way_a_volume_names_its_zone_is_the_zone(volume):
    found = storage(claim("data", volume="pv-1"), volume).of_pod(with_claims("db-0", "data"))
    assert found.terms == (zone_in(ZONES[1]),)
    assert found.attachments == {(EBS, "default/data")}  # in-tree EBS counts as the CSI driver


def test_a_zone_label_of_several_zones_allows_any():
    volume = ebs_volume("pv-1", zone=None, labels={names.ZONE_LABEL: "__".join(ZONES)})
    assert storage(claim("data", volume="pv-1"), volume).of_pod(with_claims("db-0", "data")).terms == \
        (zone_in(*ZONES),)


def test_an_unbound_claim_waiting_for_its_consumer_goes_where_its_class_allows():
    found = storage(claim("data"), storage_class(zones=[ZONES[0]], key="topology.ebs.csi.aws.com/zone"),
                    ).of_pod(with_claims("db-0", "data"))
    assert found.problem is None and found.terms == (zone_in(ZONES[0]),)
    assert found.attachments == {(EBS, "default/data")}
    anywhere = storage(claim("data"), storage_class(provisioner="kubernetes.io/aws-ebs")).of_pod(
        with_claims("db-0", "data"))
    assert anywhere.terms == () and anywhere.attachments == {(EBS, "default/data")}


def test_volumes_of_one_pod_combine_and_may_leave_no_zone():
    objects = (claim("a", volume="pv-a"), ebs_volume("pv-a", ZONES[0]), claim("b", volume="pv-b"),
               ebs_volume("pv-b", ZONES[1]), claim("c"), storage_class(zones=list(ZONES)))
    both = storage(*objects).of_pod(with_claims("db-0", "a", "c"))
    assert both.terms == (zone_in(ZONES[0]),) and len(both.attachments) == 2
    apart = storage(*objects).of_pod(with_claims("db-0", "a", "b"))
    assert apart.problem is not None and "no Node can meet the topologies of all its volumes" in apart.problem


@pytest.mark.parametrize("objects, pod, problem", [
    ((), with_claims("db-0", "data"), "PersistentVolumeClaim data does not exist"),
    ((), with_claims("db-0", ephemeral=("scratch",)), "PersistentVolumeClaim db-0-scratch does not exist yet"),
    ((claim("db-0-scratch", owner="uid-someone-else"), storage_class()), with_claims("db-0", ephemeral=("scratch",)),
     "was not made for this pod"),
    ((claim("data", deletionTimestamp="2026-11-27T12:00:00Z"), storage_class()), with_claims("db-0", "data"),
     "is being deleted"),
    ((claim("data", volume="pv-gone"),), with_claims("db-0", "data"), "names PersistentVolume pv-gone, which does not"),
    ((claim("data"), storage_class(mode="Immediate")), with_claims("db-0", "data"), "binds Immediately"),
    ((claim("data"),), with_claims("db-0", "data"), "StorageClass gp3 of PersistentVolumeClaim data does not exist"),
    ((claim("data", storage_class=None),), with_claims("db-0", "data"), "names no StorageClass"),
    ((claim("data", storage_class=""),), with_claims("db-0", "data"), "names no StorageClass"),
])
def test_what_kube_scheduler_waits_for_is_the_pods_problem(objects, pod, problem):
    found = storage(*objects).of_pod(pod)
    assert found.problem is not None and problem in found.problem, found.problem
    assert found.problem.startswith("volume ")


def test_an_ephemeral_volumes_own_claim_is_read_like_any():
    pod = with_claims("db-0", ephemeral=("scratch",))
    found = storage(claim("db-0-scratch", owner=pod["metadata"]["uid"]), storage_class(zones=[ZONES[1]])).of_pod(pod)
    assert found.problem is None and found.terms == (zone_in(ZONES[1]),)
    assert found.attachments == {(EBS, "default/db-0-scratch")}


def test_a_pod_without_claims_asks_nothing():
    assert storage().of_pod(raw_pod("web-0", volumes=[{"name": "tmp", "emptyDir": {}}])) is volumes.NONE
    assert not volumes.claimed([raw_pod("web-0")])
    assert volumes.claimed([raw_pod("web-0"), with_claims("db-0", "data")])
    running = with_claims("db-0", "data")
    running["status"]["phase"] = "Running"
    assert not volumes.claimed([running]), "only a pod provisioning may place makes a round read volumes"


@pytest.mark.parametrize("garbage", [
    {"claims": "x", "volumes": [None, 3], "storageClasses": [{"metadata": "x"}], "csiNodes": [{"spec": "x"}]},
    {"claims": [claim("data", volume="pv-1")], "volumes": [{"metadata": {"name": "pv-1"}, "spec": {
        "nodeAffinity": {"required": {"nodeSelectorTerms": "x"}}}}]},
    {"claims": [claim("data", volume="pv-1")], "volumes": [{"metadata": {"name": "pv-1"}, "spec": {
        "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Gt",
                                                                                   "values": ["x"]}]}]}}}}]},
    {"claims": [claim("data")], "storageClasses": [{"metadata": {"name": "gp3"}, "volumeBindingMode":
                                                    "WaitForFirstConsumer", "allowedTopologies": [{"x": 1}]}]},
])
def test_garbage_never_raises(garbage):
    found = volumes.Storage.of(garbage).of_pod(with_claims("db-0", "data"))
    assert isinstance(found, volumes.PodVolumes)
    assert found.problem is not None


def test_a_bound_pods_volumes_and_a_nodes_limits():
    objects = (claim("data", volume="pv-1"), ebs_volume("pv-1"), claim("cache"),
               storage_class(provisioner="efs.csi.aws.com"), claim("gone", volume="pv-gone", storage_class=None))
    csi_node = {"metadata": {"name": "node-1"}, "spec": {"drivers": [
        {"name": EBS, "allocatable": {"count": 25}}, {"name": "efs.csi.aws.com"}]}}
    found = storage(*objects, csi_nodes=(csi_node,))
    assert found.attached(with_claims("db-0", "data", "cache", "gone", "missing")) == {
        (EBS, "default/data"), ("efs.csi.aws.com", "default/cache")}
    by_type = {EBS: 26, "efs.csi.aws.com": 10}
    assert found.limits("node-1", by_type) == {EBS: 25}, "a driver the CSINode lists without a count has no limit"
    assert found.limits("node-2", by_type) == by_type, "before its CSINode reports, the instance type's figure"


def test_over_limit_counts_each_volume_once():
    attached = frozenset({(EBS, "a/1"), (EBS, "a/2"), ("efs.csi.aws.com", "a/3")})
    assert volumes.over_limit(attached, frozenset({(EBS, "a/2")}), {EBS: 2}) is None
    assert volumes.over_limit(attached, frozenset({(EBS, "a/4")}), {EBS: 2}) == (EBS, 2)
    assert volumes.over_limit(attached, frozenset({("efs.csi.aws.com", "a/4")}), {EBS: 2}) is None


@pytest.mark.parametrize("facts, limit", [
    ({"hypervisor": "nitro", "ebsAttachments": 27}, 26),  # shared with the network interfaces
    ({"hypervisor": "nitro", "ebsAttachments": 32}, 31),  # dedicated
    ({"hypervisor": "xen", "ebsAttachments": 40}, 38),  # the driver's 39 for Xen, less the root volume
    ({}, 26),  # unknown: the driver's default
    ({"ebsAttachments": True}, 26),
])
def test_an_instance_types_ebs_attach_limit_as_the_driver_computes_it(facts, limit):
    assert capacity.ebs_volume_limit(facts) == limit
