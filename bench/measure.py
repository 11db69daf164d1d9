"""What the benchmarks share: the percentile they report, where they write their results, the throttling
AWS's buckets sampled over a run, and the hook server's metrics."""
from __future__ import annotations

import json
import math
import pathlib
import threading
import time

import requests
from prometheus_client.parser import text_string_to_metric_families


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile: with 20 values, p99 is the largest."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def write_json(path: pathlib.Path | None, results: dict) -> None:
    """Results as JSON at ``path`` (the --json option), when one was given."""
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(results, indent=2) + "\n")


class BucketSampler:
    """The throttling AWS's buckets (devcluster/throttling.py), read every ``interval`` seconds on a thread of
    its own while a benchmark runs: per bucket key, the most calls it admitted in one interval (per second),
    and how many it admitted and throttled from ``start`` to ``stop``."""

    def __init__(self, control, interval: float = 1.0):
        self._control = control
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="bucket-sampler", daemon=True)
        self._first: dict[str, dict] = {}
        self._last: dict[str, dict] = {}
        self._peak: dict[str, float] = {}
        self._refill: dict[str, float] = {}

    def _read(self) -> dict[str, dict]:
        return {f"{row['region']} {row['key']}": row for row in self._control.state()["buckets"]}

    def _loop(self) -> None:
        before, at = self._read(), time.monotonic()
        self._first = before
        while not self._stop.wait(self._interval):
            now, now_at = self._read(), time.monotonic()
            for key, row in now.items():
                admitted = row["admitted"] - (before.get(key) or {}).get("admitted", 0)
                self._peak[key] = max(self._peak.get(key, 0.0), admitted / max(1e-6, now_at - at))
                self._refill[key] = row["refill_per_second"]
            before, at = now, now_at
            self._last = now

    def start(self) -> "BucketSampler":
        self._thread.start()
        return self

    def stop(self) -> list[dict]:
        """Per bucket key that admitted or throttled a call: peak admitted per second, the refill, the
        counts over the run."""
        self._stop.set()
        self._thread.join(10)
        rows = []
        for key, row in sorted(self._last.items()):
            first = self._first.get(key) or {}
            admitted = row["admitted"] - first.get("admitted", 0)
            throttled = row["throttled"] - first.get("throttled", 0)
            if admitted or throttled:
                rows.append({"key": key, "bucket": row["bucket"], "peak_per_second": round(self._peak.get(key, 0), 2),
                             "refill_per_second": self._refill.get(key, row["refill_per_second"]),
                             "capacity": row["capacity"], "admitted": admitted, "throttled": throttled})
        return rows


def sampled_buckets(cluster) -> BucketSampler | None:
    """The local stack's throttling AWS's buckets sampled from now (None when its moto does not throttle)."""
    return BucketSampler(cluster.throttling_control).start() if cluster.aws_throttling else None


class HookMetrics:
    """The hook server's /metrics, parsed."""

    def __init__(self, cluster):
        self.url = f"{cluster.hook_server.metrics_url}/metrics"

    def samples(self) -> list:
        text = requests.get(self.url, timeout=10).text
        return [s for family in text_string_to_metric_families(text) for s in family.samples]

    def syncs(self, controller: str, hook: str = "sync") -> float:
        return sum(s.value for s in self.samples() if s.name == "nodewarden_hook_duration_seconds_count"
                   and s.labels.get("controller") == controller and s.labels.get("hook") == hook)

    def aws_calls(self) -> dict[str, float]:
        calls: dict[str, float] = {}
        for s in self.samples():
            if s.name == "nodewarden_aws_calls_total":
                calls[s.labels["operation"]] = calls.get(s.labels["operation"], 0) + s.value
        return calls

    def latency(self, controller: str) -> dict:
        """The controller's hook latency histogram: cumulative bucket counts by bound, sum and count."""
        return self.histogram("nodewarden_hook_duration_seconds", controller)

    def histogram(self, name: str, controller: str) -> dict:
        """One of the hook server's histograms for a controller, every hook summed: cumulative bucket
        counts by bound, sum and count."""
        buckets: dict[float, float] = {}
        totals = {"sum": 0.0, "count": 0.0}
        for s in self.samples():
            if s.labels.get("controller") != controller:
                continue
            if s.name == f"{name}_bucket":
                le = float(s.labels["le"])
                buckets[le] = buckets.get(le, 0) + s.value
            elif s.name in (f"{name}_sum", f"{name}_count"):
                totals[s.name.rsplit("_", 1)[1]] += s.value
        return {"buckets": buckets, **totals}
