"""``nodewarden``: run hooks on saved requests, manage cluster annotations, make hook credentials.

    nodewarden replay REQUEST.json [--controller C] [--hook H] [--offline | --apply]
    nodewarden gc ...           (hooks/cli_gc.py)
    nodewarden credentials ...  (hooks/credentials.py)

replay reads a request body as Metacontroller sends it (or a test fixture
holding one under "request"). By default it looks things up (read-only AWS
and Kubernetes calls) and prints the response and the actions it would take,
changing nothing. --offline uses the fixture's "observed" and makes no call
at all; --apply runs the hook for real, side effects included.
"""
from __future__ import annotations

import argparse
import json
import sys

from hooks import cli_gc, controllers, credentials, pipeline, runtime
from hooks.config import ConfigError, load_settings
from hooks.contract import RequestError, parse_request, shape_response
from hooks.dispatch import UnknownHook, resolve, serve


def _guess_controller(body: dict) -> str | None:
    name = ((body.get("controller") or {}).get("metadata") or {}).get("name")
    if name in controllers.CONTROLLERS:
        return name
    # A controller installed under another name (NODEWARDEN_GC_CONTROLLER_NAME, say) starts with ours.
    for known in sorted(controllers.CONTROLLERS, key=len, reverse=True):
        if name and name.startswith(known):
            return known
    return None


def replay(args) -> int:
    with open(args.request, encoding="utf-8") as fh:
        document = json.load(fh)
    body = document["request"] if isinstance(document, dict) and "request" in document else document
    controller = args.controller or _guess_controller(body if isinstance(body, dict) else {})
    if not controller:
        print("error: cannot tell the controller from the request; pass --controller", file=sys.stderr)
        return 2
    hook = args.hook or document.get("hook") or ("finalize" if body.get("finalizing") else "sync")
    try:
        kind, _fn = resolve(controller, hook)
        ctx = runtime.Context(load_settings())
        if args.apply or hook == "customize":
            result = serve(controller, hook, body, ctx)
        else:
            module = controllers.load(controller)[1]
            request = parse_request(body, kind, hook)
            observed, plan = pipeline.replay(module, request, ctx,
                                             document.get("observed", {}) if args.offline else None)
            result = {**plan.to_dict(), "response": shape_response(kind, plan.response), "observed": observed}
    except (UnknownHook, RequestError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    json.dump(result, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nodewarden", description="nodewarden hooks, from the command line")
    sub = parser.add_subparsers(dest="command", required=True)
    rp = sub.add_parser("replay", help="run a hook on a saved Metacontroller request and print the response")
    rp.add_argument("request", help="request JSON (or a test fixture)")
    rp.add_argument("--controller", help="controller name (default: from the request's controller)")
    rp.add_argument("--hook", choices=["sync", "finalize", "customize"], help="default: from the request")
    mode = rp.add_mutually_exclusive_group()
    mode.add_argument("--offline", action="store_true", help="no AWS or Kubernetes call; use the file's 'observed'")
    mode.add_argument("--apply", action="store_true", help="run the hook for real, side effects included")
    rp.set_defaults(func=replay)
    for register in _subcommand_modules():
        register(sub)
    return parser


def _subcommand_modules():
    """Other command groups (``gc``, ``credentials``) register themselves here."""
    return [cli_gc.add_parser, credentials.add_parser]


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
