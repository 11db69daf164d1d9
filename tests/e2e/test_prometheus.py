"""Monitoring end to end: the local stack's Prometheus scrapes the hook server and
Metacontroller with nodewarden's alert rules loaded; a node detaches, another is
fenced, a storm guard holds, and the series and the alert's state are read back
from Prometheus' HTTP API, as an operator's Grafana and Alertmanager would.
"""
from __future__ import annotations

import pytest
import requests

from devcluster import failover, fleet, prometheus
from devcluster.api import wait_for

pytestmark = pytest.mark.e2e


class Prom:
    def __init__(self, url: str):
        self.url = url

    def get(self, path: str, **params) -> dict:
        body = requests.get(f"{self.url}{path}", params=params, timeout=10).json()
        assert body["status"] == "success", body
        return body["data"]

    def value(self, query: str) -> float | None:
        """The sum of an instant query's samples; None while it has none."""
        result = self.get("/api/v1/query", query=query)["result"]
        return sum(float(r["value"][1]) for r in result) if result else None

    def at_least(self, query: str, minimum: float, what: str, timeout: float = 30) -> float:
        wait_for(lambda: (self.value(query) or 0) >= minimum, what, timeout=timeout, interval=1)
        return self.value(query)

    def alerts(self, name: str) -> list[dict]:
        return [a for a in self.get("/api/v1/alerts")["alerts"] if a["labels"]["alertname"] == name]


@pytest.fixture(scope="module")
def prom(cluster) -> Prom:
    return Prom(cluster.prometheus_url)


def test_prometheus_scrapes_the_hook_server_and_metacontroller_with_the_alerts_loaded(prom):
    def healthy() -> dict:
        targets = prom.get("/api/v1/targets")["activeTargets"]
        return {t["labels"]["job"]: t["health"] for t in targets}

    wait_for(lambda: healthy() == {"nodewarden": "up", "metacontroller": "up"}, "both targets up", timeout=30)
    # Metacontroller's own series, those the dashboards read: its work queues, one per controller.
    for series in prometheus.METACONTROLLER_SERIES:
        prom.at_least(f'count({series}{{job="metacontroller", name="DecoratorController-node"}})', 1,
                      f"Metacontroller's {series}")
    rules = {r["name"] for g in prom.get("/api/v1/rules", type="alert")["groups"] for r in g["rules"]}
    assert {"NodewardenNodeDetachOverdue", "NodewardenFencingRequestOverdue",
            "NodewardenFencingStormGuardHolding", "NodewardenHookErrors"} <= rules
    # The alerted series exist whether or not such an Event happened (they start at 0).
    assert prom.value('nodewarden_events_total{controller="fencing-request", reason="FencingFailed"}') is not None


def test_a_detach_shows_in_prometheus(make_world, prom):
    world = make_world(count=1)
    (name,) = world.nodes
    deregistered = 'sum(nodewarden_events_total{job="nodewarden", controller="node-detacher", reason="Deregistered"})'
    before = prom.value(deregistered) or 0
    world.cordon(name)
    wait_for(lambda: not world.in_target_group(name), "instance out of the target group", timeout=20)
    assert prom.at_least(deregistered, before + 1, "the Deregistered Event counted") >= before + 1
    assert prom.value('sum(nodewarden_actions_total{controller="node-detacher", outcome="ok"})') > 0
    assert prom.value('sum(nodewarden_aws_calls_total{service="elbv2", operation="DeregisterTargets", '
                      'outcome="ok"})') > 0
    assert prom.value('sum(nodewarden_hook_duration_seconds_count{controller="node", code="200"})') > 0


def test_a_fenced_node_shows_in_prometheus(api, cloud, prom):
    (instance_id,) = fleet.launch_instances(cloud, 1)
    name = f"prom-{instance_id[-6:]}"
    failover.create_node(api, name, instance_id)
    stops = 'sum(nodewarden_aws_calls_total{service="ec2", operation="StopInstances", outcome="ok"})'
    powered_off = 'sum(nodewarden_events_total{controller="fencing-request", reason="PoweredOff"})'
    tainted = 'sum(nodewarden_events_total{controller="fencing-request", reason="OutOfServiceTaintApplied"})'
    before = {q: prom.value(q) or 0 for q in (stops, powered_off, tainted)}
    try:
        failover.kill(api, [name])
        failover.fence_by_hand(api, name)
        prom.at_least(stops, before[stops] + 1, "the StopInstances call counted")
        prom.at_least(powered_off, before[powered_off] + 1, "the PoweredOff Event counted")
        prom.at_least(tainted, before[tainted] + 1, "the taint's Event counted")
    finally:
        api.delete(f"{failover.REQUESTS}/{name}")
        wait_for(lambda: api.get_or_none(f"{failover.REQUESTS}/{name}") is None, "request deleted", timeout=30)
        api.delete(f"/api/v1/nodes/{name}")


def test_the_storm_guard_alert_goes_pending_in_prometheus(api, cloud, prom):
    """Two of three nodes of a policy (maxUnhealthy 1) die: the guard holds, its gauge reads 1, and the
    alert is pending (it fires after 5 minutes, longer than a test waits)."""
    scenario, names, instances = failover.scenario_nodes(api, cloud, "prom-storm", 3)
    try:
        failover.kill(api, names[:2])
        api.create(failover.POLICIES, failover.policy_manifest(scenario, scenario, duration="3s", max_unhealthy=1))
        gauge = f'nodewarden_fencing_storm_guard_active{{job="nodewarden", policy="{scenario}"}}'
        prom.at_least(gauge, 1, "the storm guard gauge at 1", timeout=60)

        def pending() -> list[dict]:
            return [a for a in prom.alerts("NodewardenFencingStormGuardHolding")
                    if a["labels"].get("policy") == scenario]

        (alert,) = wait_for(pending, "NodewardenFencingStormGuardHolding pending", timeout=30, interval=1)
        assert alert["state"] == "pending"
        assert alert["labels"]["severity"] == "critical"
        assert alert["annotations"]["runbook_url"].endswith("docs/alerts.md#nodewardenfencingstormguardholding")
        assert scenario in alert["annotations"]["summary"]
        prom.at_least('sum(nodewarden_events_total{controller="node-fencing-policy", reason="StormGuardHolding"})',
                      1, "the StormGuardHolding Event counted")
    finally:
        api.delete(f"{failover.POLICIES}/{scenario}")
        for name in names:
            api.delete(f"/api/v1/nodes/{name}")


def test_every_dashboard_query_runs_on_prometheus(prom):
    """Each panel's query, with the dashboard's variables set as for the local stack, is valid PromQL
    that Prometheus answers."""
    import json
    from pathlib import Path

    variables = {"$__rate_interval": "1m", "$metacontroller_job": "metacontroller", "$job": "nodewarden"}
    folder = Path(prometheus.PROMETHEUS_RULE).parents[1] / "grafana-dashboards"
    for path in sorted(folder.glob("*.json")):
        for panel in json.loads(path.read_text())["panels"]:
            for target in panel.get("targets") or []:
                query = target["expr"]
                for name, value in variables.items():
                    query = query.replace(name, value)
                assert "$" not in query, (path.name, panel["title"], query)
                prom.get("/api/v1/query", query=query)  # asserts status "success"
