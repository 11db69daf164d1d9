"""The storm guard over 200 Nodes of one policy, on the real local control plane.

The policy's count relates only the UnhealthyNode records node-fencing keeps
of unhealthy Nodes (well under 1 KB each), and reads the total from a
compact list, so its sync requests stay small however many healthy Nodes it
selects, and small still with 90 of them unhealthy; and a partition (many
Nodes NotReady at once) fences none of them, then fencing resumes for the
Nodes still dead once the rest come back.

Nodes are API objects shaped like a kubelet's (40 images, capacity,
addresses: about 13 KB each), kept Ready by kwok; a node dies by leaving
kwok's hands, so the node lifecycle controller turns it Unknown as it would a
silent kubelet. A NoSchedule taint of their own keeps other tests' pods off.
"""
from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from bench.hook_throughput import realistic
from devcluster import failover, fleet, kwok
from devcluster.api import STRATEGIC, wait_for

from tests.e2e.conftest import unique

pytestmark = pytest.mark.e2e

SIZE = 200
FIRST = 10  # unhealthy within the limit: fenced
PARTITION = 80  # 40 % of 200 at once: more than maxUnhealthy allows
SURVIVORS = 5  # of the partition, still dead once it heals
MAX_UNHEALTHY = "20%"  # 40 of 200
# Above the spread of a partition's Unknown transitions (one Lease renewal interval
# plus one node monitor period, 10 s here), so no partitioned node falls due before
# the count has seen the partition.
DURATION = "30s"
TAINT = {"key": "nodewarden.io/e2e-storm", "effect": "NoSchedule"}
LIMIT_BYTES = 262144  # the policy sync request stays under 256 KB


def _parallel(fn, items) -> list:
    with ThreadPoolExecutor(16) as pool:
        return list(pool.map(fn, items))


class Pool:
    """SIZE Nodes backed by moto instances, one policy selecting all of them."""

    def __init__(self, api, cloud):
        self.api, self.cloud = api, cloud
        self.scenario = unique("storm")
        self.instances = dict(zip([f"{self.scenario}-{i:03d}" for i in range(SIZE)],
                                  fleet.launch_instances(cloud, SIZE)))
        self.names = sorted(self.instances)

    def create(self) -> None:
        _parallel(self._create, self.names)

    def _create(self, name: str) -> None:
        manifest = fleet.node_manifest(name, self.instances[name], {failover.SCENARIO_LABEL: self.scenario})
        manifest["spec"]["taints"] = [TAINT]
        self.api.create("/api/v1/nodes", manifest)
        # A kubelet's images, capacity and addresses; kwok posts the conditions.
        status = realistic({"metadata": {"name": name, "labels": {}}, "status": {"conditions": []}})["status"]
        status.pop("conditions")
        self.api.patch(f"/api/v1/nodes/{name}/status", {"status": status}, content_type=STRATEGIC)

    def wait_ready(self) -> None:
        _parallel(lambda n: kwok.wait_ready(self.api, n, timeout=120), self.names)

    def fail(self, names: list[str]) -> None:
        """Their heartbeats stop together; returns once the node lifecycle controller has them all Unknown."""
        _parallel(lambda n: kwok.release(self.api, n), names)
        _parallel(lambda n: kwok.wait_unknown(self.api, n), names)

    def heal(self, names: list[str]) -> None:
        _parallel(lambda n: kwok.manage(self.api, n), names)

    def policy(self) -> dict:
        return self.api.get(f"{failover.POLICIES}/{self.scenario}")

    def guard(self) -> str | None:
        status = self.policy().get("status") or {}
        return next((c["status"] for c in status.get("conditions") or [] if c["type"] == "StormGuard"), None)

    def requests_for(self, names) -> list[str]:
        found = self.api.get(failover.REQUESTS)["items"]
        wanted = set(names)
        return sorted(r["spec"]["nodeRef"]["name"] for r in found if r["spec"]["nodeRef"]["name"] in wanted)

    def stopped(self, names) -> list[str]:
        ids = [self.instances[n] for n in names]
        described = self.cloud.ec2.describe_instances(InstanceIds=ids)["Reservations"]
        states = {i["InstanceId"]: i["State"]["Name"] for r in described for i in r["Instances"]}
        return sorted(n for n in names if states[self.instances[n]] in ("stopped", "terminated"))

    def delete(self) -> None:
        """Everything goes, and the test waits for it: 200 Node finalizers must not slow the next test."""
        self.api.delete(f"{failover.POLICIES}/{self.scenario}")
        _parallel(lambda n: self.api.delete(f"/api/v1/nodes/{n}"), self.names)
        selector = {"labelSelector": f"{failover.SCENARIO_LABEL}={self.scenario}"}
        # A deleting node is let go within NODEWARDEN_FINALIZE_DRAIN_TIMEOUT_SECONDS (330 s) whatever happens;
        # on a quiet machine all 200 go in seconds.
        wait_for(lambda: not self.api.get("/api/v1/nodes", params=selector)["items"], "the 200 nodes gone",
                 timeout=420, interval=1)


