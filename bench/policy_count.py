"""node-fencing-policy's count at scale: request bytes and decide time, in three designs.

    .venv/bin/python bench/policy_count.py [--nodes 5000] [--unhealthy 10] [--repeat 20]

Builds the sync request Metacontroller sends for one NodeFencingPolicy over
--nodes selected Nodes shaped like real ones (the 13 KB Node of
bench/hook_throughput.py: labels, 40 images, capacity, managedFields), of
which --unhealthy are Ready=Unknown, in two designs:

- every selected node related (the first design): the request carries
  every Node in full, and decide judges each one;
- the unhealthy Nodes related (the second): the request carries the
  --unhealthy Nodes in full, and the total comes from the count list (a
  Table, read in gather at most once per count interval), whose size and
  parse time are measured too on the shape the API server answers (one row
  per Node: its name and eight short printed columns);
- UnhealthyNode records related (now): the request carries node-fencing's
  record of each unhealthy node (hooks/fencing/records.py) as the API server
  keeps it (uid, owner reference, Metacontroller's managedFields entry), and
  the total comes from the same count list.

Run it with --unhealthy 2000 for a partition of 40 % of 5,000.

Times are the median of --repeat runs of: JSON decode of the body (what the
hook server does first), decode and parse_request together, and decide. Prints a Markdown table
for docs/performance.md.
"""
from __future__ import annotations

import argparse
import copy
import datetime as dt
import json
import pathlib
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.hook_throughput import realistic  # noqa: E402
from hooks.config import load_settings  # noqa: E402
from hooks.contract import parse_request  # noqa: E402
from hooks.controllers import node_fencing_policy  # noqa: E402
from hooks.fencing import names, records  # noqa: E402
from hooks.fencing import policy as policies  # noqa: E402
from hooks.kube import nodes as kube_nodes  # noqa: E402
from worlds.envelope import hook_request  # noqa: E402

NOW = dt.datetime(2026, 11, 21, 12, 0, 0, tzinfo=dt.timezone.utc)
POOL = {"eks.amazonaws.com/nodegroup": "general"}
NOW_DESIGN = "UnhealthyNode records related (now)"


def _stamp(seconds_ago: float) -> str:
    return (NOW - dt.timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def node(index: int, unhealthy: bool) -> dict:
    name = f"ip-10-0-{index // 250}-{index % 250}.ec2.internal"
    ready = {"type": "Ready", "status": "Unknown" if unhealthy else "True",
             "reason": "NodeStatusUnknown" if unhealthy else "KubeletReady", "message": "x",
             "lastHeartbeatTime": _stamp(60 if unhealthy else 5), "lastTransitionTime": _stamp(20 if unhealthy else 86400)}
    labels = {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": f"us-east-1{'abc'[index % 3]}"}
    base = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": f"uid-{index}", "resourceVersion": str(1000 + index), "labels": labels},
            "spec": {"providerID": f"aws:///us-east-1a/i-{index:017x}"},
            "status": {"conditions": [ready], "nodeInfo": {"kubeletVersion": "v1.35.4"}}}
    shaped = realistic(base)
    shaped["metadata"]["labels"].update(POOL)
    return shaped


def record(node_obj: dict, policies: list) -> dict:
    """node-fencing's record of the node, with what the API server adds to an object Metacontroller created."""
    meta = node_obj["metadata"]
    made = records.build(meta["name"], meta["uid"], meta["labels"], node_obj["status"], policies)
    made["metadata"].update({
        "uid": f"rec-{meta['uid']}", "resourceVersion": meta["resourceVersion"], "generation": 1,
        "creationTimestamp": _stamp(20),
        "annotations": {"metacontroller.k8s.io/decorator-controller": "node-fencing",
                        "metacontroller.k8s.io/last-applied-configuration": json.dumps(made)},
        "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": meta["name"], "uid": meta["uid"],
                             "controller": True, "blockOwnerDeletion": True}],
        "managedFields": [{"manager": "metacontroller", "operation": "Update", "apiVersion": names.API_VERSION,
                           "time": _stamp(20), "fieldsType": "FieldsV1", "fieldsV1": {
                               "f:metadata": {"f:annotations": {".": {}, "f:metacontroller.k8s.io/decorator-controller": {},
                                                                "f:metacontroller.k8s.io/last-applied-configuration": {}},
                                              "f:labels": {".": {}, **{f"f:{k}": {} for k in made["metadata"]["labels"]}},
                                              "f:ownerReferences": {".": {}, f'k:{{"uid":"{meta["uid"]}"}}': {}}},
                               "f:spec": {".": {}, "f:conditions": {}, "f:nodeUID": {}}}}],
    })
    return made


