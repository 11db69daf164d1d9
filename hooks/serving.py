"""The hook server's door under gunicorn (used by gunicorn.conf.py): TLS, and what a client may hold.

- The certificate, its key and the client CA are files (a mounted Secret, which
  cert-manager or an operator rotates). gunicorn asks for an SSL context for
  every new connection; ``ssl_context`` hands out one context per set of file
  versions and builds a new one when any file changes, so a rotated
  certificate is served without a restart. A half-written rotation (a key
  that does not match its certificate yet) keeps the last good context.
- A client certificate is requested, not required (CERT_OPTIONAL): one that
  is presented must chain to the client CA or the handshake fails; a client
  without one goes on to the bearer-token check (hooks/auth.py).
- ``HookWorker`` is gunicorn's threaded worker (gthread) whose threads get a
  connection only with its whole request head. gthread gives a thread every
  new connection: the TLS handshake and the read of the head then block that
  thread as long as the client stalls (one byte of a ClientHello, a head that
  never ends, a byte every few seconds), and a few such connections keep
  Metacontroller out. Here the worker's poller does both without blocking,
  each within ``NODEWARDEN_CLIENT_TIMEOUT_SECONDS``: the handshake from the
  accept, the head from its first byte, whole (a byte now and then does not
  renew it); a connection past it is closed. One that has sent no byte of a
  request yet (Go's client keeps a spare connection so, and a kept-alive one
  waits so between calls) waits in the poller for gunicorn's ``keepalive``,
  as gthread's kept-alive connections do. A stalled connection costs a file
  descriptor and its bytes so far, never a thread. In the thread each read
  of a body and write of an answer waits at most the same timeout; a body
  the application did not read (a refused call's) is not waited for: the
  answer says ``Connection: close`` and the connection closes after it; and a closing connection lingers for its
  peer's last bytes in the poller, not on the worker's main thread as
  gthread's graceful close does.
- Counted in ``nodewarden_hook_auth_refused_total``: a failed handshake
  (``reason="tls"``), a head not whole by its deadline (``stalled``), a head
  larger than ``MAX_HEAD_BYTES`` (``head-too-large``, answered 431).
- The metrics listener (``NODEWARDEN_METRICS_PORT``) stays plain HTTP while
  the hook listener serves TLS, for Prometheus and probes.
"""
from __future__ import annotations

import errno
import logging
import selectors
import socket
import ssl
import threading
import time
from collections import deque
from functools import partial

import gunicorn.sock
from gunicorn import http, util
from gunicorn.http.body import ChunkedReader, LengthReader
from gunicorn.workers.gthread import TConn, ThreadWorker

from hooks import auth
from hooks.config import load_settings

log = logging.getLogger("hooks.serving")

# The longest request head taken (request line and headers; Metacontroller's are a few hundred bytes).
MAX_HEAD_BYTES = 64 * 1024
_READ_BYTES = 16 * 1024
# How long a closing connection is kept for its peer's last bytes, and how many (gthread's own figures).
_LINGER_SECONDS = 2.0
_LINGER_BYTES = 64 * 1024
_HEAD_TOO_LARGE = (b"HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\n"
                   b"Content-Length: 0\r\n\r\n")


def _refused(reason: str) -> None:
    from hooks import metrics  # in the worker only: the master must not touch the metrics files

    metrics.HOOK_AUTH_REFUSED.labels(reason).inc()


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
            # No TLS 1.3 session tickets: Metacontroller's Go client keeps no session cache (v4.17.2 sets no
            # ClientSessionCache), so one would never be used, and issuing two cost a sixth of each handshake.
            context.num_tickets = 0
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


def _body_left(body) -> bool:
    """Whether the request body (gunicorn's ``wsgi.input``) has bytes the application did not read (True when
    it cannot tell)."""
    if body is None:
        return False
    if body.failed or body.buf.getbuffer().nbytes:
        return True
    reader = body.reader
    if isinstance(reader, LengthReader):
        return reader.length > 0
    if isinstance(reader, ChunkedReader):
        return reader.parser is not None or bool(reader.buf.getbuffer().nbytes)
    return True


def _closing_when_unread(app):
    """The application, whose answer says ``Connection: close`` when it left body bytes unread (a refused
    call's): the body is not waited for, the connection closes after the answer, and the client, told so,
    sends its next request on another."""

    def serve(environ, start_response):
        answer = app(environ, start_response)
        if _body_left(environ.get("wsgi.input")):
            start_response.__self__.force_close()  # gunicorn's Response: headers go out on the first write
        return answer

    return serve


