"""Alerts, dashboards and the monitoring components (kustomize/components/).

The alert rules are checked and unit-tested with promtool (Debian's, put into
.bin/ by hack/prometheus/install.sh): every alert fires on the series meant to
fire it and stays quiet on those beside it (tests/deploy/promtool/alerts_test.yaml).
The dashboards' queries may name only metrics a running hook server exposes.
"""
from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess

import pytest
import yaml

from devcluster import prometheus
from hooks import events, metrics
from hooks.kube import event_recorder
from tests.support.hook_server import HookServer

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = ROOT / ".bin"
PROMTOOL = BIN / "promtool"
KUSTOMIZE = BIN / "kustomize"
COMPONENTS = ROOT / "kustomize" / "components"
DASHBOARDS = sorted((COMPONENTS / "grafana-dashboards").glob("*.json"))
ALERTS_TEST = ROOT / "tests" / "deploy" / "promtool" / "alerts_test.yaml"
RUNBOOKS = ROOT / "docs" / "alerts.md"

needs_promtool = pytest.mark.skipif(
    not PROMTOOL.exists() and os.environ.get("NODEWARDEN_E2E") != "required",
    reason="promtool not installed yet (make prometheus-bins)")


def _alerts() -> list[dict]:
    return [r for g in prometheus.rule_groups()["groups"] for r in g["rules"] if "alert" in r]


def _promtool_dir(tmp_path: pathlib.Path, mutate=None) -> pathlib.Path:
    """alerts_test.yaml beside the rules, with only their static runbook_url annotation."""
    groups = prometheus.rule_groups()
    for rule in (r for g in groups["groups"] for r in g["rules"]):
        rule["annotations"] = {"runbook_url": rule["annotations"]["runbook_url"]}
        if mutate:
            mutate(rule)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(groups, sort_keys=False))
    shutil.copy(ALERTS_TEST, tmp_path / "alerts_test.yaml")
    return tmp_path / "alerts_test.yaml"


def _promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(PROMTOOL), *args], capture_output=True, text=True, timeout=120)


@needs_promtool
def test_promtool_checks_the_rules_as_installed(tmp_path):
    rules = prometheus.write_rules(tmp_path / "rules.yaml")
    result = _promtool("check", "rules", str(rules))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(_alerts())} rules found" in result.stdout


@needs_promtool
def test_every_alert_fires_on_its_series_and_not_on_the_others(tmp_path):
    result = _promtool("test", "rules", str(_promtool_dir(tmp_path)))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_firing_and_a_quiet_case():
    cases: dict[str, set[bool]] = {}
    for test in yaml.safe_load(ALERTS_TEST.read_text())["tests"]:
        for case in test["alert_rule_test"]:
            cases.setdefault(case["alertname"], set()).add(bool(case["exp_alerts"]))
    assert {a["alert"]: {True, False} for a in _alerts()} == cases


@needs_promtool
def test_the_promtool_cases_fail_when_an_alert_never_fires(tmp_path):
    """The firing cases can fail: with every expression made one that never matches, each alert's case fails."""
    def never(rule):
        rule["expr"] = "vector(1) == 0"
    result = _promtool("test", "rules", str(_promtool_dir(tmp_path, never)))
    assert result.returncode != 0
    for alert in _alerts():
        assert f"alertname: {alert['alert']}," in result.stdout + result.stderr, alert["alert"]


def test_every_alert_has_a_severity_and_a_runbook_section():
    anchors = {re.sub(r"[^a-z0-9 -]", "", line[3:].strip().lower()).replace(" ", "-")
               for line in RUNBOOKS.read_text().splitlines() if line.startswith("## ")}
    for alert in _alerts():
        assert alert["labels"]["severity"] in {"critical", "warning", "info"}, alert["alert"]
        assert {"summary", "description", "runbook_url"} <= set(alert["annotations"]), alert["alert"]
        url = alert["annotations"]["runbook_url"]
        assert url.split("#")[0].endswith("/docs/alerts.md"), url
        assert url.split("#")[1] == alert["alert"].lower() and url.split("#")[1] in anchors, url


