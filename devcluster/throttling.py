"""An AWS that says no: AWS's token buckets, and faults on demand, in front of moto.

moto has no request throttling: it answers every call at once, however many
arrive, and never fails one it can serve. AWS meters each account and region
with token buckets and refuses a call that finds its bucket empty. This WSGI
middleware, ours and not moto's, wraps moto's server app and does the same:
each call takes tokens from the buckets hooks/aws_rate_buckets.py names for
it, in its account and region; a call that finds any of them short takes
none, never reaches moto, and is answered with AWS's own throttling error in
its service's wire protocol, so botocore parses and retries it as it does
AWS's. Tests can also make calls throttled, failed or slow for a while.

A call is recognised by its SigV4 credential scope (region and signing name)
and its ``Action`` form field or ``X-Amz-Target`` header; only the services
with buckets are, and anything else (moto's /moto-api/, S3, STS, unsigned
requests) passes through untouched and unmetered.

The control API, on moto's own port (:class:`ThrottlingControl` is a client):

    GET    /_throttling          on or off, the scale, every bucket's admitted and throttled calls and
                                 tokens now, the faults
    PUT    /_throttling/enabled  {"enabled": false}: the buckets stop metering (faults still apply)
    POST   /_throttling/reset    every bucket full again, its counts zero
    POST   /_throttling/scale    {"factor": 10}: every capacity and refill rate times 10, every bucket full
    POST   /_throttling/faults   {"service": "ec2", "operation": "DescribeInstances", "kind": "slow",
                                  "delay": 6.0, "seconds": 60}
    GET    /_throttling/faults   the faults in force
    DELETE /_throttling/faults   no faults
"""
from __future__ import annotations

import functools
import io
import json
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from urllib.parse import parse_qsl

import botocore.session
import requests
from moto.iam.models import get_account_id_from
from werkzeug.wrappers import Request, Response

from hooks import aws_rate_buckets
from hooks.aws_rate_buckets import Draw

CONTROL_PATH = "/_throttling"
ENVIRONMENT_SWITCH = "NODEWARDEN_DEV_AWS_THROTTLING"

FAULT_KINDS = ("throttle", "error", "slow")
_CREDENTIAL_SCOPE = re.compile(r"Credential=([^/,\s]+)/\d{8}/([^/,\s]+)/([^/,\s]+)/aws4_request")
_FAULT_FIELDS = {"service", "operation", "kind", "seconds", "count", "delay", "status"}


