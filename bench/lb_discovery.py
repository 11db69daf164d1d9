"""node-detacher discovery: one pass over every load balancer of the cluster.

    .venv/bin/python bench/lb_discovery.py [--target-groups 100] [--instances 20] [--latency 0.05]

moto in server mode holds N tagged target groups with M instances each. One
discovery pass (tagging API, then one DescribeTargetHealth per group) is timed
with reads one at a time and with the parallel reads the code uses, with an
added per-call latency standing in for AWS's (moto on loopback answers in
about a millisecond). Prints a Markdown table for docs/performance.md.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time

import boto3

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from hooks.aws import lb_discovery  # noqa: E402
from hooks.aws.clients import AwsClients  # noqa: E402
from hooks.config import load_settings  # noqa: E402

REGION = "us-east-1"


def world(endpoint: str, groups: int, instances: int) -> None:
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=endpoint)
    elbv2 = boto3.client("elbv2", region_name=REGION, endpoint_url=endpoint)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    ids = [i["InstanceId"] for i in ec2.run_instances(ImageId="ami-12c6146b", MinCount=instances,
                                                      MaxCount=instances)["Instances"]]
    for g in range(groups):
        arn = elbv2.create_target_group(Name=f"k8s-svc-{g}", Protocol="TCP", Port=80, VpcId=vpc,
                                        TargetType="instance")["TargetGroups"][0]["TargetGroupArn"]
        elbv2.add_tags(ResourceArns=[arn], Tags=[{"Key": "kubernetes.io/cluster/bench", "Value": "owned"}])
        elbv2.register_targets(TargetGroupArn=arn, Targets=[{"Id": i, "Port": 30000 + g} for i in ids])


def one_pass(parallel: int, latency: float) -> tuple[float, int, int]:
    settings = load_settings({"NODEWARDEN_CLUSTER_NAME": "bench", "AWS_REGION": REGION})
    aws = AwsClients(settings)
    calls = []

    def slow(**_):
        calls.append(1)
        time.sleep(latency)

    for service in ("resourcegroupstaggingapi", "elbv2"):
        aws.client(service, REGION).meta.events.register("before-send", slow)
    lb_discovery._PARALLEL_READS = parallel
    started = time.perf_counter()
    index = lb_discovery.build_index(aws, REGION, settings)
    return time.perf_counter() - started, len(calls), len(index.members)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--target-groups", type=int, default=100)
    parser.add_argument("--instances", type=int, default=20)
    parser.add_argument("--latency", type=float, default=0.05)
    args = parser.parse_args()
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server._server.server_address[:2]
    endpoint = f"http://{host}:{port}"
    os.environ.update({"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x"})
    try:
        world(endpoint, args.target_groups, args.instances)
        print(f"{args.target_groups} target groups x {args.instances} instances, +{args.latency * 1000:.0f} ms per call\n")
        print("| reads | AWS calls | instances indexed | seconds |")
        print("|---|---|---|---|")
        for parallel in (1, 8):
            seconds, calls, members = one_pass(parallel, args.latency)
            print(f"| {'one at a time' if parallel == 1 else f'{parallel} in parallel'} | {calls} | {members} | {seconds:.2f} |")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
