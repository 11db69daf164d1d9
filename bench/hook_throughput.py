"""node-detacher sync through gunicorn, called as Metacontroller calls it, beside a bare echo app; and
Metacontroller's calls while unauthenticated connections stall.

    .venv/bin/python bench/hook_throughput.py [--seconds 10] [--rounds 3] [--auth] [--stalls 200]

Both servers run under the same gunicorn settings (gunicorn.conf.py: 2
workers x 4 threads) on loopback, and the same client load hits each in turn,
alternating for --rounds rounds; the median round of each is reported.

The client is Metacontroller's: one Go http.Client per hook (v4.17.2 clones
http.DefaultTransport for a hook with a CA bundle), shared by its --workers
(5) sync workers. Go keeps a connection alive when the server does, but
keeps at most MaxIdleConnsPerHost (2, Go's default, which Metacontroller
does not change) idle: a call takes the idle connection used last, or dials
a new one (TCP, and the TLS handshake for HTTPS) and takes whichever comes
first, that one or a connection handed back meanwhile (GoTransport); a
connection coming back to a full idle list is closed. Between two calls a
worker does the rest of its sync (--think-ms; 20 ms is a 5,000-Node resync
in 25 s at 5 workers, 25 ms a Node per worker), so calls overlap and
connections are dialed as Metacontroller dials them. Reported per server:
calls per second, latency, the server's CPU per call (every gunicorn
process, from /proc) and the share of calls that dialed.

The cordon step is decided again on the Node as the API server has it: a
stand-in (bench/api_standin.py) answers that read with the Node sent, and
takes the writes. --auth adds the hook server as the kustomize base runs it:
HTTPS and a bearer token on every request.

--dial-cost: only the server's CPU per call with calls made one at a time,
on one kept-alive connection and on a new connection each, in plain HTTP and
HTTPS + token: what a call and what a dial cost.

--stalls N: against the HTTPS + token server, N connections with no token
and no certificate stall while Metacontroller's load runs (a third each: one
byte of a TLS ClientHello; a handshake and a request head that never ends;
a head dripped a byte every second), each opened again as soon as the server
closes it; reported: Metacontroller's calls (p50, p99, how many got no answer
within its 10 s hook timeout) beside the same load without them, and how
many stalled connections the server closed. Prints Markdown tables for
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
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from devcluster.waits import free_port  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "node-detacher"
HOOK_TIMEOUT = 10  # Metacontroller's default hook timeout
PATH = "/node-detacher/sync"


def start(app: str, port: int, env: dict) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "--config", str(ROOT / "gunicorn.conf.py"), "--bind", f"127.0.0.1:{port}", app],
        cwd=ROOT, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"{app} did not start")


def server_cpu_seconds(pid: int) -> float:
    """User and system CPU of gunicorn's master and its workers."""
    children = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    total = 0
    for process in [pid, *map(int, children)]:
        try:
            fields = pathlib.Path(f"/proc/{process}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


class _Want:
    """A call waiting for a connection: an idle one handed over, or the one dialed for it."""

    def __init__(self):
        self.ready = threading.Event()
        self.conn: http.client.HTTPConnection | None = None
        self.error: OSError | None = None


class GoTransport:
    """Go's http.Transport as one Metacontroller hook uses it. A call takes the idle connection used last;
    with none idle it dials one and takes whichever comes first, that one or a connection another call hands
    back meanwhile (the dialed one then goes idle unused: a spare). A connection coming back goes to a
    waiting call, else idle, else (``max_idle`` idle already) is closed."""

    def __init__(self, port: int, context: ssl.SSLContext | None, max_idle: int):
        self.port, self.context, self.max_idle = port, context, max_idle
        self.idle: list[http.client.HTTPConnection] = []
        self.waiting: list[_Want] = []
        self.lock = threading.Lock()
        self.dialed = 0

    def _connect(self) -> http.client.HTTPConnection:
        if self.context:
            conn = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=HOOK_TIMEOUT, context=self.context)
        else:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=HOOK_TIMEOUT)
        conn.connect()
        return conn

    def _dial_for(self, want: _Want) -> None:
        try:
            conn = self._connect()
        except OSError as exc:
            with self.lock:
                if want in self.waiting:
                    self.waiting.remove(want)
                    want.error = exc
                    want.ready.set()
            return
        with self.lock:
            self.dialed += 1
            if want in self.waiting:
                self.waiting.remove(want)
                want.conn = conn
                want.ready.set()
                return
        self._put(conn)  # its call was served by a connection handed back: a spare

    def _put(self, conn: http.client.HTTPConnection) -> None:
        with self.lock:
            if self.waiting:
                want = self.waiting.pop(0)
                want.conn = conn
                want.ready.set()
                return
            if len(self.idle) < self.max_idle:
                self.idle.append(conn)
                return
        conn.close()

    def _get(self) -> tuple[http.client.HTTPConnection, bool]:
        with self.lock:
            if self.idle:
                return self.idle.pop(), True
            want = _Want()
            self.waiting.append(want)
        threading.Thread(target=self._dial_for, args=(want,), daemon=True).start()
        if not want.ready.wait(HOOK_TIMEOUT):
            with self.lock:
                if want in self.waiting:
                    self.waiting.remove(want)
            raise TimeoutError("no connection within the hook timeout")
        if want.error:
            raise want.error
        return want.conn, False

    def post(self, body: bytes, headers: dict) -> int:
        conn, reused = self._get()
        try:
            conn.request("POST", PATH, body, headers)
            response = conn.getresponse()
            response.read()
        except OSError as exc:
            conn.close()
            if reused and isinstance(exc, (ConnectionResetError, BrokenPipeError)):
                return self.post(body, headers)  # closed by the server while idle: Go sends it again
            raise
        if response.will_close:
            conn.close()
        else:
            self._put(conn)
        return response.status

    def close(self) -> None:
        with self.lock:
            idle, self.idle = self.idle, []
        for conn in idle:
            conn.close()


