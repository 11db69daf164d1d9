"""The real hook server (gunicorn with gunicorn.conf.py) in a subprocess, for tests over real sockets.

Kubernetes and AWS are unreachable on purpose: a hook that gets through
answers with what it could not do, and nothing outside the process changes.
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import requests

from devcluster import components
from devcluster.waits import free_port, http_ok, wait_until

REPO = Path(__file__).resolve().parents[2]
QUIET_WORLD = {"KUBECONFIG": "/nonexistent", "AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_REGION": "us-east-1",
               "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_MAX_ATTEMPTS": "1",
               "NODEWARDEN_CLUSTER_NAME": "test-cluster"}


@dataclass
class HookServer:
    workdir: Path
    env: dict = field(default_factory=dict)
    ready_path: str = "/readyz"  # what must answer 200 on the metrics port before the server counts as up

    def __post_init__(self):
        self.port, self.metrics_port = free_port(), free_port()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.workdir / "hooks.log"
        self.metrics_url = f"http://127.0.0.1:{self.metrics_port}"

    def __enter__(self) -> "HookServer":
        env = {**os.environ, **QUIET_WORLD, "NODEWARDEN_METRICS_PORT": str(self.metrics_port),
               "NODEWARDEN_WORKERS": "1", "PROMETHEUS_MULTIPROC_DIR": str(self.workdir / "metrics"),
               "PYTHONPATH": str(REPO), **self.env}
        argv = components.hook_server(REPO, f"127.0.0.1:{self.port}", f"127.0.0.1:{self.metrics_port}")
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(argv, cwd=self.workdir, env=env, stdout=self._log, stderr=subprocess.STDOUT)
        try:
            wait_until(self._ready, "hook server", timeout=60, interval=0.02)
        except BaseException:
            self.__exit__()
            raise
        return self

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"hook server exited {self.proc.returncode}: {self.log()[-2000:]}")
        return http_ok(f"{self.metrics_url}{self.ready_path}")()

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self._log.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def url(self, path: str, scheme: str = "https") -> str:
        return f"{scheme}://127.0.0.1:{self.port}{path}"

    def metric(self, name: str, **labels) -> float:
        """The sum of a metric's samples whose labels include ``labels`` (0 when none)."""
        text = requests.get(f"{self.metrics_url}/metrics", timeout=5).text
        total = 0.0
        for line in text.splitlines():
            if not line.startswith(name + "{") and not line.startswith(name + " "):
                continue
            if all(f'{k}="{v}"' in line for k, v in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
        return total


def start_failure(env: dict, workdir: Path) -> subprocess.CompletedProcess:
    """Run the server with ``env`` expecting it not to start; its output says why."""
    argv = components.hook_server(REPO, f"127.0.0.1:{free_port()}")
    return subprocess.run(argv, cwd=workdir, env={**os.environ, **QUIET_WORLD, "PYTHONPATH": str(REPO), **env},
                          capture_output=True, text=True, timeout=60)
