"""The tests' way through the hook server's door, against the real gunicorn server over real HTTPS.

The server is set up exactly as the local stack sets up its own for
Metacontroller v4 (devcluster.pki.hook_credentials' server_env); the e2e
tests of forged requests call through this client, so it must reach the
hooks wherever they run, including on machines whose environment names a
system CA bundle (REQUESTS_CA_BUNDLE), which requests lets override a
session's own ``verify``.
"""
from __future__ import annotations

import certifi
import pytest
import requests

from devcluster.hook_endpoint import HookEndpoint
from devcluster.pki import hook_credentials
from tests.support.hook_server import HookServer
from worlds.envelope import hook_request

NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "uid": "u1"},
        "spec": {"providerID": "aws:///us-east-1a/i-0123456789abcdef0"}}


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("endpoint")
    credentials = hook_credentials(tmp / "credentials")
    with HookServer(tmp / "server", env=credentials.server_env()) as server:
        yield HookEndpoint(server.port, server.metrics_port, credentials)


@pytest.fixture
def system_bundle(monkeypatch):
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", certifi.where())
    monkeypatch.setenv("CURL_CA_BUNDLE", certifi.where())


def test_the_token_session_reaches_the_hooks_whatever_bundle_the_environment_names(endpoint, system_bundle):
    body = hook_request("node-detacher", NODE)
    trap = requests.Session()
    trap.verify = str(endpoint.credentials.ca_cert)
    with pytest.raises(requests.exceptions.SSLError):  # the environment's bundle wins over a session's verify
        trap.post(f"{endpoint.url}/node-detacher/sync", json=body, timeout=10)
    reply = endpoint.session().post(f"{endpoint.url}/node-detacher/sync", json=body, timeout=10)
    assert reply.status_code == 200, reply.text


def test_without_the_token_the_same_client_is_refused_at_the_door(endpoint, system_bundle):
    body = hook_request("node-detacher", NODE)
    for headers in ({}, {"Authorization": "Bearer not-the-token"}):
        reply = endpoint.session(token=False).post(f"{endpoint.url}/node-detacher/sync", json=body,
                                                   headers=headers, timeout=10)
        assert reply.status_code == 401, reply.text
    assert endpoint.url.startswith("https://")
    assert requests.get(f"{endpoint.metrics_url}/readyz", timeout=5).ok
