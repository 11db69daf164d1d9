"""A small admin client for the local API server (requests + the admin certificate).

Tests, the demo and the benchmark use it to create and edit objects the way
kubectl would, without a subprocess per call.
"""
from __future__ import annotations

import copy
import json
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import requests
import yaml

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"


class ApiError(RuntimeError):
    def __init__(self, response: requests.Response):
        self.status = response.status_code
        try:
            self.body = response.json()
        except ValueError:
            self.body = {"message": response.text}
        super().__init__(f"{response.request.method} {response.url}: {self.status} {self.body.get('message')}")


class AdminApi:
    def __init__(self, kubeconfig: Path):
        self._local = threading.local()
        config = yaml.safe_load(Path(kubeconfig).read_text())
        cluster = config["clusters"][0]["cluster"]
        user = config["users"][0]["user"]
        self.server = cluster["server"]
        # requests wants files; the admin kubeconfig sits next to the pki dir.
        pki = Path(kubeconfig).parent / "pki"
        self._verify = str(pki / "ca.crt")
        self._cert = (str(pki / "admin.crt"), str(pki / "admin.key"))
        self._as: dict[str, str] = {}
        assert "client-certificate-data" in user, "AdminApi needs the admin kubeconfig"

    def impersonating(self, user: str, group: str | None = None) -> "AdminApi":
        """This client acting as ``user`` (in ``group``), through the API server's Impersonate-User and
        Impersonate-Group headers: allowed what that user is allowed, and nothing more."""
        other = copy.copy(self)
        other._local = threading.local()
        other._as = {"Impersonate-User": user, **({"Impersonate-Group": group} if group else {})}
        return other

    @property
    def session(self) -> requests.Session:
        # One session per thread: requests sessions are not thread-safe.
        session = getattr(self._local, "session", None)
        if session is None:
            session = requests.Session()
            self._local.session = session
        return session

    def request(self, method: str, path: str, *, body=None, content_type="application/json",
                params=None, ok=(200, 201), timeout=10, accept: str | None = None) -> dict:
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type, **({"Accept": accept} if accept else {}), **self._as}
        # verify= per request: REQUESTS_CA_BUNDLE would override a session's.
        response = self.session.request(method, self.server + path, data=data, params=params,
                                        headers=headers, timeout=timeout,
                                        verify=self._verify, cert=self._cert)
        if response.status_code not in ok:
            raise ApiError(response)
        return response.json() if response.content else {}

    def get(self, path: str, **kw) -> dict:
        return self.request("GET", path, **kw)

    def metadata(self, path: str, **kw) -> list[dict]:
        """The metadata alone of every object in the collection at ``path`` (no spec, no status)."""
        listed = self.get(path, accept="application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1", **kw)
        return [item["metadata"] for item in listed.get("items") or []]

    def get_or_none(self, path: str) -> dict | None:
        try:
            return self.get(path)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def create(self, path: str, body: dict) -> dict:
        return self.request("POST", path, body=body)

    def patch(self, path: str, body: dict, content_type: str = MERGE) -> dict:
        return self.request("PATCH", path, body=body, content_type=content_type)

    def delete(self, path: str, body: dict | None = None, missing_ok: bool = True) -> None:
        ok = (200, 202, 404) if missing_ok else (200, 202)
        self.request("DELETE", path, body=body, ok=ok)

    def watch(self, path: str, *, params=None, seconds: int = 5) -> Iterator[dict]:
        """The events of a watch of the collection at ``path`` (``params``: labelSelector,
        fieldSelector, resourceVersion), until the API server ends it after ``seconds``."""
        response = self.session.get(self.server + path, params={**(params or {}), "watch": "1",
                                                                "timeoutSeconds": str(seconds)},
                                    stream=True, timeout=seconds + 10, verify=self._verify, cert=self._cert)
        with response:
            if response.status_code != 200:
                raise ApiError(response)
            for line in response.iter_lines():
                if line:
                    yield json.loads(line)


def wait_for(check: Callable[[], object], what: str, timeout: float = 30.0, interval: float = 0.05):
    """Poll ``check`` until it returns a truthy value, which is returned."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last value: {last!r}")
