"""node-detacher sync throughput and latency through gunicorn, beside a bare echo app.

    .venv/bin/python bench/hook_throughput.py [--seconds 10] [--clients 4] [--auth]

Both servers run under the same gunicorn settings (gunicorn.conf.py: 2 gthread
workers x 4 threads) on loopback, and the same keep-alive client load hits
each in turn, alternating for --rounds rounds; the median round of each is
reported. The cordon step is decided again on the Node as the API server has
it: a stand-in (bench/api_standin.py) answers that read with the Node sent,
and takes the writes. --auth adds the hook server as the kustomize base runs it: HTTPS
and a bearer token on every request (kept-alive connections, as
Metacontroller's Go client keeps them). Prints a Markdown table for
docs/performance.md.
"""
from __future__ import annotations

import argparse
import copy
import http.client
import json
import os
import pathlib
import socket
import ssl
import statistics
import subprocess
import sys
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from devcluster.waits import free_port  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "node-detacher"


def start(app: str, port: int, env: dict, tls: bool = False) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "--config", str(ROOT / "gunicorn.conf.py"), "--bind", f"127.0.0.1:{port}", app],
        cwd=ROOT, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                time.sleep(0.5 if tls else 0)  # the TLS context is built in the worker, after it listens
                return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"{app} did not start")


def load(port: int, body: bytes, seconds: float, clients: int, creds=None) -> dict:
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    stop_at = time.perf_counter() + seconds
    headers = {"Content-Type": "application/json"}
    if creds:
        headers["Authorization"] = f"Bearer {creds.token.read_text().strip()}"

    def client():
        if creds:
            context = ssl.create_default_context(cafile=str(creds.ca_cert))
            conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)
        else:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        mine = []
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            conn.request("POST", "/node-detacher/sync", body, headers)
            resp = conn.getresponse()
            resp.read()
            mine.append(time.perf_counter() - t0)
            if resp.status != 200:
                errors[0] += 1
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    start_t = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start_t
    latencies.sort()
    return {
        "requests": len(latencies),
        "rps": len(latencies) / elapsed,
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * latencies[int(0.99 * (len(latencies) - 1))],
        "errors": errors[0],
    }


def realistic(node: dict) -> dict:
    """What a kubelet-managed Node looks like on the wire: images, capacity, managedFields."""
    node = copy.deepcopy(node)
    status = node["status"]
    status["capacity"] = {"cpu": "8", "memory": "32386164Ki", "pods": "58", "ephemeral-storage": "104845292Ki"}
    status["allocatable"] = {"cpu": "7910m", "memory": "31369332Ki", "pods": "58", "ephemeral-storage": "95551679989"}
    status["addresses"] = [{"type": "InternalIP", "address": "10.0.1.23"}, {"type": "Hostname", "address": node["metadata"]["name"]},
                           {"type": "InternalDNS", "address": node["metadata"]["name"]}]
    status["daemonEndpoints"] = {"kubeletEndpoint": {"Port": 10250}}
    status["nodeInfo"] = {"architecture": "amd64", "bootID": "5a1d1f3e-8a4e-4b7e-9f6c-0d2b6f1c9e11",
                          "containerRuntimeVersion": "containerd://1.7.22", "kernelVersion": "6.1.112",
                          "kubeProxyVersion": "v1.35.4", "kubeletVersion": "v1.35.4",
                          "machineID": "ec2a1b2c3d4e5f60718293a4b5c6d7e8", "operatingSystem": "linux",
                          "osImage": "Amazon Linux 2023", "systemUUID": "ec2a1b2c-3d4e-5f60-7182-93a4b5c6d7e8"}
    status["images"] = [{"names": [f"123456789012.dkr.ecr.us-east-1.amazonaws.com/team-{i}/service@sha256:{i:064x}",
                                   f"123456789012.dkr.ecr.us-east-1.amazonaws.com/team-{i}/service:v1.{i}.0"],
                         "sizeBytes": 50_000_000 + i} for i in range(40)]
    for cond in ("MemoryPressure", "DiskPressure", "PIDPressure"):
        status["conditions"].insert(0, {"type": cond, "status": "False", "reason": f"KubeletHasNo{cond}",
                                        "message": "kubelet has sufficient resources",
                                        "lastHeartbeatTime": "2026-11-21T11:59:50Z", "lastTransitionTime": "2026-11-20T08:00:00Z"})
    node["metadata"]["labels"].update({"kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux",
                                       "node.kubernetes.io/instance-type": "m6i.2xlarge",
                                       "topology.kubernetes.io/region": "us-east-1", "eks.amazonaws.com/nodegroup": "general"})
    node["metadata"]["managedFields"] = [{"manager": m, "operation": "Update", "apiVersion": "v1",
                                          "time": "2026-11-21T11:59:50Z", "fieldsType": "FieldsV1",
                                          "fieldsV1": {"f:status": {"f:conditions": {".": {}}}}}
                                         for m in ("kubelet", "kube-controller-manager", "aws-cloud-controller-manager")]
    return node


