"""TLS on the hook port under gunicorn (used by gunicorn.conf.py).

- The certificate, its key and the client CA are files (a mounted Secret, which
  cert-manager or an operator rotates). gunicorn asks for an SSL context for
  every new connection; ``ssl_context`` hands out one context per set of file
  versions and builds a new one when any file changes, so a rotated
  certificate is served without a restart. A half-written rotation (a key
  that does not match its certificate yet) keeps the last good context.
- A client certificate is requested, not required (CERT_OPTIONAL): one that
  is presented must chain to the client CA or the handshake fails; a client
  without one goes on to the bearer-token check (hooks/auth.py).
- A failed handshake is counted (``nodewarden_hook_auth_refused_total{reason="tls"}``).
- ``HookWorker`` is gunicorn's threaded worker that leaves the metrics listener
  (``NODEWARDEN_METRICS_PORT``) in plain HTTP, for Prometheus and probes.
"""
from __future__ import annotations

import logging
import ssl
import threading

from gunicorn.workers.gthread import ThreadWorker

from hooks import auth
from hooks.config import load_settings

log = logging.getLogger("hooks.serving")


class _CountingSocket(ssl.SSLSocket):
    """An SSLSocket that counts the handshakes it refuses."""

    def do_handshake(self, *args, **kwargs):
        try:
            return super().do_handshake(*args, **kwargs)
        except (ssl.SSLError, OSError):
            from hooks import metrics  # in the worker only: the master must not touch the metrics files

            metrics.HOOK_AUTH_REFUSED.labels(auth.TLS).inc()
            raise


class ReloadingContext:
    """One SSLContext per version of the certificate, key and client-CA files."""

    def __init__(self):
        self._lock = threading.Lock()
        self._good: tuple[tuple, ssl.SSLContext] | None = None
        self._failed: tuple | None = None

    def __call__(self, conf, default_ssl_context_factory) -> ssl.SSLContext:
        files = (conf.certfile, conf.keyfile, conf.ca_certs)
        seen = tuple(auth.file_signature(f) if f else None for f in files)
        good = self._good
        if good and good[0] == seen:
            return good[1]
        with self._lock:
            if self._good and self._good[0] == seen:
                return self._good[1]
            if self._good and self._failed == seen:
                return self._good[1]  # already tried these files; keep serving the last good ones
            try:
                context = default_ssl_context_factory()
            except (OSError, ssl.SSLError, ValueError) as exc:
                self._failed = seen
                if self._good is None:
                    raise
                log.warning("TLS files changed but cannot be loaded; serving the previous certificate",
                            extra={"error": str(exc), "files": [f for f in files if f]})
                return self._good[1]
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            context.sslsocket_class = _CountingSocket
            if self._good is not None:
                log.info("TLS files changed; new connections get the new certificate",
                         extra={"files": [f for f in files if f]})
            self._good, self._failed = (seen, context), None
            return context


ssl_context = ReloadingContext()


class _PlainConfig:
    """gunicorn's config as a metrics-port connection sees it: no TLS."""

    is_ssl = False

    def __init__(self, cfg):
        self._cfg = cfg

    def __getattr__(self, name):
        return getattr(self._cfg, name)


class HookWorker(ThreadWorker):
    """gthread, with the metrics listener in plain HTTP while the hook listener serves TLS."""

    def init_process(self):
        self.plain_port = load_settings().metrics_port
        super().init_process()

    def enqueue_req(self, conn):
        # Before the connection's first read, which is where gthread wraps it in TLS.
        server = conn.server if isinstance(conn.server, tuple) else ()
        if self.plain_port and server[1:2] == (self.plain_port,) and not isinstance(conn.cfg, _PlainConfig):
            conn.cfg = _PlainConfig(conn.cfg)
        super().enqueue_req(conn)