def test_alerted_event_reasons_are_reasons_the_controllers_report():
    """An alert on an Event reason nobody reports would never fire: each one is a reason in hooks/events.py,
    and its series starts at 0 (metrics.ALERTED_EVENTS) so the first one is an increase."""
    known = {v for k, v in vars(events).items() if k.isupper() and isinstance(v, str)}
    zeroed = {(c, r) for c, r, _ in metrics.ALERTED_EVENTS}
    for alert in _alerts():
        for selector in re.findall(r"nodewarden_events_total\{([^}]*)\}", alert["expr"]):
            labels = dict(re.findall(r'(\w+)=~?"([^"]*)"', selector))
            reasons = labels["reason"].split("|")
            assert set(reasons) <= known, (alert["alert"], reasons)
            assert {(labels["controller"], r) for r in reasons} <= zeroed, alert["alert"]


def test_the_recorder_counts_every_event_it_is_given():
    from worlds.fake_kube import FakeKube

    def count(reason, type_):
        return metrics.EVENTS.labels("node-detacher", reason, type_)._value.get()

    before = count(events.DETACHED, "Warning"), count(events.DETACHED, "Normal")
    recorder = event_recorder.Recorder(lambda: FakeKube(), inline=True)
    recorder.record("node-detacher", events.node_ref("n1"), events.warning(events.DETACHED, "gave up"))
    recorder.record("node-detacher", events.node_ref("n1"), events.normal(events.DETACHED, "drained"))
    assert (count(events.DETACHED, "Warning"), count(events.DETACHED, "Normal")) == (before[0] + 1, before[1] + 1)


# ---------------------------------------------------------------- dashboards
def _exposed_families(text: str) -> dict[str, str]:
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))


def _series_names(families: dict[str, str]) -> set[str]:
    names = set()
    for name, kind in families.items():
        if kind == "histogram":
            names |= {f"{name}_bucket", f"{name}_count", f"{name}_sum"}
        elif kind == "counter":
            names |= {name if name.endswith("_total") else f"{name}_total"}
        else:
            names.add(name)
    return names


@pytest.fixture(scope="module")
def exposed(tmp_path_factory) -> str:
    """/metrics of the real hook server (gunicorn), one process: every family it declares, samples or not."""
    with HookServer(tmp_path_factory.mktemp("hooks"), env={"PROMETHEUS_MULTIPROC_DIR": ""}) as server:
        import requests

        return requests.get(f"{server.metrics_url}/metrics", timeout=10).text


