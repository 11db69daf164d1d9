"""A stand-in for kube-apiserver's answers to one hook call, for benchmarks that time the hook alone.

A call that acts is decided again on the Node read from the API server; the
throughput benchmark has no API server, so this answers that read with the
Node the benchmark sends, and takes the call's writes (an Event, a patch of
the Node) with a 2xx. What it costs is not what a real API server costs:
the benchmark measures the hook, and says so.
"""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class StandinApi:
    def __init__(self, nodes: list[dict]):
        self.nodes = {n["metadata"]["name"]: n for n in nodes}
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True

    def _handler(self):
        nodes = self.nodes

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> dict:
                length = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(length) or b"{}")

            def do_GET(self):  # noqa: N802 - http.server's name
                name = self.path.split("?")[0].rstrip("/").rsplit("/", 1)[-1]
                if self.path.startswith("/api/v1/nodes/") and name in nodes:
                    return self._answer(200, nodes[name])
                self._answer(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404,
                                   "reason": "NotFound", "message": f"{self.path} not found"})

            def do_PATCH(self):  # noqa: N802
                self._body()
                name = self.path.split("?")[0].rstrip("/").rsplit("/", 1)[-1]
                self._answer(200, nodes.get(name) or {})

            def do_POST(self):  # noqa: N802
                self._answer(201, self._body())

            def log_message(self, *args):
                pass

        return Handler

    def kubeconfig(self, path: Path) -> Path:
        server = f"http://127.0.0.1:{self.server.server_address[1]}"
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "bench",
            "clusters": [{"name": "bench", "cluster": {"server": server}}],
            "users": [{"name": "bench", "user": {"token": "bench"}}],
            "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "bench"}}]}))
        return path

    def __enter__(self) -> "StandinApi":
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