class HookConn(TConn):
    """A connection whose TLS handshake and request head the worker's poller reads; a thread gets it whole."""

    def __init__(self, worker: "HookWorker", cfg, client_sock, client, server):
        super().__init__(cfg, client_sock, client, server)
        self.worker = worker
        self.fd = client_sock.fileno()  # the same once the socket is wrapped in TLS
        self.handshaken = not cfg.is_ssl
        self.head = bytearray()
        self.searched = 0  # how much of ``head`` has been searched for its end
        self.deadline: float | None = None  # while the poller waits for the rest of a handshake or head
        self.head_ready = False
        self.events = 0  # what the poller waits for on this connection's behalf (0: not registered)

    def init(self):
        # In the thread, right after gthread made the socket blocking: the parser is made and the head
        # buffered already; each read of the body and write of the answer waits at most the client timeout.
        self.sock.settimeout(self.worker.client_timeout)

    def close(self, graceful=False):
        if graceful:
            self.worker.linger(self.sock)
        else:
            super().close()


class HookWorker(ThreadWorker):
    """gthread, whose threads get a connection only with its whole request head (see the module's docstring),
    with the metrics listener in plain HTTP while the hook listener serves TLS."""

    def init_process(self):
        settings = load_settings()
        self.plain_port = settings.metrics_port
        self.client_timeout = settings.client_timeout_seconds
        if "h2" in (self.cfg.http_protocols or ()):
            raise RuntimeError("the hook server speaks HTTP/1.1 only: drop h2 from gunicorn's http_protocols")
        self.clocks: deque[tuple[float, HookConn]] = deque()  # in deadline order: one timeout for all
        self.lingering: deque[tuple[float, socket.socket]] = deque()
        super().init_process()

    def accept(self, listener):
        try:
            client_sock, client = listener.accept()
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        self.nr_conns += 1
        server = listener.getsockname()
        cfg = self.cfg
        if self.plain_port and cfg.is_ssl and isinstance(server, tuple) and server[1:2] == (self.plain_port,):
            cfg = _PlainConfig(cfg)
        self._read_head(HookConn(self, cfg, client_sock, client, server))

    def enqueue_req(self, conn):
        # gthread hands a connection to a thread when it is accepted, when a kept-alive one turns readable and
        # when one holds bytes read ahead: a thread gets it here only with a whole head.
        if conn.head_ready:
            conn.head_ready = False
            super().enqueue_req(conn)
        else:
            self._read_head(conn)

    def load_wsgi(self):
        super().load_wsgi()
        self.wsgi = _closing_when_unread(self.wsgi)

    def murder_pending(self):
        super().murder_pending()
        now = time.monotonic()
        while self.clocks and self.clocks[0][0] <= now:
            deadline, conn = self.clocks.popleft()
            if conn.deadline == deadline:  # still short of that handshake or head
                _refused(auth.STALLED)
                self._drop(conn)
        while self.lingering and self.lingering[0][0] <= now:
            self._close_lingering(self.lingering.popleft()[1])

    # The handshake and the head, in the poller.

    def _read_head(self, conn: HookConn) -> None:
        conn.sock.setblocking(False)
        # Bytes of this head a previous request's read took already.
        conn.head = bytearray(conn.parser.unreader.take_buffered() if conn.parser is not None else b"")
        conn.searched = 0
        if conn.head or not conn.handshaken:
            self._start_clock(conn)
        self._advance(conn)

    def _start_clock(self, conn: HookConn) -> None:
        conn.deadline = time.monotonic() + self.client_timeout
        self.clocks.append((conn.deadline, conn))

    def _advance(self, conn: HookConn, _fileobj=None) -> None:
        """Go on with the handshake and the head as far as the bytes that arrived allow."""
        try:
            if not conn.handshaken and not self._handshake(conn):
                return
            while not self._head_whole(conn):
                if len(conn.head) > MAX_HEAD_BYTES:
                    self._refuse_head(conn)
                    return
                data = conn.sock.recv(_READ_BYTES)
                if not data:
                    self._drop(conn)  # the peer closed before its head was whole
                    return
                if not conn.head:
                    self._start_clock(conn)  # the head's first byte
                conn.head += data
        except (BlockingIOError, ssl.SSLWantReadError):
            if conn.handshaken and not conn.head:
                self._idle(conn)
            else:
                self._wait(conn, selectors.EVENT_READ)
            return
        except ssl.SSLWantWriteError:
            self._wait(conn, selectors.EVENT_WRITE)
            return
        except OSError:  # reset, or a TLS error after the handshake
            self._drop(conn)
            return
        self._head_done(conn)

    @staticmethod
    def _head_whole(conn: HookConn) -> bool:
        # Only what arrived since the last look is searched: a head dripped a byte at a time costs no more.
        found = conn.head.find(b"\r\n\r\n", max(0, conn.searched - 3)) >= 0
        conn.searched = len(conn.head)
        return found

    def _idle(self, conn: HookConn) -> None:
        """No byte of a request yet (a client's spare connection): gthread's kept-alive connections, which wait
        for their next request in the poller for ``keepalive`` seconds."""
        self._unwait(conn)
        conn.deadline = None
        conn.set_timeout()
        self.keepalived_conns.append(conn)
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self.on_client_socket_readable, conn))

    def _handshake(self, conn: HookConn) -> bool:
        """True once the TLS handshake is done; raises SSLWant*Error while it waits for the peer."""
        try:
            if not isinstance(conn.sock, ssl.SSLSocket):
                context = gunicorn.sock.ssl_context(conn.cfg)
                conn.sock = context.wrap_socket(conn.sock, server_side=True, do_handshake_on_connect=False,
                                                suppress_ragged_eofs=conn.cfg.suppress_ragged_eofs)
            conn.sock.do_handshake()
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            raise
        except (ssl.SSLError, OSError) as exc:
            _refused(auth.TLS)
            log.debug("TLS handshake failed", extra={"remote": conn.client, "error": str(exc)})
            self._drop(conn)
            return False
        except Exception:  # noqa: BLE001 - no usable certificate: say so, and keep serving the others
            log.exception("no TLS context for a new connection")
            self._drop(conn)
            return False
        conn.handshaken = True
        conn.deadline = None  # the head's clock starts at its first byte
        return True

    def _wait(self, conn: HookConn, events: int) -> None:
        if conn.events == events:
            return
        callback = partial(self._advance, conn)
        if conn.events:
            self.poller.modify(conn.fd, events, callback)
        else:
            self.poller.register(conn.fd, events, callback)
        conn.events = events

    def _unwait(self, conn: HookConn) -> None:
        if conn.events:
            conn.events = 0
            try:
                self.poller.unregister(conn.fd)
            except (KeyError, ValueError, OSError):
                pass

    def _head_done(self, conn: HookConn) -> None:
        self._unwait(conn)
        conn.deadline = None
        if conn.parser is None:
            conn.parser = http.get_parser(conn.cfg, conn.sock, conn.client)
            conn.initialized = True  # gthread's init() would wrap and handshake in the thread
        conn.parser.unreader.unread(bytes(conn.head))
        conn.head = bytearray()
        conn.data_ready = True
        conn.head_ready = True
        self.enqueue_req(conn)

    def _drop(self, conn: HookConn) -> None:
        self._unwait(conn)
        conn.deadline = None
        self.nr_conns -= 1
        util.close(conn.sock)

    def _refuse_head(self, conn: HookConn) -> None:
        _refused(auth.HEAD_TOO_LARGE)
        self._unwait(conn)
        conn.deadline = None
        self.nr_conns -= 1
        try:
            conn.sock.send(_HEAD_TOO_LARGE)  # a short answer, if the socket takes it now
        except OSError:
            pass
        self.linger(conn.sock)

    # Closing, in the poller.

    def linger(self, sock: socket.socket) -> None:
        """Close after the answer is sent: FIN now, the peer's last bytes read (so no reset cuts the answer
        short) until it closes too, _LINGER_BYTES or _LINGER_SECONDS."""
        try:
            sock.shutdown(socket.SHUT_WR)
            sock.setblocking(False)
            self.poller.register(sock.fileno(), selectors.EVENT_READ, partial(self._drain, sock, [0]))
        except (OSError, ValueError, KeyError):
            util.close(sock)
            return
        self.lingering.append((time.monotonic() + _LINGER_SECONDS, sock))

    def _drain(self, sock: socket.socket, drained: list[int], _fileobj=None) -> None:
        try:
            data = sock.recv(_READ_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        drained[0] += len(data)
        if not data or drained[0] >= _LINGER_BYTES:
            self._close_lingering(sock)

    def _close_lingering(self, sock: socket.socket) -> None:
        if sock.fileno() < 0:
            return  # closed already
        try:
            self.poller.unregister(sock.fileno())
        except (KeyError, ValueError, OSError):
            pass
        util.close(sock)
