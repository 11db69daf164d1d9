"""Serve one hook call on a decoded body: the one path shared by the server and the CLI."""
from __future__ import annotations

from hooks import controllers, runtime
from hooks.aws import lb_discovery, rate_limits
from hooks.contract import HOOKS, RequestError, parse_customize, parse_request, shape_response


class UnknownHook(LookupError):
    pass


def resolve(controller_name: str, hook: str):
    """(kind, hook function) or UnknownHook."""
    loaded = controllers.load(controller_name)
    fn = getattr(loaded[1], hook, None) if loaded and hook in HOOKS else None
    if fn is None:
        raise UnknownHook(f"no hook {hook!r} for controller {controller_name!r}")
    return loaded[0], fn


def serve(controller_name: str, hook: str, body, ctx: runtime.Context | None = None, resolved=None) -> dict:
    """Validate, run and shape. Raises UnknownHook or RequestError."""
    kind, fn = resolved or resolve(controller_name, hook)
    ctx = ctx or runtime.current()
    try:
        with rate_limits.hook_call(ctx.settings.aws_rate_wait_seconds, ctx.settings.hook_aws_retry_seconds), \
                lb_discovery.CACHE.one_call():
            if hook == "customize":
                return fn(parse_customize(body), ctx=ctx)
            response = fn(parse_request(body, kind, hook), ctx=ctx)
    except RecursionError:
        # No Kubernetes object nests this deep; copying or walking one would not end well.
        raise RequestError("request", "nested too deeply to be a Kubernetes object") from None
    return shape_response(kind, response)