def scenarios() -> dict[str, bytes]:
    idle = json.loads((FIXTURES / "idle-nothing-recorded.json").read_text())["request"]
    idle["object"] = realistic(idle["object"])  # the no-action path does no I/O at all
    cordon = json.loads((FIXTURES / "trigger-cordon.json").read_text())["request"]
    cordon["object"] = realistic(cordon["object"])
    return {"schedulable (no action)": json.dumps(idle).encode(),
            "cordoned, cache warm (first step)": json.dumps(cordon).encode()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3, help="alternate the servers this many times; medians reported")
    parser.add_argument("--auth", action="store_true", help="also the hook server with HTTPS and a bearer token")
    args = parser.parse_args()
    import tempfile

    from api_standin import StandinApi

    bodies = scenarios()
    standin = StandinApi([json.loads(b)["object"] for b in bodies.values()]).__enter__()
    kubeconfig = standin.kubeconfig(pathlib.Path(tempfile.mkdtemp(prefix="nodewarden-bench-")) / "kubeconfig")
    # No cluster name and no static groups: the first step's discovery index is empty and cached (no AWS
    # here), so what is timed is the hook, with its index warm.
    env = {"NODEWARDEN_CLUSTER_NAME": "", "AWS_REGION": "us-east-1", "KUBECONFIG": str(kubeconfig),
           "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "NODEWARDEN_LOG_LEVEL": "ERROR",
           "PROMETHEUS_MULTIPROC_DIR": "", "PYTHONPATH": str(ROOT),
           # No controller manager here: measure the first step itself, not the wait for its taint.
           "NODEWARDEN_UNSCHEDULABLE_TAINT_WAIT_SECONDS": "0"}
    servers = [("nodewarden", "hooks.app:create_app()", None), ("bare echo", "bench.echo_app:create_app()", None)]
    if args.auth:
        from devcluster.pki import hook_credentials

        creds = hook_credentials(pathlib.Path(tempfile.mkdtemp(prefix="nodewarden-bench-")))
        servers.insert(1, ("nodewarden, HTTPS + token", "hooks.app:create_app()", creds))
    rows = []
    for name, body in bodies.items():
        runs: dict[str, list[dict]] = {label: [] for label, _, _ in servers}
        for _ in range(args.rounds):  # alternate, so drift on a shared machine hits all alike
            for label, app, creds in servers:
                port = free_port()
                auth_env = {k: v for k, v in creds.server_env().items() if "CLIENT" not in k} if creds else {}
                proc = start(app, port, {**env, **auth_env}, tls=bool(creds))
                try:
                    load(port, body, 1.0, args.clients, creds)  # warm-up
                    runs[label].append(load(port, body, args.seconds, args.clients, creds))
                finally:
                    proc.terminate()
                    proc.wait(10)
        for label, results in runs.items():
            median = sorted(results, key=lambda r: r["rps"])[len(results) // 2]
            rows.append((name, label, median, len(body)))
    print("| scenario | server | body bytes | req/s | p50 ms | p99 ms | errors |")
    print("|---|---|---|---|---|---|---|")
    for name, label, r, size in rows:
        print(f"| {name} | {label} | {size} | {r['rps']:.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['errors']} |")
    print()
    for name in scenarios():
        ours = next(r for n, l, r, _ in rows if n == name and l == "nodewarden")
        echo = next(r for n, l, r, _ in rows if n == name and l == "bare echo")
        print(f"- {name}: nodewarden / bare echo = {ours['rps'] / echo['rps']:.2f}")
        for n, label, r, _ in rows:
            if n == name and label.startswith("nodewarden,"):
                print(f"- {name}: {label} / nodewarden = {r['rps'] / ours['rps']:.2f}")


if __name__ == "__main__":
    main()
