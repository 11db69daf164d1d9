"""boto3 clients, one per (service, region) per process, with call metrics.

The endpoint comes from boto3's own AWS_ENDPOINT_URL (moto in tests and the
local stack); retries use botocore's standard mode; every attempt first takes
its tokens from the process's share of AWS's buckets (hooks/aws/rate_limits.py).
"""
from __future__ import annotations

import threading

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from hooks.aws import rate_limits
from hooks.config import Settings
from hooks.metrics import AWS_CALLS
from hooks.plan import TRANSPORT

# Connections kept open per client. A process deregisters from every target group of a wave at once (one
# call in flight per group) beside its drain reads and discovery: past botocore's default of 10, each call
# beyond it opened a new connection (a new TLS handshake with AWS) and threw it away after.
MAX_POOL_CONNECTIONS = 64

_CONFIG = Config(
    retries={"mode": "standard", "max_attempts": 3},
    connect_timeout=2,
    read_timeout=5,
    max_pool_connections=MAX_POOL_CONNECTIONS,
)




def error_code(exc: BaseException) -> str:
    """The AWS error code of a failure, TRANSPORT when AWS was not reached, else the exception's class name."""
    if isinstance(exc, ClientError):
        return exc.response.get("Error", {}).get("Code", "ClientError")
    if isinstance(exc, BotoCoreError):
        return TRANSPORT
    return type(exc).__name__


def _count_call(service: str):
    def after_call(http_response=None, parsed=None, model=None, **_):
        code = "ok"
        if isinstance(parsed, dict) and parsed.get("Error"):
            code = parsed["Error"].get("Code", "error")
        AWS_CALLS.labels(service, model.name if model else "?", code).inc()

    def after_call_error(exception=None, model=None, **_):
        if isinstance(exception, rate_limits.Limited):
            return  # never sent: nodewarden_aws_rate_limited_total counts it
        code = error_code(exception) if isinstance(exception, ClientError) else type(exception).__name__
        AWS_CALLS.labels(service, model.name if model else "?", code).inc()

    return after_call, after_call_error


class AwsClients:
    """Lazily built, cached clients. Thread-safe: gunicorn threads share them."""

    def __init__(self, settings: Settings, session: boto3.session.Session | None = None,
                 limiter: rate_limits.Limiter | None = None):
        self._settings = settings
        self._session = session or boto3.session.Session()
        self.limiter = limiter or limiter_of(settings)
        self._clients: dict[tuple[str, str, float | None], object] = {}
        self._lock = threading.Lock()

    def region(self, preferred: str | None = None) -> str:
        region = preferred or self._settings.aws_region or self._session.region_name
        if not region:
            raise ValueError("no AWS region: set AWS_REGION or give nodes a zone in their providerID")
        return region

    def client(self, service: str, region: str | None = None, read_timeout: float | None = None):
        """The client of ``service`` in ``region``; ``read_timeout``: a client of its own that waits this long
        for an answer (for reads made off a hook's path), instead of the hooks' 5 s."""
        region = self.region(region)
        key = (service, region, read_timeout)
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                config = _CONFIG if read_timeout is None else _CONFIG.merge(Config(read_timeout=read_timeout))
                try:
                    client = self._session.client(service, region_name=region, config=config)
                except ValueError as exc:  # botocore's refusal of the region or its endpoint: a reason, not a 500
                    raise ClientError({"Error": {"Code": "InvalidRegion",
                                                 "Message": f"region {region[:64]!r}: {exc}"}},
                                      f"{service} client") from None
                after_call, after_call_error = _count_call(service)
                client.meta.events.register("after-call", after_call)
                client.meta.events.register("after-call-error", after_call_error)
                rate_limits.meter(client, service, region, self.limiter)
                self._clients[key] = client
            return client


def limiter_of(settings: Settings) -> rate_limits.Limiter:
    """The process's limiter: the deployment's shares split over its processes."""
    processes = max(1, settings.aws_rate_processes)
    return rate_limits.Limiter(settings.aws_rate_share / processes,
                               {name: share / processes for name, share in settings.aws_rate_shares})
