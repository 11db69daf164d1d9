"""Warm a hook process before its first hook call: the AWS clients, the API server connection and the
policies' copy.

It also starts the reads of the instance catalog a provisioning round needs (every instance type and the
zones offering each, each on a thread of its own, hooks/aws/instance_catalog.py) and reads on-demand
prices. The code is already loaded: the app imports every controller when it is made (hooks/app.py), before
gunicorn's worker accepts, because Python's imports are not safe for two threads importing one import
cycle for the first time (a half-initialised module, a 500). What is left is done on a thread, so
the server answers at once: a process answers its first call about a Node slower than every later one
(botocore's service models read, TLS connections opened, the first NodeFencingPolicy list); on the
cordon path that first call was the slowest of twenty. ``/readyz`` says not ready until it is done.
Nothing here writes anything, each step ends within its client's own timeouts, and a failure only means
the first call pays for it.
"""
from __future__ import annotations

import logging
import threading
import time

from hooks import controllers, runtime
from hooks.aws import instance_catalog, pricing
from hooks.kube import policy_cache

log = logging.getLogger(__name__)
# The services a Node call may reach first: node-detacher's load balancers, fencing's power state.
SERVICES = ("elbv2", "elb", "ec2")

# /readyz waits for the warm-up at most this long: an API server that answers a byte at a time (each read
# within the client's timeout) must not keep the process out of the Service for ever.
READY_WAIT_SECONDS = 30.0

_done = threading.Event()
_done.set()  # a process that never warms up (the CLI, a test's app) has nothing to wait for
_ready_anyway_at = 0.0


def warm(ctx: runtime.Context) -> None:
    controllers.load_all()
    for service in SERVICES:
        try:
            ctx.aws.client(service)
        except Exception as exc:  # noqa: BLE001 - no region or credentials yet: the first call says so
            log.info("warm-up skipped an AWS client", extra={"service": service, "error": str(exc)})
    try:
        policy_cache.CACHE.policies(ctx.kube, ctx.settings.fencing_policy_cache_seconds)
    except Exception as exc:  # noqa: BLE001 - no API server yet: the first Node call lists them
        log.info("warm-up could not list NodeFencingPolicies", extra={"error": str(exc)})
    try:
        # A provisioning round's first reading of every instance type, its zones and prices takes seconds: the
        # types and zones are read on threads of their own (a round uses the bundled types meanwhile).
        region = ctx.aws.client("ec2", ctx.settings.aws_region or None).meta.region_name
        instance_catalog.all_type_facts(ctx.aws, region)
        pricing.on_demand_prices(ctx.aws, region)
        instance_catalog.zone_offerings(ctx.aws, region)
    except Exception as exc:  # noqa: BLE001 - the first provisioning round reads them
        log.info("warm-up could not read the instance catalog", extra={"error": str(exc)})


def _warm_then_ready(ctx: runtime.Context) -> None:
    try:
        warm(ctx)
    except Exception:  # noqa: BLE001 - a thread of its own: nobody else would hear of it
        log.exception("warm-up failed; the first calls pay for what it did not do")
    finally:
        _done.set()


def start(ctx: runtime.Context | None = None) -> threading.Thread:
    global _ready_anyway_at
    _ready_anyway_at = time.monotonic() + READY_WAIT_SECONDS
    _done.clear()
    thread = threading.Thread(target=_warm_then_ready, args=(ctx or runtime.current(),), name="warm-up",
                              daemon=True)
    thread.start()
    return thread


def done() -> bool:
    """False while a warm-up started in this process has not finished, for READY_WAIT_SECONDS at most."""
    return _done.is_set() or time.monotonic() >= _ready_anyway_at
