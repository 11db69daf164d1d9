"""Nodes an owner holds, on the local stack: what fencing's owner replacement acts on.

Each maker launches what the owner would (a moto instance tagged for the
cluster, or an Auto Scaling group's own instance), writes the owner's
objects as its controller would leave them once the node registered, and
creates the Node kwok keeps Ready:

- :func:`nodeclaim_node`: a Karpenter NodeClaim (karpenter.sh/v1) with
  Karpenter's termination finalizer, ``status.providerID`` and
  ``status.nodeName`` written through the status subresource, and its Node
  labelled ``karpenter.sh/nodepool`` and owned by the NodeClaim, as
  Karpenter's registration leaves them;
- :func:`asg_nodes`: a launch template and an EC2 Auto Scaling group in moto
  launching the instances (moto tags each ``aws:autoscaling:groupName``, as
  EC2 Auto Scaling does, and propagates the cluster tag);
- :func:`capi_machine_node`: a Cluster API MachineSet and a Machine it
  controls (cluster.x-k8s.io/v1beta2, ``spec.providerID``,
  ``status.nodeRef``), and the Node carrying the annotations Cluster API's
  Machine controller writes (``cluster.x-k8s.io/machine`` and the others);
- :func:`unattributed_node`: an instance no owner holds.

Karpenter's and Cluster API's controllers do not run here: nothing acts on a
replacement request, and the readers (:func:`nodeclaim`, :func:`group_health`,
:func:`capi_machine`) return what the owner's API recorded. The keys are
written as each project writes them, not taken from hooks/owner_names.py,
so a wrong name there fails the tests. Karpenter's and Cluster API's CRDs
(manifests.UPSTREAM_CRDS) are installed by :func:`install_crds` and removed by
:func:`remove_crds`: their NodePool and Machine share plural names with
nodewarden's (docs/local-stack.md).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from botocore.exceptions import ClientError

from . import failover, fleet, manifests
from .api import AdminApi, ApiError, wait_for
from .cluster import CLUSTER_NAME, Cluster

OWNER_CRDS = (manifests.KARPENTER_CRDS, manifests.CAPI_CRDS)
NODECLAIMS = "/apis/karpenter.sh/v1/nodeclaims"
CAPI_API_VERSION = "cluster.x-k8s.io/v1beta2"
# What each owner writes (Karpenter's pkg/apis/v1, Cluster API's api/core/v1beta2, EC2 Auto Scaling).
NODEPOOL_LABEL = "karpenter.sh/nodepool"
KARPENTER_FINALIZER = "karpenter.sh/termination"
ASG_NAME_TAG = "aws:autoscaling:groupName"
CAPI_CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"
CAPI_SET_NAME_LABEL = "cluster.x-k8s.io/set-name"
CAPI_DEPLOYMENT_NAME_LABEL = "cluster.x-k8s.io/deployment-name"
CAPI_MACHINE_ANNOTATION = "cluster.x-k8s.io/machine"
CAPI_CLUSTER_NAMESPACE_ANNOTATION = "cluster.x-k8s.io/cluster-namespace"
CAPI_CLUSTER_NAME_ANNOTATION = "cluster.x-k8s.io/cluster-name"
CAPI_OWNER_KIND_ANNOTATION = "cluster.x-k8s.io/owner-kind"
CAPI_OWNER_NAME_ANNOTATION = "cluster.x-k8s.io/owner-name"
# The workload cluster a Machine belongs to (no Cluster object is made: nothing here reads one).
CAPI_CLUSTER = "workload"
INSTANCE_TYPE = "t3.micro"


@dataclass
class OwnedNode:
    """A Node, its instance and who holds the instance (``kind`` "" and no owner: unattributed)."""

    kind: str  # "NodeClaim", "AutoScalingGroup", "ClusterAPIMachine" or ""
    node: str
    instance_id: str
    owner: str = ""  # the NodeClaim's, the group's or the Machine's name
    namespace: str = ""  # the Machine's
    uid: str = ""  # the NodeClaim's or the Machine's


def install_crds(cluster: Cluster) -> None:
    """Karpenter's and Cluster API's CRDs, Established when this returns."""
    crds = manifests.upstream_crds(cluster.layout, *OWNER_CRDS)
    cluster.kubectl("apply", "--server-side", "--field-manager=devcluster", "-f", "-", input=manifests.to_yaml(crds))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                    *[f"crd/{c['metadata']['name']}" for c in crds])


def remove_crds(cluster: Cluster) -> None:
    """The CRDs :func:`install_crds` made, and every object of theirs, gone when this returns. Objects still
    held by Karpenter's finalizer are let go first: no Karpenter runs to take it off."""
    api = AdminApi(cluster.kubeconfig)

    def listed() -> tuple[list[dict]] | None:
        try:
            return (api.get(NODECLAIMS)["items"],)
        except ApiError as exc:
            if exc.status == 404:  # the CRD is not there
                return ([],)
            if exc.status == 429:  # "storage is (re)initializing": a CRD just made, not yet read from
                return None
            raise
    (claims,) = wait_for(listed, "the NodeClaims listed", timeout=30, interval=0.5)
    for claim in claims:
        release_nodeclaim(api, claim["metadata"]["name"])
    names = [f"crd/{name}" for crds in OWNER_CRDS for name in crds.files]
    cluster.kubectl("delete", "--ignore-not-found", "--wait=true", "--timeout=60s", *names)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _instance(cloud: fleet.Aws, instance_id: str) -> dict:
    return cloud.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]