@pytest.fixture(scope="module")
def pool(api, cloud):
    made = Pool(api, cloud)
    try:
        made.create()
        made.wait_ready()
        yield made
    finally:
        made.delete()


def _oversized_policy_syncs(metrics_url: str) -> tuple[int, int]:
    """(node-fencing-policy sync requests over LIMIT_BYTES, all of them) so far, from the hook server's metrics."""
    text = requests.get(f"{metrics_url}/metrics", timeout=10).text
    labels = 'controller="node-fencing-policy",hook="sync"'

    def value(pattern: str) -> float:
        found = re.search(pattern, text)
        return float(found.group(1)) if found else 0.0

    total = value(rf"nodewarden_hook_request_bytes_count\{{{labels}\}} (\S+)")
    within = value(rf'nodewarden_hook_request_bytes_bucket\{{{labels},le="{float(LIMIT_BYTES)}"\}} (\S+)')
    return int(total - within), int(total)


def test_a_200_node_policy_counts_small_and_a_partition_fences_nothing(api, cluster, pool):
    policy = failover.policy_manifest(pool.scenario, pool.scenario, duration=DURATION, max_unhealthy=MAX_UNHEALTHY)
    # Set-based terms too, so the API server answers the count list with the selector as we write it.
    policy["spec"]["nodeSelector"] = {"matchExpressions": [
        {"key": failover.SCENARIO_LABEL, "operator": "In", "values": [pool.scenario]},
        {"key": "node-role.kubernetes.io/control-plane", "operator": "DoesNotExist"}]}
    api.create(failover.POLICIES, policy)
    wait_for(lambda: (pool.policy().get("status") or {}).get("observedNodes") == SIZE and pool.guard() == "False",
             "the policy counted its 200 nodes", timeout=60, interval=0.5)
    oversized_before, syncs_before = _oversized_policy_syncs(cluster.hook_server.metrics_url)

    # (i) 10 unhealthy, within the limit: fencing proceeds, and the policy's requests carry only those 10.
    first = pool.names[:FIRST]
    pool.fail(first)
    wait_for(lambda: pool.stopped(first) == first, "the first 10 nodes fenced", timeout=150, interval=1)
    status = pool.policy()["status"]
    assert status["observedNodes"] == SIZE and status["unhealthyNodes"] == FIRST
    assert sorted(status["unhealthyNodeNames"]) == first
    oversized, syncs = _oversized_policy_syncs(cluster.hook_server.metrics_url)
    assert syncs > syncs_before, "the policy was synced while its nodes failed"
    assert oversized == oversized_before, f"a node-fencing-policy sync request over {LIMIT_BYTES} bytes"
    recorded = api.get("/apis/nodewarden.io/v1alpha1/unhealthynodes",
                       params={"labelSelector": f"{failover.SCENARIO_LABEL}={pool.scenario}"})
    assert sorted(r["metadata"]["name"] for r in recorded["items"]) == first, "only the unhealthy are recorded"

    # (ii) a partition: 40 % of the nodes NotReady at once. The guard holds within 10 s; nothing is fenced.
    partition = pool.names[FIRST:FIRST + PARTITION]
    pool.fail(partition)
    started = time.monotonic()  # every partitioned node is Unknown by now
    wait_for(lambda: pool.guard() == "True", "StormGuard=True", timeout=10, interval=0.2)
    print(f"StormGuard=True {time.monotonic() - started:.1f}s after the last node of the partition went Unknown")
    time.sleep(35)  # past the 30 s duration of every partitioned node
    assert pool.requests_for(partition) == [], "no FencingRequest during a storm"
    assert pool.stopped(partition) == []
    # 90 records in the requests now: 90 whole Nodes would be over 1 MB.
    assert _oversized_policy_syncs(cluster.hook_server.metrics_url)[0] == oversized_before, \
        f"a node-fencing-policy sync request over {LIMIT_BYTES} bytes during the partition"

    # (iii) the partition heals but for 5: the guard releases, and fencing resumes for those 5 alone.
    survivors, healed = partition[:SURVIVORS], partition[SURVIVORS:]
    pool.heal(healed)
    wait_for(lambda: pool.guard() == "False", "StormGuard released", timeout=60, interval=0.5)
    wait_for(lambda: pool.stopped(survivors) == survivors, "the 5 still dead fenced", timeout=90, interval=1)
    assert pool.requests_for(healed) == [] and pool.stopped(healed) == []
    events = api.get("/api/v1/namespaces/default/events")["items"]
    mine = [e["reason"] for e in events if e["involvedObject"]["name"] == pool.scenario]
    assert "StormGuardHolding" in mine and "StormGuardReleased" in mine
