"""moto's server, with its request routing remembered per host.

moto's server decides which of its services answers a request under one
lock, and on every request lists its package's ~200 service directories and
tries its URL patterns one after the other. On this 2-core machine that was
about 40 % of its samples under a stream of DeregisterTargets, every other
request waiting on the lock; without it moto answered 550 calls a second
instead of 300. What it finds depends on the host alone, and the package
does not change while it runs, so the answer is kept per host. What each
service does is untouched: the requests, the state and the answers are
moto's.

In front of moto, devcluster/throttling.py meters every call with AWS's
token buckets and answers as AWS does when one is empty; moto itself never
refuses a call. It is on unless ``--no-throttling`` is given or
NODEWARDEN_DEV_AWS_THROTTLING=off. ``moto.server.main`` builds its app and
serves it in one function, with no way to wrap the app, so :func:`build_app`
builds the same app from moto's public pieces (``DomainDispatcherApplication``
over ``create_backend_app``) and :func:`main` serves it as moto's main does:
werkzeug's ``run_simple``, threaded, with moto's request handler.

``python devcluster/moto_server.py -H 127.0.0.1 -p PORT [--throttling|--no-throttling]``;
the tests call :func:`remember_routing` before starting moto in their own
process.

:func:`look_up_tags_by_resource`, for runs with thousands of instances
(bench/aws_rates.py): moto reads one EC2 resource's tags by scanning every
tag of the region, so a DescribeInstances filtered by tag over N instances
costs N² regular-expression matches (7 s for one Machine's UID at 1,000
instances on this machine, minutes at 5,000). It reads them by the
resource's id instead; the tags and every answer are the same.

:func:`file_classic_elbs_as_aws_does`: moto's tagging API files classic ELBs
under the resource type ``elb:loadbalancer``, where AWS files them under
``elasticloadbalancing:loadbalancer`` (their ARNs' service). node-detacher
asks the tagging API for that type only, so under moto's type it would never
see a classic ELB.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import threading
from pathlib import Path

if __name__ == "__main__":
    # Run by path (components.moto_argv), sys.path starts at devcluster/: this checkout's root instead, for
    # devcluster and hooks, whatever is installed and wherever it runs.
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import run_simple

from devcluster import throttling

_lock = threading.Lock()
_patched = False
_tags_by_resource = False
_classic_elbs_filed = False


def remember_routing() -> None:
    """Keep moto's answer to "which service serves this host" (idempotent)."""
    global _patched
    from moto import backends
    from moto.moto_server import werkzeug_app

    with _lock:
        if _patched:
            return
        modules = tuple(backends.list_of_moto_modules())
        backends.list_of_moto_modules = lambda: modules
        lookup = werkzeug_app.DomainDispatcherApplication.get_backend_for_host
        found: dict = {}

        def get_backend_for_host(self, host):
            if host not in found:
                found[host] = lookup(self, host)
            return found[host]

        werkzeug_app.DomainDispatcherApplication.get_backend_for_host = get_backend_for_host
        _patched = True


def build_app(*, throttled: bool):
    """moto's server app, as moto.server.main builds it; behind AWS's throttling when ``throttled``."""
    app = DomainDispatcherApplication(create_backend_app)
    return throttling.Throttling(app) if throttled else app


def look_up_tags_by_resource() -> None:
    """An EC2 resource's own tags read from moto's tag store by its id (idempotent)."""
    global _tags_by_resource
    from moto.ec2.models import core
    from moto.ec2.utils import EC2_PREFIX_TO_RESOURCE, get_prefix

    with _lock:
        if _tags_by_resource:
            return

        def get_tags(self) -> list[dict[str, str]]:
            # What describe_tags(filters={"resource-id": [self.id]}) answers: an id has no wildcard in it.
            if not self.id:
                return []
            kind = EC2_PREFIX_TO_RESOURCE.get(get_prefix(self.id), "")
            return [{"resource_id": self.id, "key": key, "value": value, "resource_type": kind}
                    for key, value in (self.ec2_backend.tags.get(self.id) or {}).items()]

        core.TaggedEC2Resource.get_tags = get_tags
        _tags_by_resource = True


def file_classic_elbs_as_aws_does() -> None:
    """The tagging API lists classic ELBs under AWS's resource type (idempotent)."""
    global _classic_elbs_filed
    from moto.elb.models import ELBBackend

    with _lock:
        if _classic_elbs_filed:
            return
        listed = ELBBackend.iter_tagged_resources

        def iter_tagged_resources(self):
            for resource in listed(self):
                yield dataclasses.replace(resource, resource_type="elasticloadbalancing:loadbalancer")

        ELBBackend.iter_tagged_resources = iter_tagged_resources
        _classic_elbs_filed = True


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="moto_server.py", description="moto's server behind AWS's throttling")
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, default=5000)
    parser.add_argument("--throttling", action=argparse.BooleanOptionalAction,
                        default=throttling.wanted_by_environment(),
                        help=f"AWS's token buckets in front of moto (default: on unless "
                             f"{throttling.ENVIRONMENT_SWITCH}=off); --no-throttling answers every call, as moto does")
    args = parser.parse_args(argv)
    remember_routing()
    file_classic_elbs_as_aws_does()
    # moto writes its own URLs (an SQS queue's, for one) with this port, as under moto.server.main.
    os.environ.setdefault("MOTO_PORT", str(args.port))
    app = build_app(throttled=args.throttling)
    run_simple(args.host, args.port, app, threaded=True, request_handler=MotoRequestHandler)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
