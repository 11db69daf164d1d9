"""Disruption through the real control plane: repair of a fenced Machine, drift within a budget, a spot warning.

Every test watches the objects as the API server has them, sampling a few
times a second, and asserts the order of what happened (the replacement
before the old Machine goes, recovery before termination, never more
Machines disrupting than the budget), never how long it took: the timings
are bench/disruption.py's.
"""
from __future__ import annotations

import json
import re
import time

import pytest
import requests

from devcluster import failover
from devcluster.api import wait_for
from devcluster.pools import (POOLS, condition_status, initialized_machines, live_machines, pool_instances,
                              pool_machines, pool_manifest, pool_subnet)
from hooks.fencing import names as fencing
from hooks.machines import names, signals
from tests.e2e.conftest import unique
from tests.e2e.test_machines import pools  # noqa: F401 - a fixture
from tests.e2e.test_interruptions import interruption_queue, send_spot_warning  # noqa: F401 - a fixture

pytestmark = pytest.mark.e2e

REQUESTS = "/apis/nodewarden.io/v1alpha1/namespaces/nodewarden-system/fencingrequests"


def _reason(obj: dict) -> str | None:
    return next((c.get("reason") for c in (obj.get("status") or {}).get("conditions") or []
                 if c["type"] == names.DISRUPTED and c["status"] == "True"), None)


def _metric(cluster, name: str, **labels) -> float:
    text = requests.get(f"{cluster.hook_server.metrics_url}/metrics", timeout=10).text
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_a_fenced_machine_is_replaced_at_once_and_terminated_after_recovery(api, cloud, cluster, pools):
    name = unique("repair")
    api.create(POOLS, pool_manifest(name, pool_subnet(cloud), 2))
    pools.append(name)
    machines = initialized_machines(api, name, 2)
    policy = unique("rpol")
    api.create(failover.POLICIES, failover.policy_manifest(policy, "", duration="5s", max_unhealthy=1,
                                                           selector={"e2e-pool": name}))
    try:
        victim = machines[0]
        vname, node = victim["metadata"]["name"], victim["status"]["nodeName"]
        originals = {m["metadata"]["name"] for m in machines}
        repaired_before = _metric(cluster, "nodewarden_machines_disrupted_total", nodepool=name, reason="Repair")
        failover.kill(api, [node])
        seen: dict[str, float] = {}
        reasons: set = set()
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and "victim_gone" not in seen:
            stamp = time.monotonic()
            fence = next((r for r in api.get(REQUESTS)["items"] if r["spec"]["nodeRef"]["name"] == node), None)
            if fence is not None:
                phase = (fence.get("status") or {}).get("phase")
                if condition_status(fence, fencing.FENCING_SUCCEEDED) == "True":
                    seen.setdefault("fenced", stamp)
                if condition_status(fence, fencing.RECOVERED) == "True" or phase == "Succeeded":
                    seen.setdefault("recovered", stamp)
            listed = pool_machines(api, name)
            now_victim = next((m for m in listed if m["metadata"]["name"] == vname), None)
            if now_victim is None:
                seen.setdefault("victim_gone", stamp)
            else:
                reasons.add(_reason(now_victim))
                if now_victim["metadata"].get("deletionTimestamp"):
                    seen.setdefault("victim_deleting", stamp)
            new = [m for m in live_machines(listed) if m["metadata"]["name"] not in originals]
            if new:
                seen.setdefault("replacement", stamp)
                if any(condition_status(m, names.INITIALIZED) == "True" for m in new):
                    seen.setdefault("replacement_initialized", stamp)
            time.sleep(0.25)
        assert {"fenced", "recovered", "replacement", "victim_deleting", "victim_gone"} <= set(seen), seen
        # The replacement is made once the power-off is confirmed, not before; the Machine goes after recovery.
        assert seen["fenced"] <= seen["replacement"], seen
        assert seen["recovered"] <= seen["victim_deleting"], seen
        assert "Repair" in reasons, reasons
        wait_for(lambda: len([m for m in live_machines(pool_machines(api, name)) if condition_status(m, names.INITIALIZED) == "True"])
                 == 2, "two Machines Initialized again", timeout=90)
        instance = victim["status"]["instanceID"]
        assert pool_instances(cloud, name)[instance] == "terminated"
        assert api.get_or_none(f"/api/v1/nodes/{node}") is None
        # Once per hook process at most: a pool sync retried in the other process may count the start again.
        assert repaired_before + 1 <= _metric(cluster, "nodewarden_machines_disrupted_total", nodepool=name,
                                              reason="Repair") <= repaired_before + 2
    finally:
        api.delete(f"{failover.POLICIES}/{policy}")


