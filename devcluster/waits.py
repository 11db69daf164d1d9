"""Polling helpers: wait for a condition, failing fast when a component died."""
from __future__ import annotations

import socket
import time
import warnings
from typing import Callable, Iterable

import requests
import urllib3

from .procs import Child


class NotReady(TimeoutError):
    pass


def wait_until(
    check: Callable[[], bool],
    what: str,
    *,
    timeout: float = 60.0,
    interval: float = 0.2,
    watch: Iterable[Child] = (),
) -> None:
    """Poll ``check`` until it returns true; raise NotReady naming ``what``."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        for child in watch:
            child.check()
        try:
            if check():
                return
            last_error = None
        except Exception as exc:  # the component is still coming up
            last_error = exc
        if time.monotonic() > deadline:
            detail = f": {last_error}" if last_error else ""
            tails = "".join(f"\n--- {c.name} ({c.log_path}):\n{c.log_tail(15)}" for c in watch)
            raise NotReady(f"{what} not ready after {timeout:.0f}s{detail}{tails}")
        time.sleep(interval)


def http_ok(url: str, *, expect: str | None = None, **kwargs) -> Callable[[], bool]:
    """A check that GETs ``url`` and wants 200 (and ``expect`` in the body)."""

    def check() -> bool:
        with warnings.catch_warnings():
            # Component health ports serve self-signed certificates.
            warnings.simplefilter("ignore", urllib3.exceptions.InsecureRequestWarning)
            response = requests.get(url, timeout=2, **kwargs)
        return response.status_code == 200 and (expect is None or expect in response.text)

    return check


def free_port(preferred: int | None = None) -> int:
    """``preferred`` if nothing listens there, else any free loopback port."""
    if preferred:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", preferred))
                return preferred
            except OSError:
                pass
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
