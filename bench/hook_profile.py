"""Where a resync's hook CPU goes: cProfile of a healthy Node's sync.

    .venv/bin/python bench/hook_profile.py [--calls 2000] [--top 15]

A full resync sends every Node to the Node decorator, and for a healthy,
schedulable Node both of its concerns answer "nothing to do". This runs that
request (the 13 KB Node of bench/hook_throughput.py, one NodeFencingPolicy
whose count is fresh, in the per-process copy the hook reads policies from)
--calls times through the Flask app in this process, exactly as a gunicorn
worker handles it (body decode, request parsing, decide, response, metrics),
under cProfile; and, for comparison, each concern alone on the routes the
two earlier decorators used. Prints the CPU per call and the functions that
take the most time, for docs/performance.md.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pathlib
import pstats
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from hook_throughput import realistic, scenarios  # noqa: E402

FENCING = ROOT / "tests" / "fixtures" / "node-fencing" / "healthy-no-churn.json"
NODE = ROOT / "tests" / "fixtures" / "node" / "healthy-no-writes.json"


def node_body() -> tuple[bytes, list[dict]]:
    """The Node decorator's request for a healthy Node, and the policies its hook lists (not related)."""
    request = json.loads(NODE.read_text())["request"]
    request["object"] = realistic(request["object"])
    policies = [p for group in (request.pop("related", None) or {}).values() for p in group.values()]
    return json.dumps(request).encode(), policies


def fencing_body() -> bytes:
    """node-fencing's request for a healthy Node, with its policy counted just now."""
    request = json.loads(FENCING.read_text())["request"]
    request["object"] = realistic(request["object"])
    return json.dumps(request).encode()


# Where a call's time goes: (phase, file suffix, function), cumulative time of each.
PHASES = (
    ("the hook handler, all of it", "hooks/app.py", "hook"),
    ("JSON decode of the body", "json/__init__.py", "loads"),
    ("request parsing (bounds, shapes)", "hooks/contract.py", "parse_request"),
    ("the controller: observe, decide, act", "hooks/pipeline.py", "run"),
    ("response, metrics and logs", "hooks/app.py", "_finish"),
)


def phases(profiler: cProfile.Profile, calls: int) -> str:
    stats = pstats.Stats(profiler).stats
    rows = ["| phase | ms per call (under cProfile) |", "|---|---|"]
    for label, suffix, function in PHASES:
        total = sum(v[3] for (path, _, name), v in stats.items() if path.endswith(suffix) and name == function)
        rows.append(f"| {label} | {1000 * total / calls:.2f} |")
    return "\n".join(rows)


def profile(client, path: str, body: bytes, calls: int, top: int) -> tuple[float, str]:
    for _ in range(50):  # warm-up: imports, caches, first metric series
        client.post(path, data=body, content_type="application/json")
    profiler = cProfile.Profile()
    cpu0 = time.process_time()
    profiler.enable()
    for _ in range(calls):
        response = client.post(path, data=body, content_type="application/json")
        if response.status_code != 200:
            raise RuntimeError(f"{path}: {response.status_code} {response.get_data(as_text=True)[:300]}")
    profiler.disable()
    per_call_ms = 1000 * (time.process_time() - cpu0) / calls
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    return per_call_ms, phases(profiler, calls) + "\n\n" + out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    os.environ.update({"NODEWARDEN_CLUSTER_NAME": "bench", "AWS_REGION": "us-east-1", "KUBECONFIG": "/nonexistent",
                       "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "NODEWARDEN_LOG_LEVEL": "ERROR"})
    from hooks import runtime
    from hooks.app import create_app
    from hooks.config import load_settings

    from worlds.fake_kube import FakeKube

    body, policies = node_body()
    ctx = runtime.Context(load_settings(dict(os.environ)))
    # The policies' list answered in process (no API server here); the hook's copy is relisted every
    # NODEWARDEN_FENCING_POLICY_CACHE_SECONDS, so a list costs a call only now and then.
    ctx._kube = FakeKube(policies)
    client = create_app(ctx).test_client()
    runs = {
        "node, healthy (both concerns, one call)": ("/node/sync", body),
        "node-detacher, schedulable (no action)": ("/node-detacher/sync", scenarios()["schedulable (no action)"]),
        "node-fencing, healthy": ("/node-fencing/sync", fencing_body()),
    }
    for name, (path, body) in runs.items():
        per_call, table = profile(client, path, body, args.calls, args.top)
        print(f"## {name}: {len(body):,} bytes, {per_call:.2f} ms CPU per call (under cProfile), {args.calls} calls\n")
        print(table)


if __name__ == "__main__":
    main()
