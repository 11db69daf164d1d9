"""The local stack's Prometheus: its configuration, and the alert rules it loads.

The rules are the ones operators install (the PrometheusRule in
kustomize/components/prometheus-rules/); Prometheus and promtool read a plain
rules file, which is that object's ``spec``. The binaries are Debian's
(hack/prometheus/install.sh puts them into .bin/).
"""
from __future__ import annotations

from pathlib import Path

import yaml

from .layout import REPO

PROMETHEUS_RULE = REPO / "kustomize" / "components" / "prometheus-rules" / "prometheusrule.yaml"
# What the dashboards read from Metacontroller: controller-runtime's work-queue
# metrics (sigs.k8s.io/controller-runtime/pkg/metrics/workqueue.go), one queue
# per controller, named "DecoratorController-<name>" or "CompositeController-<name>".
METACONTROLLER_SERIES = ("workqueue_depth", "workqueue_retries_total", "workqueue_queue_duration_seconds_bucket")
# Quick enough for a test to see a series, an alert pending, within seconds.
SCRAPE_INTERVAL = "2s"


def rule_groups(source: Path = PROMETHEUS_RULE) -> dict:
    """The PrometheusRule's spec: a rules file Prometheus and promtool load as it is."""
    doc = yaml.safe_load(source.read_text())
    if doc.get("kind") != "PrometheusRule":
        raise ValueError(f"{source} is not a PrometheusRule")
    return doc["spec"]


def write_rules(dest: Path, source: Path = PROMETHEUS_RULE) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(yaml.safe_dump(rule_groups(source), sort_keys=False))
    return dest


def config(rules: Path, targets: dict[str, str], metrics_paths: dict[str, str] | None = None) -> dict:
    """prometheus.yml: one job per ``targets`` entry (job -> host:port), the rules loaded.

    The job names are what a ServiceMonitor gives (the Service's name), so the
    alerts' ``up{job="nodewarden"}`` holds here too."""
    return {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL,
                   "external_labels": {"cluster": "local"}},
        "rule_files": [str(rules)],
        "scrape_configs": [
            {"job_name": job, "metrics_path": (metrics_paths or {}).get(job, "/metrics"),
             "static_configs": [{"targets": [target]}]}
            for job, target in targets.items()
        ],
    }


def command(binary: Path, config_file: Path, data: Path, port: int) -> list[str]:
    return [
        str(binary),
        f"--config.file={config_file}",
        f"--storage.tsdb.path={data}",
        f"--web.listen-address=127.0.0.1:{port}",
        # Debian's build serves no web UI assets; the API is what the stack needs.
        "--storage.tsdb.retention.time=1d",
        "--log.level=warn",
    ]