def load(port: int, body: bytes, seconds: float, args, creds=None, pid: int | None = None) -> dict:
    """``args.workers`` sync workers sharing one GoTransport, each calling, then working ``args.think_ms``."""
    headers = {"Content-Type": "application/json"}
    context = None
    if creds:
        headers["Authorization"] = f"Bearer {creds.token.read_text().strip()}"
        context = ssl.create_default_context(cafile=str(creds.ca_cert))
    transport = GoTransport(port, context, args.max_idle)
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    stop_at = time.perf_counter() + seconds

    def worker():
        mine, failed = [], 0
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            try:
                ok = transport.post(body, headers) == 200
            except OSError:  # no answer within the hook timeout, or the connection refused
                ok = False
            mine.append(time.perf_counter() - t0)
            failed += not ok
            if args.think_ms:
                time.sleep(args.think_ms / 1000)
        with lock:
            latencies.extend(mine)
            errors[0] += failed

    cpu_before = server_cpu_seconds(pid) if pid else 0.0
    threads = [threading.Thread(target=worker) for _ in range(args.workers)]
    start_t = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start_t
    cpu = server_cpu_seconds(pid) - cpu_before if pid else 0.0
    transport.close()
    latencies.sort()
    calls = len(latencies)
    return {
        "requests": calls,
        "rps": calls / elapsed,
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * latencies[int(0.99 * (calls - 1))],
        "errors": errors[0],
        "cpu_ms": 1000 * cpu / calls,
        "new_connections": transport.dialed / calls,
    }