def _queries(dashboard: dict):
    for panel in dashboard["panels"]:
        for target in panel.get("targets") or []:
            yield panel["title"], target["expr"]
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            yield f"variable {var['name']}", var["query"]["query"]


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_every_dashboard_query_names_only_metrics_the_hook_server_exposes(path, exposed):
    """Metacontroller's work-queue series are the only others; tests/e2e/test_prometheus.py finds them
    in a running Metacontroller's scrape."""
    names = _series_names(_exposed_families(exposed))
    dashboard = json.loads(path.read_text())
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert panels and all(p.get("targets") for p in panels)
    for title, expr in _queries(dashboard):
        # Every metric is written with a selector, metric{...}: what precedes a "{" is a metric name.
        used = set(re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{", expr))
        assert used, (title, expr)
        assert len(re.findall(r"\b(?:nodewarden|workqueue)_", expr)) == len(re.findall(r"\b(?:nodewarden|workqueue)_[a-z0-9_]+\{", expr)), expr
        ours = {u for u in used if u.startswith("nodewarden_")}
        assert ours <= names, (path.name, title, sorted(ours - names))
        assert used - ours <= set(prometheus.METACONTROLLER_SERIES), (path.name, title, sorted(used - ours))


def test_the_dashboards_test_sees_what_the_server_declares(exposed):
    """The scrape above lists every metric hooks/metrics.py declares, not just those with samples."""
    families = _exposed_families(exposed)
    for name in ("nodewarden_hook_duration_seconds", "nodewarden_aws_calls_total", "nodewarden_events_total",
                 "nodewarden_fencing_storm_guard_active", "nodewarden_machine_events_total"):
        assert name in families, name


def test_the_alerted_series_exist_at_zero_on_a_fresh_server(tmp_path):
    """As in the image (multiprocess mode): before any Event, each alerted series is there at 0."""
    with HookServer(tmp_path) as server:
        import requests

        text = requests.get(f"{server.metrics_url}/metrics", timeout=10).text
    for controller, reason, type_ in metrics.ALERTED_EVENTS:
        line = f'nodewarden_events_total{{controller="{controller}",reason="{reason}",type="{type_}"}} 0.0'
        assert line in text, line
    assert 'nodewarden_events_dropped_total{why="queue full"} 0.0' in text


# ---------------------------------------------------------------- components
def _build(tmp_path: pathlib.Path, *components: str) -> list[dict]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    rel = os.path.relpath(ROOT / "kustomize", tmp_path)
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [f"{rel}/overlays/aws"], "components": [f"{rel}/components/{c}" for c in components]}))
    out = subprocess.run([str(KUSTOMIZE), "build", str(tmp_path)], capture_output=True, text=True, check=True)
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@pytest.mark.skipif(not KUSTOMIZE.exists(), reason="kustomize not built yet (make controlplane-bins)")
def test_the_monitoring_components_are_opt_in_and_point_at_the_hook_server(tmp_path):
    plain = _build(tmp_path / "plain")
    assert not {"ServiceMonitor", "PodMonitor", "PrometheusRule"} & {d["kind"] for d in plain}
    assert not any(d["kind"] == "ConfigMap" and "grafana_dashboard" in d["metadata"].get("labels", {}) for d in plain)

    objs = _build(tmp_path / "all", "service-monitor", "prometheus-rules", "grafana-dashboards")
    service = next(d for d in objs if d["kind"] == "Service")
    deploy = next(d for d in objs if d["kind"] == "Deployment")
    monitor = next(d for d in objs if d["kind"] == "ServiceMonitor")
    assert monitor["metadata"]["namespace"] == service["metadata"]["namespace"]
    assert all(service["metadata"]["labels"].get(k) == v for k, v in monitor["spec"]["selector"]["matchLabels"].items())
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics"]
    assert "metrics" in {p["name"] for p in service["spec"]["ports"]}
    # ...which the NetworkPolicy opens to Prometheus pods.
    policy = next(d for d in objs if d["kind"] == "NetworkPolicy")
    (to_metrics,) = [r for r in policy["spec"]["ingress"] if r["ports"][0]["port"] == "metrics"]
    assert to_metrics["from"][0]["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "prometheus"}
    # The job the alerts name (up{job="nodewarden"}): the value of the Service's label jobLabel names.
    assert service["metadata"]["labels"][monitor["spec"]["jobLabel"]] == "nodewarden"

    rule = next(d for d in objs if d["kind"] == "PrometheusRule")
    assert rule["spec"] == prometheus.rule_groups()
    dashboards = {d["metadata"]["name"]: d for d in objs if d["kind"] == "ConfigMap"
                  and d["metadata"].get("labels", {}).get("grafana_dashboard") == "1"}
    assert len(dashboards) == len(DASHBOARDS)
    for cm in dashboards.values():
        (body,) = cm["data"].values()
        assert json.loads(body)["uid"].startswith("nodewarden-")

    pod_monitor = next(d for d in _build(tmp_path / "pods", "pod-monitor") if d["kind"] == "PodMonitor")
    pod_labels = deploy["spec"]["template"]["metadata"]["labels"]
    assert all(pod_labels.get(k) == v for k, v in pod_monitor["spec"]["selector"]["matchLabels"].items())
    (endpoint,) = pod_monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == "metrics"
    assert {"action": "replace", "targetLabel": "job", "replacement": "nodewarden"} in endpoint["relabelings"]


def test_the_zeroed_drop_reasons_are_the_recorders():
    import inspect

    assert set(re.findall(r'self\._drop\("([^"]+)"', inspect.getsource(event_recorder.Recorder))) == set(metrics.DROP_REASONS)
