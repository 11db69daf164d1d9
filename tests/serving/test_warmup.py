"""A hook process has all its code before it takes a call, warms its clients and the policies' copy, says it
is not ready until then, and never fails doing so."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading

import requests

from devcluster.waits import http_ok, wait_until
from hooks import fencing_names, warmup
from hooks.kube import policy_cache
from tests.support.hook_server import QUIET_WORLD, REPO, HookServer
from worlds.fake_kube import FakeKube


def test_warm_up_makes_the_clients_and_lists_the_policies(make_ctx, monkeypatch):
    made = []
    kube = FakeKube([{"apiVersion": fencing_names.API_VERSION, "kind": fencing_names.POLICY_KIND,
                      "metadata": {"name": "p", "uid": "u"}, "spec": {}}])
    ctx = make_ctx(kube=kube)
    monkeypatch.setattr(ctx.aws, "client", lambda service, region=None: made.append(service))
    monkeypatch.setattr(policy_cache, "CACHE", policy_cache.PolicyCache())
    warmup.start(ctx).join(10)
    assert made == list(warmup.SERVICES) + ["ec2"], "then EC2 again, for the instance catalog"
    assert list(policy_cache.CACHE.policies(kube, 3600)) == ["p"]
    assert len([c for c in kube.calls if c[0] == "list"]) == 1, "the warm-up's list serves the first call"


def test_warm_up_with_nothing_reachable_ends_quietly(make_ctx, monkeypatch):
    ctx = make_ctx(kube=FakeKube(unavailable=True))

    def refuse(service, region=None):
        raise RuntimeError("no region")
    monkeypatch.setattr(ctx.aws, "client", refuse)
    thread = warmup.start(ctx)
    thread.join(10)
    assert not thread.is_alive()


# Run in a fresh interpreter: which modules the app's making loaded, and which imports inside functions of
# those modules would still be a first import when a call reaches them.
_FIRST_IMPORTS_LEFT = """
import ast, importlib.util, json, pathlib, sys
from hooks import controllers, runtime
from hooks.app import create_app
from hooks.config import load_settings

create_app(runtime.Context(load_settings({})))
left = [f"controller {name}: {module}" for name, (_, module) in controllers.CONTROLLERS.items()
        if module not in sys.modules]

def submodule(name):
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False

for module in [m for name, m in list(sys.modules.items()) if name == "hooks" or name.startswith("hooks.")]:
    for function in ast.walk(ast.parse(pathlib.Path(module.__file__).read_text())):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names
                                         if submodule(f"{node.module}.{alias.name}")]
            else:
                continue
            left += [f"{module.__name__}.{function.name}: {name}" for name in names if name not in sys.modules]
print(json.dumps(sorted(set(left))))
"""


def test_once_the_app_is_made_no_call_imports_a_module_for_the_first_time():
    """Every import inside a function of the server's modules names a module already loaded: a call never
    starts a first import that another thread could be making at the same time."""
    done = subprocess.run([sys.executable, "-c", _FIRST_IMPORTS_LEFT], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, **QUIET_WORLD, "PYTHONPATH": str(REPO)}, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == []


# The real server, started again and again: each start's first calls meet its first imports. Four
# controllers whose modules enter the import cycles (ours, lightkube's) from different sides, one call
# each for the worker's four threads.
STARTS = 12
FIRST_CALLS = ("node", "machine", "nodepool", "interruption")


def _post_at_once(server) -> dict[str, int]:
    codes: dict[str, int] = {}

    def post(name: str) -> None:
        codes[name] = requests.post(server.url(f"/{name}/sync", scheme="http"), json={}, timeout=30).status_code

    threads = [threading.Thread(target=post, args=(name,)) for name in FIRST_CALLS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return codes


def test_the_first_calls_after_a_start_are_answered_by_their_controllers(tmp_path):
    """Calls sent the moment /healthz answers, to four controllers at once: each a 400 for `{}`, never a 500."""
    for start in range(STARTS):
        with HookServer(tmp_path / f"start-{start}", ready_path="/healthz") as server:
            codes = _post_at_once(server)
        log = server.log()
        assert codes == {name: 400 for name in FIRST_CALLS}, (start, codes, log[-3000:])
        assert "partially initialized" not in log and "Exception during worker exit" not in log, log[-3000:]


class DrippingApiServer:
    """An API server that answers a request's head at once and its body a byte a second, until released:
    every read of its client is within the client's timeout, and the answer never ends."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.released = threading.Event()
        self.asked = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.released.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._drip, args=(conn,), daemon=True).start()

    def _drip(self, conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)
            self.asked.set()
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
            while not self.released.wait(1):
                conn.sendall(b" ")

    def kubeconfig(self, path) -> str:
        server = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "held",
            "clusters": [{"name": "held", "cluster": {"server": server}}],
            "users": [{"name": "held", "user": {"token": "t"}}],
            "contexts": [{"name": "held", "context": {"cluster": "held", "user": "held"}}]}))
        return str(path)

    def release(self) -> None:
        self.released.set()
        self.listener.close()


def test_readyz_says_not_ready_until_the_warm_up_is_done(tmp_path):
    api = DrippingApiServer()
    try:
        with HookServer(tmp_path / "server", env={"KUBECONFIG": api.kubeconfig(tmp_path / "kubeconfig")},
                        ready_path="/healthz") as server:
            assert api.asked.wait(30), "the warm-up lists the NodeFencingPolicies"
            reply = requests.get(f"{server.metrics_url}/readyz", timeout=5)
            assert reply.status_code == 503 and reply.json()["status"] == "warming up"
            assert requests.get(f"{server.metrics_url}/healthz", timeout=5).status_code == 200
            api.release()
            wait_until(http_ok(f"{server.metrics_url}/readyz"), "ready once the warm-up has ended", timeout=30)
    finally:
        api.release()
