"""Shared test fixtures: moto in server mode (the AWS), contexts, the WSGI app."""
from __future__ import annotations

import datetime as dt
import os

import boto3
import pytest

from devcluster.waits import free_port
from hooks import runtime
from hooks.config import load_settings

REGION = "us-east-1"


@pytest.fixture(scope="session")
def moto_endpoint():
    """moto in server mode on a free loopback port, for the whole session, its routing remembered per host
    as the local stack's is (devcluster/moto_server.py)."""
    from moto.server import ThreadedMotoServer

    from devcluster.moto_server import remember_routing

    remember_routing()
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture
def aws(moto_endpoint, monkeypatch):
    """Point boto3 at moto, reset its state, and return a client factory for tests."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    monkeypatch.setenv("AWS_REGION", REGION)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    import requests

    requests.post(f"{moto_endpoint}/moto-api/reset", timeout=10)

    def client(service: str, region: str = REGION):
        return boto3.client(service, region_name=region, endpoint_url=moto_endpoint)

    return client


@pytest.fixture
def make_ctx():
    """Build a Context from env-style overrides, with a fixed clock if given."""

    def build(env: dict | None = None, now: dt.datetime | None = None, kube=None) -> runtime.Context:
        base = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
        # No kube-controller-manager taints cordoned nodes here: never wait for it.
        base.update({"NODEWARDEN_CLUSTER_NAME": "test-cluster", "NODEWARDEN_UNSCHEDULABLE_TAINT_WAIT_SECONDS": "0",
                     # Every test its own policies: no copy kept from the last test's API server.
                     "NODEWARDEN_FENCING_POLICY_CACHE_SECONDS": "0",
                     # Each call reads the cluster's instances again (tests/aws/test_instance_view.py: the
                     # view kept for its age), so a test that changes an instance sees it on its next call.
                     "NODEWARDEN_INSTANCE_VIEW_SECONDS": "0",
                     # The test is the account's one AWS client: the whole of each bucket is its share
                     # (tests/aws/test_rate_limits.py: smaller shares on the code's clock).
                     "NODEWARDEN_AWS_RATE_SHARE": "1", "NODEWARDEN_AWS_RATE_PROCESSES": "1"})
        base.update(env or {})
        ctx = runtime.Context(load_settings(base), events_inline=True)
        if now is not None:
            ctx.clock = lambda: now
        if kube is not None:
            ctx._kube = kube
        return ctx

    return build
