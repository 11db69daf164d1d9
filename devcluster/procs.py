"""Start child processes with their logs in files, and stop every one of them.

Each child runs in its own session, so a Ctrl-C in the terminal reaches only
the launcher, which then stops the children in reverse start order. Each child
also asks the kernel for SIGKILL when the launcher dies (PR_SET_PDEATHSIG),
so even a killed launcher leaves no process behind (SIGKILL: with etcd gone,
kube-apiserver would not finish a graceful shutdown).
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass  # not Linux: the launcher's own cleanup still runs


class ProcessFailed(RuntimeError):
    """A component exited while it was expected to run."""


@dataclass
class Child:
    name: str
    argv: list[str]
    log_path: Path
    popen: subprocess.Popen
    stop_timeout: float = 10.0

    @property
    def pid(self) -> int:
        return self.popen.pid

    def running(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def check(self) -> None:
        if not self.running():
            raise ProcessFailed(
                f"{self.name} exited with code {self.popen.returncode}; "
                f"log {self.log_path}:\n{self.log_tail()}"
            )


@dataclass
class Supervisor:
    log_dir: Path
    children: list[Child] = field(default_factory=list)

    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        stop_timeout: float = 10.0,
    ) -> Child:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        with open(log_path, "ab") as log:
            log.write(f"--- {time.strftime('%Y-%m-%dT%H:%M:%S')} {' '.join(argv)}\n".encode())
            log.flush()
            popen = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        child = Child(name, list(argv), log_path, popen, stop_timeout)
        self.children.append(child)
        return child

    def check_all(self) -> None:
        for child in self.children:
            child.check()

    def stop_all(self) -> None:
        """Stop children newest first: TERM, wait, then KILL the whole group."""
        while self.children:
            child = self.children.pop()
            stop(child.popen, child.stop_timeout)


def stop(popen: subprocess.Popen, timeout: float) -> None:
    if popen.poll() is None:
        _signal_group(popen.pid, signal.SIGTERM)
        try:
            popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
    # Anything left in the child's session (e.g. gunicorn workers) goes too.
    _signal_group(popen.pid, signal.SIGKILL)
    try:
        popen.wait(5)
    except subprocess.TimeoutExpired:
        pass


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