def _node(api: AdminApi, name: str, instance_id: str, zone: str, labels: dict | None = None,
          annotations: dict | None = None, owners: list[dict] | None = None) -> None:
    manifest = fleet.node_manifest(name, instance_id, labels)
    manifest["metadata"]["labels"]["topology.kubernetes.io/zone"] = zone
    manifest["spec"]["providerID"] = f"aws:///{zone}/{instance_id}"
    if annotations:
        manifest["metadata"]["annotations"] = annotations
    if owners:
        manifest["metadata"]["ownerReferences"] = owners
    api.create("/api/v1/nodes", manifest)


def policy(name: str, scenario: str, duration: str = "2s", max_unhealthy=1, replacement: dict | None = None) -> dict:
    """A NodeFencingPolicy over the scenario's Nodes (failover.policy_manifest: action Off, recovery
    OutOfServiceTaint) with ``spec.replacement``."""
    manifest = failover.policy_manifest(name, scenario, duration=duration, max_unhealthy=max_unhealthy)
    if replacement is not None:
        manifest["spec"]["replacement"] = replacement
    return manifest


def wait_ready(api: AdminApi, nodes: list[OwnedNode]) -> None:
    """Until kwok has every Node Ready and the node lifecycle controller has seen it so."""
    for owned in nodes:
        failover.wait_schedulable(api, owned.node, timeout=120)


def nodeclaim_node(api: AdminApi, cloud: fleet.Aws, name: str, pool: str,
                   labels: dict | None = None) -> OwnedNode:
    """A NodeClaim ``name`` of the Karpenter NodePool ``pool`` and its Node, registered."""
    (instance_id,) = fleet.launch_instances(cloud, 1)
    zone = _instance(cloud, instance_id)["Placement"]["AvailabilityZone"]
    node = f"{name}-node"
    claim_labels = {NODEPOOL_LABEL: pool, "karpenter.sh/capacity-type": "on-demand",
                    "node.kubernetes.io/instance-type": INSTANCE_TYPE}
    claim = api.create(NODECLAIMS, {
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": name, "labels": claim_labels, "finalizers": [KARPENTER_FINALIZER]},
        "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                 "requirements": [{"key": NODEPOOL_LABEL, "operator": "In", "values": [pool]},
                                  {"key": "node.kubernetes.io/instance-type", "operator": "In",
                                   "values": [INSTANCE_TYPE]}]}})
    now = _now()
    api.patch(f"{NODECLAIMS}/{name}/status", {"status": {
        "providerID": f"aws:///{zone}/{instance_id}", "nodeName": node, "imageID": fleet.IMAGE_ID,
        "conditions": [{"type": t, "status": "True", "reason": t, "message": "", "lastTransitionTime": now}
                       for t in ("Launched", "Registered", "Initialized", "Ready")]}})
    uid = claim["metadata"]["uid"]
    registered = {"karpenter.sh/registered": "true", "karpenter.sh/initialized": "true"}
    _node(api, node, instance_id, zone, {**claim_labels, **registered, **(labels or {})},
          owners=[{"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "name": name, "uid": uid,
                   "blockOwnerDeletion": True}])
    return OwnedNode("NodeClaim", node, instance_id, owner=name, uid=uid)


