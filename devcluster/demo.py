"""`make up`'s demo: three Nodes whose instances sit in a target group and a classic ELB."""
from __future__ import annotations

import json
import os

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


def create(cluster: Cluster) -> fleet.Fleet:
    aws = fleet.Aws(cluster.aws_env())
    fleet.create_classic_elb(aws, CLASSIC_ELB, CLUSTER_NAME)
    demo = fleet.create_fleet(aws, count=len(NODES), target_group=TARGET_GROUP,
                              classic_elb=CLASSIC_ELB, cluster_name=CLUSTER_NAME)
    api = AdminApi(cluster.kubeconfig)
    for name, instance_id in zip(NODES, demo.instance_ids):
        api.create("/api/v1/nodes", fleet.node_manifest(name, instance_id))
    (cluster.layout.workdir / STATE).write_text(json.dumps({
        "target_group_arn": demo.target_group_arn,
        "classic_elb": demo.classic_elb,
        "nodes": dict(zip(NODES, demo.instance_ids)),
    }, indent=2))
    return demo


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
    return f"""Demo: nodes {', '.join(NODES)} are EC2 instances (in moto) behind target group
{TARGET_GROUP} and classic ELB {CLASSIC_ELB}. Try:

  {python} -m devcluster targets                 # who the load balancers hold
  {k} cordon {NODES[0]}
  {python} -m devcluster targets                 # {NODES[0]} is gone from both
  {k} get node {NODES[0]} -o yaml   # exclude label, annotations, NodeBeingDetached
  {k} get attachments -A
  {k} uncordon {NODES[0]}           # and it is back
"""