def policy(total: int, unhealthy: int) -> dict:
    """The policy as its last sync left it: counted 10 s ago, guard open."""
    return {"apiVersion": names.API_VERSION, "kind": names.POLICY_KIND,
            "metadata": {"name": "general", "uid": "uid-policy", "generation": 1},
            "spec": {"nodeSelector": {"matchLabels": POOL}},
            "status": {"observedGeneration": 1, "countedAt": _stamp(10), "observedNodes": total,
                       "unhealthyNodes": unhealthy, "fencingNodes": 0, "fencedNodes": 0,
                       "maxUnhealthyNodes": total * 40 // 100, "notReadyNodes": 0,
                       "notReadyNodeNames": [],
                       "conditions": [{"type": "Valid", "status": "True", "reason": "Valid", "message": "x",
                                       "lastTransitionTime": _stamp(86400)},
                                      {"type": "StormGuard", "status": "False", "reason": "WithinLimit",
                                       "message": "x", "lastTransitionTime": _stamp(86400)}]}}


def table(nodes: list[dict]) -> bytes:
    """The count list as kube-apiserver answers it (as=Table, includeObject=None), one page."""
    columns = ["Name", "Status", "Roles", "Age", "Version", "Internal-IP", "External-IP", "OS-Image",
               "Kernel-Version", "Container-Runtime"]
    rows = []
    for n in nodes:
        ready = n["status"]["conditions"][-1]["status"] == "True"
        rows.append({"cells": [n["metadata"]["name"], "Ready" if ready else "NotReady", "<none>", "12d", "v1.35.4",
                               "10.0.1.23", "<none>", "Amazon Linux 2023", "6.1.112-124.190.amzn2023.x86_64",
                               "containerd://1.7.22"], "object": None})
    return json.dumps({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": "4711"},
                       "columnDefinitions": [{"name": c, "type": "string", "format": "", "description": "x",
                                              "priority": 0} for c in columns],
                       "rows": rows}).encode()


class _TableKube:
    """Answers the count list from a prepared Table body, decoding it as the client does."""

    def __init__(self, body: bytes):
        self.body = body

    def table(self, res, labels="", page_size=500):
        page = json.loads(self.body)
        columns = [c["name"] for c in page["columnDefinitions"]]
        for row in page["rows"]:
            yield dict(zip(columns, row["cells"]))


def _median_ms(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def measure(body: bytes, observed: dict, settings, repeat: int) -> dict:
    decoded = json.loads(body)
    request = parse_request(copy.deepcopy(decoded), "composite", "sync")
    plan = node_fencing_policy.decide(request, settings, NOW, observed)
    return {
        "bytes": len(body),
        "decode_ms": _median_ms(lambda: json.loads(body), repeat),
        "read_ms": _median_ms(lambda: parse_request(json.loads(body), "composite", "sync"), repeat),
        "decide_ms": _median_ms(lambda: node_fencing_policy.decide(request, settings, NOW, observed), repeat),
        "status": plan.response["status"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--unhealthy", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    settings = load_settings({"NODEWARDEN_CLUSTER_NAME": "bench"})
    nodes = [node(i, i < args.unhealthy) for i in range(args.nodes)]
    sick = nodes[:args.unhealthy]
    parent = policy(args.nodes, args.unhealthy)
    recorded = [record(n, [policies.parse(parent)]) for n in sick]
    listing = table(nodes)
    found = kube_nodes.readiness(_TableKube(listing), {"matchLabels": POOL})
    observed = {"countList": found}
    designs = {
        "every selected node related (before)": json.dumps(
            hook_request("node-fencing-policy", parent, related=nodes)).encode(),
        "the unhealthy Nodes related (second)": json.dumps(
            hook_request("node-fencing-policy", parent, related=sick)).encode(),
        NOW_DESIGN: json.dumps(
            hook_request("node-fencing-policy", parent, related=recorded)).encode(),
    }
    results = {name: measure(body, observed, settings, args.repeat) for name, body in designs.items()}
    now = results[NOW_DESIGN]
    st = now["status"]
    assert (st["observedNodes"], st["unhealthyNodes"]) == (args.nodes, args.unhealthy), st
    list_ms = _median_ms(lambda: kube_nodes.readiness(_TableKube(listing), {"matchLabels": POOL}), args.repeat)
    print(f"{args.nodes} selected Nodes ({len(json.dumps(nodes[-1])):,} bytes each), {args.unhealthy} unhealthy; "
          f"median of {args.repeat}")
    print()
    print("| design | request bytes | JSON decode ms | decode + parse_request ms | decide ms | read + decide ms |")
    print("|---|---|---|---|---|---|")
    for name, r in results.items():
        # Only the current design's decide reads what its request carries; the others' is not timed.
        decide = f"{r['decide_ms']:.2f}" if name == NOW_DESIGN else "-"
        total = f"{r['read_ms'] + r['decide_ms']:.2f}" if name == NOW_DESIGN else "-"
        print(f"| {name} | {r['bytes']:,} | {r['decode_ms']:.2f} | {r['read_ms']:.2f} | {decide} | {total} |")
    print()
    print(f"- count list (in gather, at most once per count interval): Table body "
          f"{len(listing):,} bytes, decoded and read in {list_ms:.2f} ms")


if __name__ == "__main__":
    main()
