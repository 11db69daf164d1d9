"""The hook server: ``gunicorn 'hooks.app:create_app()'``.

Routes: POST /<controller>/<hook> (sync, finalize, customize), GET /healthz,
/readyz, /metrics. Every error is JSON; a stack trace never reaches a client.
"""
from __future__ import annotations

import json
import logging
import time
import os

from flask import Flask, Response, g, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from hooks import auth, controllers, logs, metrics, runtime, warmup
from hooks.config import load_settings
from hooks.contract import RequestError
from hooks.dispatch import UnknownHook, resolve, serve

log = logging.getLogger("hooks.app")

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def _json(body: dict, status: int = 200) -> Response:
    return Response(_dumps(body), status=status, mimetype="application/json")


def _error(status: int, message: str, **extra) -> Response:
    body = {"error": message, **extra}
    rid = logs.request_id.get()
    if rid != "-":
        body["requestId"] = rid
    return _json(body, status)


def _no_constants(name: str):
    # Python's json reads NaN and Infinity; JSON (and Metacontroller) has neither.
    raise ValueError(f"{name} is not JSON")


_METRICS_PORT_PATHS = ("/metrics", "/healthz", "/readyz")

_REFUSALS = {
    auth.MISSING: "authentication required: a bearer token (Authorization: Bearer) or a client certificate",
    auth.SCHEME: "authentication required: the Authorization header must use the Bearer scheme",
    auth.INVALID: "the bearer token is not valid",
    auth.CLIENT_NAME: "the client certificate does not name an allowed client",
    auth.NO_TOKEN: "no bearer token is configured on the server; every request is refused",
}


def _local_port() -> int:
    """The port this request arrived on (the listener's, not the Host header's)."""
    sock = request.environ.get("gunicorn.socket")
    try:
        return int(sock.getsockname()[1])
    except (AttributeError, OSError, IndexError, TypeError, ValueError):
        try:
            return int(request.environ.get("SERVER_PORT") or 0)
        except ValueError:
            return 0


def create_app(ctx: runtime.Context | None = None) -> Flask:
    if ctx is None:
        ctx = runtime.Context(load_settings())
    runtime.install(ctx)
    logs.configure(ctx.settings.log_level)
    metrics.zero_alerted_series()

    # Every controller's code before the server takes a call: gunicorn makes the app before its worker
    # accepts, so no call imports a module for the first time beside another (hooks/controllers/__init__.py).
    controllers.load_all()

    app = Flask("nodewarden")
    app.config["MAX_CONTENT_LENGTH"] = ctx.settings.max_body_bytes

    metrics_port = ctx.settings.metrics_port
    door = auth.Door.from_settings(ctx.settings)
    if door.open:
        log.warning("hook authentication is off: anyone who reaches the hook port can call the hooks "
                    "(set NODEWARDEN_AUTH_TOKEN_FILES or NODEWARDEN_TLS_CLIENT_CA_FILE)")
    else:
        log.info("hook authentication on", extra={"auth": door.describe()})

    @app.before_request
    def _start():
        g.started = time.perf_counter()
        g.controller, g.hook = "-", "-"
        rid = request.headers.get("X-Request-Id") or os.urandom(8).hex()
        g.rid_token = logs.request_id.set(rid[:64])
        if metrics_port and (_local_port() == metrics_port) != (request.path in _METRICS_PORT_PATHS):
            # Two listeners, so a NetworkPolicy can admit Prometheus to one and
            # only Metacontroller to the other: neither serves the other's routes.
            if request.path not in ("/healthz", "/readyz"):
                return _error(404, f"{request.path} is not served on this port")
        if request.path not in _METRICS_PORT_PATHS:
            # Before the body is read: an unauthenticated request never reaches a controller.
            refused = door.refusal(request.environ, request.headers.get("Authorization"))
            if refused:
                metrics.HOOK_AUTH_REFUSED.labels(refused).inc()
                log.warning("hook request refused", extra={"reason": refused, "remote": request.remote_addr})
                response = _error(401, _REFUSALS[refused])
                response.headers["WWW-Authenticate"] = 'Bearer realm="nodewarden"'
                return response

    @app.after_request
    def _finish(response: Response):
        if g.get("controller", "-") != "-":
            elapsed = time.perf_counter() - g.started
            metrics.HOOK_LATENCY.labels(g.controller, g.hook, str(response.status_code)).observe(elapsed)
            level = logging.DEBUG if response.status_code < 400 else logging.WARNING
            if log.isEnabledFor(level):
                log.log(level, "hook served", extra={"controller": g.controller, "hook": g.hook,
                                                     "code": response.status_code, "ms": round(elapsed * 1000, 2)})
        response.headers["X-Request-Id"] = logs.request_id.get()
        return response

    @app.teardown_request
    def _reset(_exc):
        token = g.pop("rid_token", None)
        if token is not None:
            logs.request_id.reset(token)

    @app.get("/healthz")
    def healthz():
        return _json({"status": "ok"})

    @app.get("/readyz")
    def readyz():
        # Ready once the warm-up is done, so the Service sends no call to a process still opening its clients.
        ready = warmup.done()
        return _json({"status": "ready" if ready else "warming up", "controllers": sorted(controllers.CONTROLLERS),
                      "auth": door.describe()}, 200 if ready else 503)

    @app.get("/metrics")
    def metrics_endpoint():
        return Response(metrics.exposition(), mimetype="text/plain; version=0.0.4")

    @app.post("/<controller_name>/<hook>")
    def hook(controller_name: str, hook: str):
        try:
            resolved = resolve(controller_name, hook)
        except UnknownHook as exc:
            return _error(404, str(exc))
        g.controller, g.hook = controller_name, hook
        metrics.HOOK_REQUEST_BYTES.labels(controller_name, hook).observe(request.content_length or 0)
        if request.mimetype != "application/json":
            return _error(415, f"content type must be application/json, got {request.mimetype or 'none'!r}")
        try:
            body = json.loads(request.get_data(cache=False), parse_constant=_no_constants)
        except (ValueError, UnicodeDecodeError) as exc:
            return _error(400, f"malformed JSON: {exc}")
        except RecursionError:
            return _error(400, "malformed JSON: nested too deeply")
        try:
            response = serve(controller_name, hook, body, ctx, resolved)
        except RequestError as exc:
            return _error(400, str(exc), field=exc.field)
        return _json(response)

    @app.errorhandler(RequestEntityTooLarge)
    def too_large(_exc):
        return _error(413, f"request body larger than {ctx.settings.max_body_bytes} bytes")

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException):
        return _error(exc.code or 500, exc.description or exc.name)

    @app.errorhandler(Exception)
    def unexpected(exc: Exception):
        log.exception("hook failed", extra={"controller": g.get("controller"), "hook": g.get("hook")})
        return _error(500, "internal error; see the server log for this request id")

    return app