def asg_nodes(api: AdminApi, cloud: fleet.Aws, group: str, count: int = 1,
              labels: dict | None = None) -> list[OwnedNode]:
    """An Auto Scaling group ``group`` of ``count`` instances (its minimum and desired size) from a launch
    template of its own, and a Node for each of its instances."""
    cloud.ec2.create_launch_template(LaunchTemplateName=group, LaunchTemplateData={
        "ImageId": fleet.IMAGE_ID, "InstanceType": INSTANCE_TYPE})
    cloud.autoscaling.create_auto_scaling_group(
        AutoScalingGroupName=group, LaunchTemplate={"LaunchTemplateName": group, "Version": "$Latest"},
        MinSize=count, MaxSize=count + 1, DesiredCapacity=count, AvailabilityZones=[fleet.ZONE],
        HealthCheckType="EC2",
        Tags=[{"Key": t["Key"], "Value": t["Value"], "PropagateAtLaunch": True, "ResourceId": group,
               "ResourceType": "auto-scaling-group"} for t in fleet.cluster_tag(CLUSTER_NAME)])
    described = cloud.autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[group])
    instances = [i["InstanceId"] for i in described["AutoScalingGroups"][0]["Instances"]]
    if len(instances) != count:
        raise RuntimeError(f"Auto Scaling group {group} launched {len(instances)} instances, not {count}")
    owned = []
    for index, instance_id in enumerate(instances):
        node = f"{group}-{index}"
        _node(api, node, instance_id, _instance(cloud, instance_id)["Placement"]["AvailabilityZone"], labels)
        owned.append(OwnedNode("AutoScalingGroup", node, instance_id, owner=group))
    return owned


def capi_machine_node(api: AdminApi, cloud: fleet.Aws, namespace: str, name: str,
                      labels: dict | None = None) -> OwnedNode:
    """A MachineSet ``name``-set (of the MachineDeployment ``name``-deployment, named by label only), the
    Machine ``name`` it controls, running, and its Node."""
    (instance_id,) = fleet.launch_instances(cloud, 1)
    zone = _instance(cloud, instance_id)["Placement"]["AvailabilityZone"]
    machine_set, deployment, node = f"{name}-set", f"{name}-deployment", f"{name}-node"
    machine_labels = {CAPI_CLUSTER_NAME_LABEL: CAPI_CLUSTER, CAPI_SET_NAME_LABEL: machine_set,
                      CAPI_DEPLOYMENT_NAME_LABEL: deployment}
    machine_spec = {"clusterName": CAPI_CLUSTER, "bootstrap": {"dataSecretName": f"{machine_set}-bootstrap"},
                    "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                          "kind": "AWSMachineTemplate", "name": machine_set}}
    base = f"/apis/cluster.x-k8s.io/v1beta2/namespaces/{namespace}"
    owner = api.create(f"{base}/machinesets", {
        "apiVersion": CAPI_API_VERSION, "kind": "MachineSet",
        "metadata": {"name": machine_set, "labels": {CAPI_CLUSTER_NAME_LABEL: CAPI_CLUSTER,
                                                     CAPI_DEPLOYMENT_NAME_LABEL: deployment}},
        "spec": {"clusterName": CAPI_CLUSTER, "replicas": 1,
                 "selector": {"matchLabels": {CAPI_SET_NAME_LABEL: machine_set}},
                 "template": {"metadata": {"labels": machine_labels}, "spec": machine_spec}}})
    machine = api.create(f"{base}/machines", {
        "apiVersion": CAPI_API_VERSION, "kind": "Machine",
        "metadata": {"name": name, "labels": machine_labels,
                     "ownerReferences": [{"apiVersion": CAPI_API_VERSION, "kind": "MachineSet", "name": machine_set,
                                          "uid": owner["metadata"]["uid"], "controller": True,
                                          "blockOwnerDeletion": True}]},
        "spec": {**machine_spec, "providerID": f"aws:///{zone}/{instance_id}",
                 "infrastructureRef": {**machine_spec["infrastructureRef"], "kind": "AWSMachine", "name": name}}})
    now = _now()
    api.patch(f"{base}/machines/{name}/status", {"status": {
        "nodeRef": {"name": node}, "phase": "Running",
        "conditions": [{"type": t, "status": "True", "reason": t, "message": "", "lastTransitionTime": now}
                       for t in ("Available", "Ready", "NodeReady", "NodeHealthy", "InfrastructureReady",
                                 "BootstrapConfigReady")]}})
    _node(api, node, instance_id, zone, labels, annotations={
        CAPI_CLUSTER_NAME_ANNOTATION: CAPI_CLUSTER, CAPI_CLUSTER_NAMESPACE_ANNOTATION: namespace,
        CAPI_MACHINE_ANNOTATION: name, CAPI_OWNER_KIND_ANNOTATION: "MachineSet",
        CAPI_OWNER_NAME_ANNOTATION: machine_set})
    return OwnedNode("ClusterAPIMachine", node, instance_id, owner=name, namespace=namespace,
                     uid=machine["metadata"]["uid"])


def unattributed_node(api: AdminApi, cloud: fleet.Aws, name: str, labels: dict | None = None) -> OwnedNode:
    """An instance tagged for the cluster that no owner holds, and its Node."""
    (instance_id,) = fleet.launch_instances(cloud, 1)
    node = f"{name}-node"
    _node(api, node, instance_id, _instance(cloud, instance_id)["Placement"]["AvailabilityZone"], labels)
    return OwnedNode("", node, instance_id)


# -- what the owners recorded ------------------------------------------------------------------

def nodeclaim(api: AdminApi, name: str) -> dict | None:
    return api.get_or_none(f"{NODECLAIMS}/{name}")


def group_health(cloud: fleet.Aws, group: str) -> dict[str, str]:
    """Instance id -> HealthStatus of every instance the group holds ("Healthy" or "Unhealthy")."""
    described = cloud.autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[group])["AutoScalingGroups"]
    return {i["InstanceId"]: i["HealthStatus"] for g in described for i in g["Instances"]}


