"""`make up`'s demo: three Nodes whose instances sit in a target group and a
classic ELB, and a NodePool of two Machines whose instances the kubelet
stand-in (devcluster/kubelet.py) registers as Nodes.
"""
from __future__ import annotations

import json
import os

from hooks import machine_names

from . import fleet
from .api import AdminApi
from .cluster import CLUSTER_NAME, Cluster


TARGET_GROUP = "demo-nodes"
CLASSIC_ELB = "demo-classic"
NODES = ("demo-node-1", "demo-node-2", "demo-node-3")
# What the hook server needs to know about the demo before it starts: nothing,
# its target group and classic ELB are found by their cluster tags.
HOOK_ENV: dict[str, str] = {}
STATE = "demo.json"
POOL = "demo-pool"
NODEPOOLS = f"/apis/{machine_names.API_VERSION}/nodepools"
# The demo zone's default subnet carries it; the pool's subnetSelector picks it.
SUBNET_TAG = ("nodewarden.io/subnet", "demo-pool")


def create(cluster: Cluster) -> fleet.Fleet:
    aws = fleet.Aws(cluster.aws_env())
    fleet.create_classic_elb(aws, CLASSIC_ELB, CLUSTER_NAME)
    demo = fleet.create_fleet(aws, count=len(NODES), target_group=TARGET_GROUP,
                              classic_elb=CLASSIC_ELB, cluster_name=CLUSTER_NAME)
    api = AdminApi(cluster.kubeconfig)
    for name, instance_id in zip(NODES, demo.instance_ids):
        api.create("/api/v1/nodes", fleet.node_manifest(name, instance_id))
    pool = create_pool(aws, api)
    (cluster.layout.workdir / STATE).write_text(json.dumps({
        "target_group_arn": demo.target_group_arn,
        "classic_elb": demo.classic_elb,
        "nodes": dict(zip(NODES, demo.instance_ids)),
        "nodepool": pool,
    }, indent=2))
    return demo


def pool_manifest() -> dict:
    key, value = SUBNET_TAG
    return {
        "apiVersion": machine_names.API_VERSION,
        "kind": machine_names.NODEPOOL_KIND,
        "metadata": {"name": POOL},
        "spec": {
            "replicas": 2,
            "registrationTTL": "5m",
            "drainTimeout": "2m",
            "template": {
                # userData left out: the Machines render the default template,
                # whose kubelet flags the stand-in reads.
                # Not in the nodewarden.io/ domain: the CRD keeps that for nodewarden itself.
                "metadata": {"labels": {"example.com/demo": "pool"}},
                "spec": {
                    "instanceTypes": ["m5.large", "t3.large"],
                    "subnetSelector": {key: value},
                    "imageId": fleet.IMAGE_ID,
                },
            },
        },
    }


def create_pool(aws: fleet.Aws, api: AdminApi) -> str:
    """The demo NodePool and the subnet it selects."""
    subnets = aws.ec2.describe_subnets(Filters=[{"Name": "availability-zone", "Values": [fleet.ZONE]},
                                                {"Name": "default-for-az", "Values": ["true"]}])["Subnets"]
    key, value = SUBNET_TAG
    aws.ec2.create_tags(Resources=[subnets[0]["SubnetId"]], Tags=[{"Key": key, "Value": value}])
    api.create(NODEPOOLS, pool_manifest())
    return POOL


def show_targets(workdir, aws_env) -> str:
    """Who is in the demo's load balancers right now, one line per load balancer."""
    state = json.loads((workdir / STATE).read_text())
    aws = fleet.Aws(aws_env)
    by_instance = {v: k for k, v in state["nodes"].items()}
    tg = sorted(f"{by_instance.get(i, i)}({i}):{p}" for i, p in fleet.targets(aws, state["target_group_arn"]))
    clb = sorted(f"{by_instance.get(i, i)}({i})" for i in fleet.elb_instances(aws, state["classic_elb"]))
    return (f"target group {TARGET_GROUP}: {', '.join(tg) or '(empty)'}\n"
            f"classic ELB  {CLASSIC_ELB}: {', '.join(clb) or '(empty)'}")


def hints(cluster: Cluster, *, kubectl: str, kubeconfig: str) -> str:
    k = f"{kubectl} --kubeconfig {kubeconfig}"
    python = os.path.relpath(cluster.layout.repo / ".venv" / "bin" / "python")
    text = f"""Demo: nodes {', '.join(NODES)} are EC2 instances (in moto) behind target group
{TARGET_GROUP} and classic ELB {CLASSIC_ELB}. Try:

  {python} -m devcluster targets                 # who the load balancers hold
  {k} cordon {NODES[0]}
  {python} -m devcluster targets                 # {NODES[0]} is gone from both
  {k} get node {NODES[0]} -o yaml   # exclude label, annotations, NodeBeingDetached
  {k} get attachments -A
  {k} uncordon {NODES[0]}           # and it is back
"""
    return text + f"""
NodePool {POOL} keeps 2 Machines; each launches an instance whose Node the
kubelet stand-in registers (log: {os.path.relpath(cluster.layout.logs)}/kubelet-standin.log):

  {k} get nodepools,machines,nodes
  {k} get machines -w               # in another shell, while you scale
  {k} scale nodepool {POOL} --replicas=3
  {k} patch nodepool {POOL} --type merge -p '{{"spec":{{"replicas":1}}}}'
  {k} delete machine <name>         # cordon, drain, terminate; the pool makes another
"""
