"""Warm a hook process before its first hook call: the controllers' modules, the AWS clients, the API
server connection and the policies' copy.

A process answers its first call about a Node slower than every later one
(its modules loaded, botocore's service models read, TLS connections opened,
the first NodeFencingPolicy list): on the cordon path that first call was
the slowest of twenty. Done on a thread as the process starts, so the server
answers at once; nothing here writes anything, and a failure only means the
first call pays for it as before.
"""
from __future__ import annotations

import logging
import threading

from hooks import controllers, runtime

log = logging.getLogger(__name__)
# The services a Node call may reach first: node-detacher's load balancers, fencing's power state.
SERVICES = ("elbv2", "elb", "ec2")


def warm(ctx: runtime.Context) -> None:
    for name in controllers.CONTROLLERS:
        controllers.load(name)
    for service in SERVICES:
        try:
            ctx.aws.client(service)
        except Exception as exc:  # noqa: BLE001 - no region or credentials yet: the first call says so
            log.info("warm-up skipped an AWS client", extra={"service": service, "error": str(exc)})
    try:
        from hooks.fencing import policy_cache

        policy_cache.CACHE.policies(ctx.kube, ctx.settings.fencing_policy_cache_seconds)
    except Exception as exc:  # noqa: BLE001 - no API server yet: the first Node call lists them
        log.info("warm-up could not list NodeFencingPolicies", extra={"error": str(exc)})


def start(ctx: runtime.Context | None = None) -> threading.Thread:
    thread = threading.Thread(target=warm, args=(ctx or runtime.current(),), name="warm-up", daemon=True)
    thread.start()
    return thread
