"""Shared test fixtures: moto in server mode (the AWS), contexts, the WSGI app."""
from __future__ import annotations

import datetime as dt
import os
import time
from dataclasses import dataclass

import boto3
import pytest

from devcluster.throttling import Throttling, ThrottlingControl
from devcluster.waits import free_port
from hooks import runtime
from hooks.config import load_settings

REGION = "us-east-1"


class StoppableClock:
    """time.monotonic, until a test stops it; then only :meth:`advance` moves it."""

    def __init__(self):
        self._offset = 0.0
        self._stopped_at: float | None = None

    def __call__(self) -> float:
        return self._stopped_at if self._stopped_at is not None else time.monotonic() + self._offset

    def stop(self) -> None:
        self._stopped_at = self()

    def advance(self, seconds: float) -> None:
        assert self._stopped_at is not None, "stop the clock first"
        self._stopped_at += seconds

    def resume(self) -> None:
        # On from where it stood, never back.
        if self._stopped_at is not None:
            self._offset = self._stopped_at - time.monotonic()
            self._stopped_at = None


@dataclass(frozen=True)
class MotoServer:
    endpoint: str
    # The AWS throttling in front of it, in this process (devcluster/throttling.py), and the clock it meters by.
    throttling: Throttling
    clock: StoppableClock


@pytest.fixture(scope="session")
def moto_server():
    """moto in server mode on a free loopback port, for the whole session, its routing remembered per host
    as the local stack's is (devcluster/moto_server.py), behind the local stack's throttling with its buckets
    off (bursts of tests' calls would be refused): ``throttling_aws`` turns them on for a test."""
    from moto.server import ThreadedMotoServer

    from devcluster.moto_server import file_classic_elbs_as_aws_does, remember_routing

    remember_routing()
    file_classic_elbs_as_aws_does()
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    # ThreadedMotoServer makes its werkzeug server in its own thread and takes no app of ours: wrap the one it
    # serves once start() returns, before any request is sent.
    clock = StoppableClock()
    throttling = Throttling(server._server.app, enabled=False, clock=clock)
    server._server.app = throttling
    yield MotoServer(f"http://127.0.0.1:{port}", throttling, clock)
    server.stop()


@pytest.fixture(scope="session")
def moto_endpoint(moto_server):
    return moto_server.endpoint


@pytest.fixture
def throttling_aws(aws, moto_server):
    """moto throttling as AWS does, for this test: every bucket on and full, no faults. Returns the control
    API's client (devcluster.throttling.ThrottlingControl: enable, disable, add_fault, clear_faults, state,
    bucket, reset, scale); the buckets are off again after the test."""
    control = ThrottlingControl(moto_server.endpoint)
    control.scale(1)
    control.clear_faults()
    control.enable()
    yield control
    control.disable()
    control.clear_faults()
    control.scale(1)


@pytest.fixture
def throttling_clock(moto_server):
    """The clock the tests' moto throttling meters by, stopped for this test: ``advance(seconds)`` refills."""
    moto_server.clock.stop()
    yield moto_server.clock
    moto_server.clock.resume()


@pytest.fixture
def retries_at_once(monkeypatch):
    """botocore's retries without their backoff: each attempt still goes out (and is refused), but no test
    sleeps the machine's seconds between two (a throttled call's backoff starts at up to 1 s and doubles)."""
    from botocore.retries import standard

    monkeypatch.setattr(standard.ExponentialBackoff, "delay_amount", lambda self, context: 0)


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
