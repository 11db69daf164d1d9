"""Where a local hook server listens, and what a caller needs to get past its door.

A hook server with credentials serves HTTPS on its hook port and answers 401
to a request without the bearer token (as the stack runs it for Metacontroller
v4.16+); without them it serves plain HTTP to anyone (v1.5.20, which cannot
send credentials). /metrics, /healthz and /readyz are plain HTTP on the
metrics port either way.
"""
from __future__ import annotations

from dataclasses import dataclass

import requests

from .pki import HookCredentials


class PinnedSession(requests.Session):
    """A session whose ``verify`` holds for every request: requests lets REQUESTS_CA_BUNDLE (set on
    many machines) override a session's own ``verify``, and the hook CA is in no system bundle."""

    def request(self, method, url, **kwargs):
        kwargs.setdefault("verify", self.verify)
        return super().request(method, url, **kwargs)


@dataclass(frozen=True)
class HookEndpoint:
    port: int
    metrics_port: int
    credentials: HookCredentials | None = None

    @property
    def url(self) -> str:
        scheme = "https" if self.credentials else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}"

    def session(self, *, token: bool = True) -> requests.Session:
        """A client that trusts the hook CA; with ``token``, one that calls as Metacontroller does."""
        session = PinnedSession()
        if self.credentials:
            session.verify = str(self.credentials.ca_cert)
            if token:
                session.headers["Authorization"] = f"Bearer {self.credentials.token.read_text().strip()}"
        return session
