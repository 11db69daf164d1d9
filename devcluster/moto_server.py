"""moto's server, with its request routing remembered per host.

moto's server decides which of its services answers a request under one
lock, and on every request lists its package's ~200 service directories and
tries its URL patterns one after the other. On this 2-core machine that was
about 40 % of its samples under a stream of DeregisterTargets, every other
request waiting on the lock; without it moto answered 550 calls a second
instead of 300. What it finds depends on the host alone, and the package
does not change while it runs, so the answer is kept per host. What each
service does is untouched: the requests, the state and the answers are
moto's.

``python devcluster/moto_server.py -H 127.0.0.1 -p PORT`` takes moto.server's
arguments; the tests call :func:`remember_routing` before starting moto in
their own process.
"""
from __future__ import annotations

import sys
import threading

_lock = threading.Lock()
_patched = False


def remember_routing() -> None:
    """Keep moto's answer to "which service serves this host" (idempotent)."""
    global _patched
    from moto import backends
    from moto.moto_server import werkzeug_app

    with _lock:
        if _patched:
            return
        modules = tuple(backends.list_of_moto_modules())
        backends.list_of_moto_modules = lambda: modules
        lookup = werkzeug_app.DomainDispatcherApplication.get_backend_for_host
        found: dict = {}

        def get_backend_for_host(self, host):
            if host not in found:
                found[host] = lookup(self, host)
            return found[host]

        werkzeug_app.DomainDispatcherApplication.get_backend_for_host = get_backend_for_host
        _patched = True


def main(argv: list[str]) -> int:
    remember_routing()
    from moto import server

    server.main(argv)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