def test_drift_is_replaced_surge_first_and_never_beyond_the_budget(api, cloud, pools):
    name = unique("drift")
    pool = pool_manifest(name, pool_subnet(cloud), 3)
    pool["spec"]["disruption"] = {"budgets": [{"nodes": "1"}]}
    api.create(POOLS, pool)
    pools.append(name)
    # By uid: a replacement may take the name of an original Machine already gone (the pool's free slot).
    originals = {m["metadata"]["uid"]: m["metadata"]["name"] for m in initialized_machines(api, name, 3)}
    api.patch(f"{POOLS}/{name}", {"spec": {"template": {"metadata": {"labels": {"e2e-drift": "v2"}}}}})
    deleting_at: dict[str, float] = {}
    ready_at: dict[str, float] = {}
    replaced_by: dict[str, str] = {}
    leaving_for: dict[str, str | None] = {}  # the replacement a Machine's record named when it began to go
    made_for: dict[str, str] = {}  # what each new Machine's nodewarden.io/replaces names, as the API server has it
    history: list = []
    most_disrupting = 0
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        stamp = time.monotonic()
        listed = pool_machines(api, name)
        pool = api.get(f"{POOLS}/{name}")
        for record in (pool.get("status") or {}).get("disruptions") or []:
            if record.get("replacement"):
                replaced_by[record["machine"]] = record["replacement"]
        going = 0
        for m in listed:
            mname, original = m["metadata"]["name"], m["metadata"]["uid"] in originals
            if original and m["metadata"].get("deletionTimestamp") and mname not in deleting_at:
                deleting_at[mname] = stamp
                leaving_for[mname] = replaced_by.get(mname)
            if not original and condition_status(m, names.INITIALIZED) == "True":
                ready_at.setdefault(mname, stamp)
            if not original and names.REPLACES in (m["metadata"].get("annotations") or {}):
                made_for[mname] = json.loads(m["metadata"]["annotations"][names.REPLACES])["uid"]
            marked = signals.of(m, signals.DISRUPTION_ANNOTATION) is not None
            if original and (m["metadata"].get("deletionTimestamp") or marked):
                going += 1
        most_disrupting = max(most_disrupting, going)
        state = ([(r["machine"], r.get("replacement"), bool(r.get("replacementReadyAt")))
                  for r in (pool.get("status") or {}).get("disruptions") or []],
                 sorted((m["metadata"]["name"], bool(m["metadata"].get("deletionTimestamp")),
                         condition_status(m, names.INITIALIZED)) for m in listed))
        if not history or history[-1][1:] != state:
            history.append((round(stamp, 1), *state))
        live = live_machines(listed)
        if len(live) == 3 and not any(m["metadata"]["uid"] in originals for m in listed) \
                and all(condition_status(m, names.INITIALIZED) == "True" for m in live):
            break
        time.sleep(0.25)
    assert set(deleting_at) >= set(originals.values()), f"every drifted Machine replaced: {deleting_at}"
    assert most_disrupting == 1, "the budget of 1 held throughout"
    for uid, old in originals.items():
        new = leaving_for[old]
        assert new in ready_at and ready_at[new] <= deleting_at[old], \
            f"{old} began to go before its replacement {new} was Initialized: {history}"
        assert made_for.get(new) == uid, f"{new}, created by Metacontroller, names the Machine it replaces"
    assert all(_reason(m) is None for m in live_machines(pool_machines(api, name)))


def test_a_spot_warning_cordons_detaches_and_replaces_within_the_notice(api, cloud, cluster, pools,
                                                                        interruption_queue):  # noqa: F811
    name = unique("spot")
    api.create(POOLS, pool_manifest(name, pool_subnet(cloud), 1, template_spec={"capacityType": "spot"}))
    pools.append(name)
    [machine] = initialized_machines(api, name, 1)
    instance = machine["status"]["instanceID"]
    described = cloud.ec2.describe_instances(InstanceIds=[instance])["Reservations"][0]["Instances"][0]
    assert described.get("InstanceLifecycle") == "spot"
    node = machine["status"]["nodeName"]
    send_spot_warning(interruption_queue, instance)
    wait_for(lambda: (api.get_or_none(f"/api/v1/nodes/{node}") or {"spec": {"unschedulable": True}})["spec"]
             .get("unschedulable"), "the Node cordoned", timeout=60)
    node_now = api.get_or_none(f"/api/v1/nodes/{node}")
    if node_now is not None:
        assert node_now["metadata"]["annotations"].get(names.DISRUPTION_REASON) == signals.SPOT_INTERRUPTION
    replacement = wait_for(lambda: next((m for m in live_machines(pool_machines(api, name))
                                         if m["metadata"]["name"] != machine["metadata"]["name"]
                                         and condition_status(m, names.INITIALIZED) == "True"), None),
                           "a replacement Initialized", timeout=90)
    assert replacement
    wait_for(lambda: pool_instances(cloud, name).get(instance) == "terminated", "the instance terminated",
             timeout=120)
    # Once per hook process at most: a pool sync retried in the other process may count the start again.
    assert 1 <= _metric(cluster, "nodewarden_machines_disrupted_total", nodepool=name, reason="SpotInterruption") <= 2
    assert interruption_queue.on_queue() == 0, "the message was deleted once recorded"