def capi_machine(api: AdminApi, namespace: str, name: str) -> dict | None:
    return api.get_or_none(f"/apis/cluster.x-k8s.io/v1beta2/namespaces/{namespace}/machines/{name}")


def condition(obj: dict | None, ctype: str) -> dict:
    """The ``ctype`` condition in ``status.conditions`` ({} when absent)."""
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c.get("type") == ctype),
                {})


def instance_state(cloud: fleet.Aws, instance_id: str) -> str:
    return _instance(cloud, instance_id)["State"]["Name"]


# -- cleanup ----------------------------------------------------------------------------------

def release_nodeclaim(api: AdminApi, name: str) -> None:
    """Take Karpenter's finalizer off (what Karpenter does once the instance is gone), so a deleted NodeClaim
    goes."""
    try:
        api.patch(f"{NODECLAIMS}/{name}", {"metadata": {"finalizers": None}})
    except ApiError as exc:
        if exc.status != 404:
            raise


def delete(api: AdminApi, cloud: fleet.Aws, owned: OwnedNode) -> None:
    """The Node, the owner's objects and the instances (a group with its instances)."""
    api.delete(f"/api/v1/nodes/{owned.node}")
    if owned.kind == "NodeClaim":
        release_nodeclaim(api, owned.owner)
        api.delete(f"{NODECLAIMS}/{owned.owner}")
    elif owned.kind == "ClusterAPIMachine":
        base = f"/apis/cluster.x-k8s.io/v1beta2/namespaces/{owned.namespace}"
        api.delete(f"{base}/machines/{owned.owner}")
        api.delete(f"{base}/machinesets/{owned.owner}-set")
    if owned.kind == "AutoScalingGroup":
        try:
            cloud.autoscaling.delete_auto_scaling_group(AutoScalingGroupName=owned.owner, ForceDelete=True)
            cloud.ec2.delete_launch_template(LaunchTemplateName=owned.owner)
        except ClientError:
            pass  # deleted with another Node of the group
    else:
        cloud.ec2.terminate_instances(InstanceIds=[owned.instance_id])