class Stalls:
    """``count`` unauthenticated connections kept stalled: each is opened again once the server closes it."""

    KINDS = ("client-hello-byte", "head-never-ends", "head-drip")
    HEAD = b"POST /node-detacher/sync HTTP/1.1\r\nHost: nodewarden\r\nContent-Type: application/json\r\n"

    def __init__(self, port: int, ca_cert: pathlib.Path, count: int):
        self.port, self.context = port, ssl.create_default_context(cafile=str(ca_cert))
        self.stop = threading.Event()
        self.closed_by_server = 0
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._keep, args=(self.KINDS[i % len(self.KINDS)],), daemon=True)
                        for i in range(count)]

    def __enter__(self) -> "Stalls":
        for thread in self.threads:
            thread.start()
        time.sleep(2)  # every connection open and stalled before the calls start
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()

    def _keep(self, kind: str) -> None:
        while not self.stop.is_set():
            try:
                closed = self._stall_once(kind)
            except OSError:
                closed = not self.stop.is_set()  # reset by the server
            if closed:
                with self.lock:
                    self.closed_by_server += 1

    def _stall_once(self, kind: str) -> bool:
        """Open one connection and stall it; True when the server closed it."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=60) as raw:
            if kind == "client-hello-byte":
                raw.sendall(b"\x16")
                return self._closed(raw)
            with self.context.wrap_socket(raw, server_hostname="localhost") as conn:
                if kind == "head-never-ends":
                    conn.sendall(self.HEAD)
                    return self._closed(conn)
                for byte in self.HEAD * 1000:
                    if self.stop.wait(1):
                        return False
                    conn.sendall(bytes([byte]))
        return False

    def _closed(self, conn: socket.socket) -> bool:
        conn.settimeout(0.5)
        while not self.stop.is_set():
            try:
                if not conn.recv(4096):
                    return True
            except TimeoutError:
                continue
        return False


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
    parser.add_argument("--rounds", type=int, default=3, help="alternate the servers this many times; medians reported")
    parser.add_argument("--workers", type=int, default=5, help="Metacontroller's sync workers sharing one client")
    parser.add_argument("--think-ms", type=float, default=20, help="a worker's own work between two calls")
    parser.add_argument("--max-idle", type=int, default=2, help="Go's MaxIdleConnsPerHost")
    parser.add_argument("--auth", action="store_true", help="also the hook server with HTTPS and a bearer token")
    parser.add_argument("--dial-cost", action="store_true",
                        help="only the server's CPU per call made one at a time, on one kept-alive connection "
                             "and on a new connection each, in plain HTTP and HTTPS + token")
    parser.add_argument("--stalls", type=int, default=0,
                        help="also Metacontroller's calls to the HTTPS + token server while this many "
                             "unauthenticated connections stall (implies --auth)")
    args = parser.parse_args()
    args.auth = args.auth or bool(args.stalls) or args.dial_cost

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
    creds = None
    if args.auth:
        from devcluster.pki import hook_credentials

        creds = hook_credentials(pathlib.Path(tempfile.mkdtemp(prefix="nodewarden-bench-")))
        servers.insert(1, ("nodewarden, HTTPS + token", "hooks.app:create_app()", creds))

    def served(app: str, server_creds):
        port = free_port()
        # As the kustomize base runs it: TLS and the token, no client CA.
        auth_env = {k: v for k, v in server_creds.server_env().items() if "CLIENT" not in k} if server_creds else {}
        return port, start(app, port, {**env, **auth_env})

    if args.dial_cost:
        dial_cost(args, bodies["schedulable (no action)"], servers[:2], served)
        return
    rows = []
    for name, body in bodies.items():
        runs: dict[str, list[dict]] = {label: [] for label, _, _ in servers}
        for _ in range(args.rounds):  # alternate, so drift on a shared machine hits all alike
            for label, app, server_creds in servers:
                port, proc = served(app, server_creds)
                try:
                    load(port, body, 1.0, args, server_creds)  # warm-up
                    runs[label].append(load(port, body, args.seconds, args, server_creds, proc.pid))
                finally:
                    proc.terminate()
                    proc.wait(10)
        for label, results in runs.items():
            median = sorted(results, key=lambda r: r["cpu_ms"])[len(results) // 2]
            rows.append((name, label, median, len(body)))
    print(f"{args.workers} workers sharing one client (at most {args.max_idle} idle connections), "
          f"{args.think_ms:g} ms between a worker's calls; medians of {args.rounds} rounds of {args.seconds:g} s")
    print()
    print("| scenario | server | body bytes | calls/s | p50 ms | p99 ms | server CPU ms per call | new connections | errors |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, label, r, size in rows:
        print(f"| {name} | {label} | {size} | {r['rps']:.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | "
              f"{r['cpu_ms']:.2f} | {100 * r['new_connections']:.0f} % | {r['errors']} |")
    print()
    for name in bodies:
        ours = next(r for n, l, r, _ in rows if n == name and l == "nodewarden")
        echo = next(r for n, l, r, _ in rows if n == name and l == "bare echo")
        print(f"- {name}: CPU per call, nodewarden / bare echo = {ours['cpu_ms'] / echo['cpu_ms']:.2f}")
        for n, label, r, _ in rows:
            if n == name and label.startswith("nodewarden,"):
                print(f"- {name}: CPU per call, {label} / nodewarden = {r['cpu_ms'] / ours['cpu_ms']:.2f}; "
                      f"calls/s {r['rps'] / ours['rps']:.2f}")

    if args.stalls:
        body = bodies["schedulable (no action)"]
        results = {"none": [], args.stalls: []}
        closed = []
        for _ in range(args.rounds):
            for stalls in results:
                port, proc = served("hooks.app:create_app()", creds)
                try:
                    load(port, body, 1.0, args, creds)  # warm-up
                    if stalls == "none":
                        results[stalls].append(load(port, body, args.seconds, args, creds, proc.pid))
                        continue
                    with Stalls(port, creds.ca_cert, stalls) as stalled:
                        results[stalls].append(load(port, body, args.seconds, args, creds, proc.pid))
                    closed.append(stalled.closed_by_server)
                finally:
                    proc.terminate()
                    proc.wait(10)
        print()
        print("| unauthenticated connections stalled | Metacontroller's calls | p50 ms | p99 ms | "
              "no answer within 10 s | stalled connections closed by the server |")
        print("|---|---|---|---|---|---|")
        for stalls, runs in results.items():
            r = sorted(runs, key=lambda r: r["p99_ms"])[len(runs) // 2]
            shut = f"{statistics.median(closed):.0f} per {args.seconds:g} s" if stalls != "none" else "-"
            print(f"| {stalls} | {r['requests']} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['errors']} | {shut} |")


def dial_cost(args, body: bytes, servers, served) -> None:
    """CPU per call with calls made one at a time: what a kept-alive call costs, and what a dial adds."""
    one_at_a_time = argparse.Namespace(workers=1, think_ms=0, max_idle=1)
    dialing = argparse.Namespace(workers=1, think_ms=0, max_idle=0)  # every connection closed after its call
    runs: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.rounds):
        for label, app, server_creds in servers:
            for how, pattern in (("kept alive", one_at_a_time), ("dialed", dialing)):
                port, proc = served(app, server_creds)
                try:
                    load(port, body, 1.0, pattern, server_creds)  # warm-up
                    result = load(port, body, args.seconds, pattern, server_creds, proc.pid)
                    runs.setdefault((label, how), []).append(result["cpu_ms"])
                finally:
                    proc.terminate()
                    proc.wait(10)
    print(f"One call at a time, schedulable (no action); medians of {args.rounds} rounds of {args.seconds:g} s")
    print()
    print("| server | server CPU per call, kept alive | per call, a new connection each | a dial adds |")
    print("|---|---|---|---|")
    medians = {key: statistics.median(values) for key, values in runs.items()}
    for label, _, _ in servers:
        kept, dialed = medians[(label, "kept alive")], medians[(label, "dialed")]
        print(f"| {label} | {kept:.3f} ms | {dialed:.3f} ms | {dialed - kept:.3f} ms |")


if __name__ == "__main__":
    main()