def wanted_by_environment(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the local stack's moto throttles: yes unless NODEWARDEN_DEV_AWS_THROTTLING=off."""
    return environ.get(ENVIRONMENT_SWITCH, "").strip().lower() != "off"


# -- which service a request is for ---------------------------------------------------------------------


@dataclass(frozen=True)
class Service:
    """What botocore's model says about a service's wire protocol."""

    name: str
    # botocore's resolved protocol, the one its client speaks: "ec2", "query" or "json".
    protocol: str
    api_version: str
    target_prefix: str | None
    xml_namespace: str | None
    json_version: str | None
    # An awsJson service that was a query one (SQS): errors also carry their query-protocol code in a header.
    query_compatible: bool


@functools.cache
def services_by_signing_name() -> dict[str, tuple[Service, ...]]:
    """Every service with buckets, by the signing name of its credential scope (ELB and ELBv2 share one)."""
    session = botocore.session.get_session()
    found: dict[str, list[Service]] = {}
    for name in aws_rate_buckets.SERVICES:
        model = session.get_service_model(name)
        protocol = model.resolved_protocol
        if protocol not in ("ec2", "query", "json"):
            raise RuntimeError(f"botocore speaks {protocol} to {name}: no throttling answer is written for it")
        metadata = model.metadata
        found.setdefault(model.signing_name, []).append(Service(
            name, protocol, model.api_version, metadata.get("targetPrefix"), metadata.get("xmlNamespace"),
            metadata.get("jsonVersion"), "awsQueryCompatible" in metadata))
    return {signing_name: tuple(services) for signing_name, services in found.items()}


@dataclass(frozen=True)
class Call:
    """One AWS API call as it arrived."""

    service: Service
    operation: str
    account: str
    region: str
    # The form fields of a query-protocol call (empty for JSON ones).
    fields: Mapping[str, str] = field(default_factory=dict)

    @property
    def draws(self) -> tuple[Draw, ...]:
        return aws_rate_buckets.request_draws(self.service.name, self.operation, self.fields)


def identify(environ: dict) -> Call | None:
    """The call a request makes, or None when it is for no service with buckets. Reads a form body and
    puts the same bytes back for moto."""
    scope = _CREDENTIAL_SCOPE.search(environ.get("HTTP_AUTHORIZATION", ""))
    if scope is None:
        return None
    access_key, region, signing_name = scope.groups()
    candidates = services_by_signing_name().get(signing_name, ())
    if not candidates:
        return None
    target = environ.get("HTTP_X_AMZ_TARGET")
    if target:
        prefix, _, operation = target.rpartition(".")
        fields: dict[str, str] = {}
        service = next((s for s in candidates if s.protocol == "json" and s.target_prefix == prefix), None)
    else:
        fields = _form_fields(environ)
        operation = fields.get("Action", "")
        service = next((s for s in candidates if s.protocol in ("ec2", "query")
                        and (len(candidates) == 1 or s.api_version == fields.get("Version"))), None)
    if service is None or not operation:
        return None
    # moto's own responses find the account this way (moto.core.responses).
    return Call(service, operation, get_account_id_from(access_key), region, fields)


def _form_fields(environ: dict) -> dict[str, str]:
    fields = dict(parse_qsl(environ.get("QUERY_STRING", ""), keep_blank_values=True))
    if not environ.get("CONTENT_TYPE", "").startswith("application/x-www-form-urlencoded"):
        return fields
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return fields
    if length <= 0:
        return fields
    body = environ["wsgi.input"].read(length)
    environ["wsgi.input"] = io.BytesIO(body)
    fields.update(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
    return fields


# -- the buckets ---------------------------------------------------------------------------------------


@dataclass
class _BucketState:
    tokens: float
    updated: float
    admitted: int = 0
    throttled: int = 0


class Buckets:
    """Every account's and region's token buckets, each full when first drawn from. Thread-safe."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, scale: float = 1.0):
        self._clock = clock
        self._scale = scale
        self._lock = threading.Lock()
        # (account, region, key) -> the bucket and its state
        self._states: dict[tuple[str, str, str], tuple[aws_rate_buckets.Bucket, _BucketState]] = {}

    @property
    def scale(self) -> float:
        return self._scale

    def take(self, account: str, region: str, draws: Iterable[Draw]) -> tuple[Draw, ...]:
        """Take every draw's tokens, or none when any bucket is short: the draws that were short."""
        draws = tuple(draws)
        with self._lock:
            now = self._clock()
            states = [self._refilled(account, region, draw.bucket, draw.key, now) for draw in draws]
            short = tuple(draw for draw, state in zip(draws, states) if state.tokens < draw.tokens)
            for draw, state in zip(draws, states):
                if not short:
                    state.tokens -= draw.tokens
                    state.admitted += 1
                elif draw in short:
                    state.throttled += 1
            return short

    def reset(self, scale: float | None = None) -> None:
        """Every bucket full and its counts zero; with ``scale``, capacities and refills times it from now on."""
        with self._lock:
            if scale is not None:
                self._scale = scale
            self._states.clear()

    def report(self) -> list[dict]:
        with self._lock:
            now = self._clock()
            found = []
            for (account, region, key), (bucket, _) in sorted(self._states.items()):
                state = self._refilled(account, region, bucket, key, now)
                found.append({"account": account, "region": region, "key": key, "bucket": bucket.name,
                              "capacity": bucket.capacity * self._scale,
                              "refill_per_second": bucket.refill_per_second * self._scale,
                              "tokens": state.tokens, "admitted": state.admitted, "throttled": state.throttled})
            return found

    def _refilled(self, account: str, region: str, bucket: aws_rate_buckets.Bucket, key: str,
                  now: float) -> _BucketState:
        capacity = bucket.capacity * self._scale
        _, state = self._states.setdefault((account, region, key), (bucket, _BucketState(capacity, now)))
        elapsed = max(0.0, now - state.updated)  # a clock set back refills nothing
        state.tokens = min(capacity, state.tokens + bucket.refill_per_second * self._scale * elapsed)
        state.updated = now
        return state


# -- faults --------------------------------------------------------------------------------------------


class ControlRequestError(ValueError):
    """A control API request that cannot be done; its message says why (answered as a 400)."""


@dataclass
class Fault:
    """Calls to ``service``'s ``operation`` ("*": any) throttled, failed with ``status`` or ``delay`` seconds
    slow, until ``ends`` on the clock or for ``remaining`` more calls (None: until cleared)."""

    id: int
    service: str
    operation: str
    kind: str
    ends: float | None
    remaining: int | None
    delay: float = 0.0
    status: int = 500
    matched: int = 0

    @classmethod
    def parse(cls, body: object, fault_id: int, now: float) -> "Fault":
        if not isinstance(body, dict):
            raise ControlRequestError("a fault is a JSON object")
        unknown = sorted(set(body) - _FAULT_FIELDS)
        if unknown:
            raise ControlRequestError(f"unknown fields {unknown}; a fault has {sorted(_FAULT_FIELDS)}")
        service = body.get("service")
        if service != "*" and service not in aws_rate_buckets.SERVICES:
            raise ControlRequestError(f"service must be one of {list(aws_rate_buckets.SERVICES)} or \"*\", "
                                      f"not {service!r}")
        operation = body.get("operation", "*")
        if not isinstance(operation, str) or not operation:
            raise ControlRequestError("operation must be an API name, e.g. \"DescribeInstances\", or \"*\"")
        kind = body.get("kind")
        if kind not in FAULT_KINDS:
            raise ControlRequestError(f"kind must be one of {list(FAULT_KINDS)}, not {kind!r}")
        seconds = _number(body, "seconds", minimum=0, inclusive=False)
        count = body.get("count")
        if count is not None and (not isinstance(count, int) or isinstance(count, bool) or count < 1):
            raise ControlRequestError(f"count must be a whole number of calls, at least 1, not {count!r}")
        if kind == "slow":
            delay = _number(body, "delay", minimum=0, inclusive=True)
            if delay is None:
                raise ControlRequestError("a slow fault needs delay: the seconds each call waits before moto answers")
        elif "delay" in body:
            raise ControlRequestError("delay is for kind \"slow\" only")
        else:
            delay = 0.0
        status = body.get("status", 500)
        if kind != "error" and "status" in body:
            raise ControlRequestError("status is for kind \"error\" only")
        if not isinstance(status, int) or isinstance(status, bool) or not 500 <= status <= 599:
            raise ControlRequestError(f"status must be an HTTP server error, 500 to 599, not {status!r}")
        return cls(fault_id, service, operation, kind, None if seconds is None else now + seconds, count,
                   delay, status)

    def applies_to(self, call: Call) -> bool:
        return (self.service in ("*", call.service.name)) and (self.operation in ("*", call.operation))

    def spent(self, now: float) -> bool:
        return (self.ends is not None and now >= self.ends) or self.remaining == 0

    def report(self, now: float) -> dict:
        shown = asdict(self)
        shown["seconds_left"] = None if self.ends is None else max(0.0, self.ends - now)
        del shown["ends"]
        return shown


def _number(body: dict, name: str, *, minimum: float, inclusive: bool) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value < minimum or (
            value == minimum and not inclusive):
        bound = f"at least {minimum}" if inclusive else f"more than {minimum}"
        raise ControlRequestError(f"{name} must be a number of seconds, {bound}, not {value!r}")
    return float(value)


class Faults:
    """The faults in force, first added first matched. Thread-safe."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._lock = threading.Lock()
        self._faults: list[Fault] = []
        self._next_id = 1

    def add(self, body: object) -> dict:
        """A fault from its JSON form; answers its report."""
        with self._lock:
            now = self._clock()
            fault = Fault.parse(body, self._next_id, now)
            self._next_id += 1
            self._faults.append(fault)
            return fault.report(now)

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def take(self, call: Call) -> Fault | None:
        """The fault that applies to ``call``, counted against its ``count``."""
        with self._lock:
            now = self._clock()
            self._faults = [fault for fault in self._faults if not fault.spent(now)]
            for fault in self._faults:
                if fault.applies_to(call):
                    fault.matched += 1
                    if fault.remaining is not None:
                        fault.remaining -= 1
                    return fault
            return None

    def report(self) -> list[dict]:
        with self._lock:
            now = self._clock()
            return [fault.report(now) for fault in self._faults if not fault.spent(now)]


# -- AWS's answers -------------------------------------------------------------------------------------


def throttled(call: Call, code: str) -> Response:
    if call.service.protocol == "ec2":
        return _error(call, 503, code, "Request limit exceeded.", sender=True)
    return _error(call, 400, code, "Rate exceeded", sender=True)


def failed(call: Call, status: int) -> Response:
    if call.service.protocol == "ec2":
        return _error(call, status, "InternalError", "An internal error has occurred", sender=False)
    return _error(call, status, "InternalFailure",
                  "The request processing has failed because of an unknown error, exception or failure.",
                  sender=False)


def _error(call: Call, status: int, code: str, message: str, *, sender: bool) -> Response:
    """An error as the service sends it: EC2's XML, the query protocol's XML, or awsJson."""
    request_id = str(uuid.uuid4())
    service = call.service
    if service.protocol == "ec2":
        body = ('<?xml version="1.0" encoding="UTF-8"?>'
                f"<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors>"
                f"<RequestID>{request_id}</RequestID></Response>")
        return Response(body, status, content_type="text/xml;charset=UTF-8")
    fault_type = "Sender" if sender else "Receiver"
    if service.protocol == "query":
        body = (f'<ErrorResponse xmlns="{service.xml_namespace}"><Error><Type>{fault_type}</Type>'
                f"<Code>{code}</Code><Message>{message}</Message></Error>"
                f"<RequestId>{request_id}</RequestId></ErrorResponse>")
        return Response(body, status, {"x-amzn-RequestId": request_id}, content_type="text/xml")
    headers = {"x-amzn-RequestId": request_id}
    if service.query_compatible:
        headers["x-amzn-query-error"] = f"{code};{fault_type}"
    return Response(json.dumps({"__type": code, "message": message}), status, headers,
                    content_type=f"application/x-amz-json-{service.json_version}")


# -- the middleware ------------------------------------------------------------------------------------


class Throttling:
    """moto's WSGI ``app`` behind AWS's token buckets (when ``enabled``), the faults, and the control API."""

    def __init__(self, app: Callable, *, enabled: bool = True, scale: float = 1.0,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep):
        self.app = app
        self.enabled = enabled
        self.buckets = Buckets(clock, scale)
        self.faults = Faults(clock)
        self._sleep = sleep
        # botocore's models, read now rather than while the first call waits.
        services_by_signing_name()

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == CONTROL_PATH or path.startswith(CONTROL_PATH + "/"):
            return self._control(Request(environ))(environ, start_response)
        if path.startswith("/moto-api"):
            return self.app(environ, start_response)
        call = identify(environ)
        refusal = None if call is None else self.admit(call)
        if refusal is not None:
            return refusal(environ, start_response)
        return self.app(environ, start_response)

    def admit(self, call: Call) -> Response | None:
        """AWS's refusal of ``call``, or None when moto is to answer it (after a slow fault's delay)."""
        draws = call.draws
        if not draws:
            return None
        fault = self.faults.take(call)
        if fault is not None and fault.kind == "throttle":
            return throttled(call, draws[0].bucket.throttle_code)
        if fault is not None and fault.kind == "error":
            return failed(call, fault.status)
        if self.enabled:
            short = self.buckets.take(call.account, call.region, draws)
            if short:
                return throttled(call, short[0].bucket.throttle_code)
        if fault is not None and fault.kind == "slow":
            self._sleep(fault.delay)
        return None

    # -- the control API
    def _control(self, request: Request) -> Response:
        route = request.path[len(CONTROL_PATH):].strip("/")
        handlers = {
            ("", "GET"): lambda: self.report(),
            ("enabled", "PUT"): lambda: self._set_enabled(_json_body(request)),
            ("reset", "POST"): lambda: self._reset(),
            ("scale", "POST"): lambda: self._scale(_json_body(request)),
            ("faults", "GET"): lambda: {"faults": self.faults.report()},
            ("faults", "POST"): lambda: self.faults.add(_json_body(request)),
            ("faults", "DELETE"): lambda: self._clear_faults(),
        }
        handler = handlers.get((route, request.method))
        if handler is None:
            allowed = sorted(method for path, method in handlers if path == route)
            if allowed:
                return _json_answer({"error": f"{request.path} takes {', '.join(allowed)}"}, 405,
                                    {"Allow": ", ".join(allowed)})
            return _json_answer({"error": f"no {request.path}; the control API: {_routes(handlers)}"}, 404)
        try:
            return _json_answer(handler())
        except ControlRequestError as exc:
            return _json_answer({"error": str(exc)}, 400)

    def report(self) -> dict:
        return {"enabled": self.enabled, "scale": self.buckets.scale, "buckets": self.buckets.report(),
                "faults": self.faults.report()}

    def _set_enabled(self, body: object) -> dict:
        if not isinstance(body, dict) or not isinstance(body.get("enabled"), bool) or set(body) != {"enabled"}:
            raise ControlRequestError('the body is {"enabled": true} or {"enabled": false}')
        self.enabled = body["enabled"]
        return {"enabled": self.enabled}

    def _reset(self) -> dict:
        self.buckets.reset()
        return self.report()

    def _scale(self, body: object) -> dict:
        factor = body.get("factor") if isinstance(body, dict) and set(body) == {"factor"} else None
        if not isinstance(factor, (int, float)) or isinstance(factor, bool) or factor <= 0:
            raise ControlRequestError('the body is {"factor": N}, N a number above 0 (1 is AWS\'s defaults)')
        self.buckets.reset(scale=float(factor))
        return self.report()

    def _clear_faults(self) -> dict:
        self.faults.clear()
        return {"faults": []}


def _json_body(request: Request) -> object:
    raw = request.get_data()
    if not raw:
        raise ControlRequestError("the body is empty; it must be JSON")
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ControlRequestError(f"the body is not JSON: {exc}") from None


def _json_answer(body: object, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    return Response(json.dumps(body), status, dict(headers or {}), content_type="application/json")


def _routes(handlers: Mapping[tuple[str, str], object]) -> str:
    return ", ".join(f"{method} {CONTROL_PATH}{'/' + path if path else ''}" for path, method in handlers)


# -- a client for the control API ----------------------------------------------------------------------


class ThrottlingControl:
    """The control API of the throttling in front of the moto at ``endpoint``."""

    def __init__(self, endpoint: str, timeout: float = 10.0):
        self.endpoint = endpoint.rstrip("/")
        self.timeout = timeout

    def state(self) -> dict:
        return self._send("GET", "")

    def bucket(self, key: str, region: str = "us-east-1") -> dict | None:
        """One bucket's state in ``region`` (e.g. key ``ec2:RunInstances``), None before any call drew from it."""
        return next((b for b in self.state()["buckets"] if b["key"] == key and b["region"] == region), None)

    def enable(self) -> None:
        self._send("PUT", "/enabled", {"enabled": True})

    def disable(self) -> None:
        self._send("PUT", "/enabled", {"enabled": False})

    def reset(self) -> None:
        self._send("POST", "/reset")

    def scale(self, factor: float) -> None:
        self._send("POST", "/scale", {"factor": factor})

    def add_fault(self, service: str, kind: str, operation: str = "*", **limits) -> dict:
        """A fault: ``kind`` "throttle", "error" (``status``) or "slow" (``delay``), for ``seconds`` or
        ``count`` calls or until cleared."""
        return self._send("POST", "/faults", {"service": service, "operation": operation, "kind": kind, **limits})

    def clear_faults(self) -> None:
        self._send("DELETE", "/faults")

    def _send(self, method: str, path: str, body: object = None) -> dict:
        answer = requests.request(method, f"{self.endpoint}{CONTROL_PATH}{path}", timeout=self.timeout,
                                  json=body)
        if answer.status_code != 200:
            raise RuntimeError(f"{method} {CONTROL_PATH}{path} answered {answer.status_code}: {answer.text}")
        return answer.json()
