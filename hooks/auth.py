"""Who may call a hook: Metacontroller, proven by a bearer token or a client certificate.

Metacontroller (v4.16 and later) can send ``Authorization: Bearer <token>``
read from a Secret, and can present a client certificate. The hook server
accepts a request that carries either proof, when that proof is configured:

- tokens: every file in ``NODEWARDEN_AUTH_TOKEN_FILES`` that exists holds
  one accepted token (surrounding whitespace dropped, as Metacontroller drops
  it). Two files make a rotation window: the new token and the previous one.
  The files are read again whenever one of them changes (a mounted Secret is
  swapped atomically by the kubelet), never per request.
- client certificates: verified against ``NODEWARDEN_TLS_CLIENT_CA_FILE`` in
  the TLS handshake (hooks/serving.py); here only its names are checked,
  when ``NODEWARDEN_TLS_CLIENT_NAMES`` lists any.

Everything else is refused before its body is read. With neither configured
the door is open, which only the local stack on Metacontroller v1.5.20 (it
cannot send credentials) should do; ``NODEWARDEN_REQUIRE_AUTH`` makes that
a start-up error instead.
"""
from __future__ import annotations

import hmac
import logging
import os
import ssl
import threading
from dataclasses import dataclass
from typing import Iterable, Mapping

from hooks.config import Settings

log = logging.getLogger("hooks.auth")

# Why a request was refused: the label of nodewarden_hook_auth_refused_total.
MISSING = "missing"            # no Authorization header and no client certificate
SCHEME = "scheme"              # an Authorization header that is not Bearer
INVALID = "invalid"            # a bearer token that matches none accepted
CLIENT_NAME = "client-name"    # a verified client certificate whose names are not allowed
NO_TOKEN = "no-token"          # token files configured, none readable: refuse everything
TLS = "tls"                    # the TLS handshake failed (counted by hooks/serving.py, as the two below)
STALLED = "stalled"            # the handshake and request head not whole within NODEWARDEN_CLIENT_TIMEOUT_SECONDS
HEAD_TOO_LARGE = "head-too-large"  # a request head larger than hooks.serving.MAX_HEAD_BYTES


def file_signature(path: str) -> tuple | None:
    try:
        st = os.stat(path)  # follows the ..data symlink of a mounted Secret
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size


class TokenFiles:
    """The accepted tokens, re-read only when a file's identity, time or size changes."""

    def __init__(self, paths: Iterable[str]):
        self.paths = tuple(paths)
        self._lock = threading.Lock()
        self._seen: tuple | None = None
        self._tokens: tuple[bytes, ...] = ()

    def tokens(self) -> tuple[bytes, ...]:
        seen = tuple(file_signature(p) for p in self.paths)
        if seen == self._seen:
            return self._tokens
        with self._lock:
            if seen != self._seen:
                self._tokens = self._read()
                self._seen = seen
                log.info("bearer tokens read", extra={"files": [p for p, s in zip(self.paths, seen) if s],
                                                      "tokens": len(self._tokens)})
            return self._tokens

    def _read(self) -> tuple[bytes, ...]:
        found = []
        for path in self.paths:
            try:
                with open(path, "rb") as handle:
                    token = handle.read(64 * 1024).strip()
            except OSError:
                continue
            if token and token not in found:
                found.append(token)
        return tuple(found)


def _bearer(header: str | None) -> tuple[str | None, bytes]:
    """(refusal reason or None, the token) from an Authorization header."""
    if not header:
        return MISSING, b""
    scheme, _, credentials = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not credentials.strip():
        return SCHEME, b""
    return None, credentials.strip().encode("utf-8", "surrogateescape")


def _cert_names(cert: Mapping) -> set[str]:
    """The subject's common name and every DNS/URI subject alternative name of a verified certificate."""
    names = {value for rdn in cert.get("subject", ()) for key, value in rdn if key == "commonName"}
    names.update(value for kind, value in cert.get("subjectAltName", ()) if kind in ("DNS", "URI"))
    return names


def peer_certificate(environ: Mapping) -> dict:
    """The client certificate the TLS handshake verified, or {} (plain HTTP, or none presented)."""
    sock = environ.get("gunicorn.socket")
    if not isinstance(sock, ssl.SSLSocket):
        return {}
    try:
        return sock.getpeercert() or {}
    except (ValueError, OSError):
        return {}


@dataclass
class Door:
    """Decides, before a body is read, whether a hook request comes from Metacontroller."""

    tokens: TokenFiles | None = None
    client_certs: bool = False
    client_names: frozenset[str] = frozenset()

    @classmethod
    def from_settings(cls, settings: Settings) -> "Door":
        return cls(tokens=TokenFiles(settings.auth_token_files) if settings.auth_token_files else None,
                   client_certs=bool(settings.tls_client_ca_file),
                   client_names=frozenset(settings.tls_client_names))

    @property
    def open(self) -> bool:
        return self.tokens is None and not self.client_certs

    def describe(self) -> str:
        parts = [p for p, on in (("bearer-token", self.tokens), ("client-certificate", self.client_certs)) if on]
        return "+".join(parts) or "off"

    def refusal(self, environ: Mapping, authorization: str | None) -> str | None:
        """None when the request may go on; else why it may not (a metric label)."""
        if self.open:
            return None
        cert = peer_certificate(environ) if self.client_certs else {}
        if cert and (not self.client_names or _cert_names(cert) & self.client_names):
            return None
        if self.tokens is not None and authorization:
            problem, offered = _bearer(authorization)
            if problem:
                return problem
            accepted = self.tokens.tokens()
            if not accepted:
                return NO_TOKEN
            # Every token compared, each in constant time: the answer's timing tells nothing.
            if any([hmac.compare_digest(offered, token) for token in accepted]):
                return None
            return INVALID
        return CLIENT_NAME if cert else MISSING
