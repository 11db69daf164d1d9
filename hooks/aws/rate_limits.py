"""The process's own share of AWS's request buckets: every AWS call waits for a token here first.

AWS's buckets are the account's (hooks/aws_rate_buckets.py), shared with
every other tool in it. Each process keeps a copy of each bucket scaled to
its share (``NODEWARDEN_AWS_RATE_SHARE`` of the account, split over
``NODEWARDEN_AWS_RATE_PROCESSES`` processes), and every HTTP attempt a
client makes (botocore's retries included) takes its tokens from it before
it is sent. So the process spends its share and no more, whatever its
threads do at once.

A call that finds its bucket empty reserves the next tokens and waits for
them, as long as the hook call it belongs to may still wait
(``NODEWARDEN_AWS_RATE_WAIT_SECONDS`` a hook call, all its AWS calls
together). A call that cannot get its tokens in that time is not sent: it
fails at once with the service's own throttling error (``RequestLimitExceeded``
or ``Throttling``), which every caller already treats as "try again later",
so the hook answers and comes back.

A slow or refusing AWS never holds a hook call past Metacontroller's hook
timeout either. Within ``NODEWARDEN_HOOK_AWS_RETRY_SECONDS`` of the hook
call's start, botocore retries an attempt only if the retry's back-off at its
longest ends in time; otherwise the call fails with the error its last
attempt had, as it would once its retries were spent. Once an attempt of the
hook call has timed out, AWS is slow: a later attempt, retry or not, is sent
only if it could end in time at its longest (connect and read timeouts), or
not at all (TimedOut), so a hook call meeting a slow AWS answers instead of
making its next call wait as long again.

A bucket AWS publishes no figure for is not limited until AWS itself says
"slow down" to a call that draws from it: from then on, for
ENGAGED_SECONDS, the process limits it too, at its share of the figure the
table assumes, so a wave of calls stops sending attempts AWS refuses
anyway (each one a throttle for every other tool in the account).
"""
from __future__ import annotations

import contextlib
import contextvars
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Callable, Iterator, Mapping
from urllib.parse import parse_qsl

from botocore.exceptions import ClientError, ConnectTimeoutError, ReadTimeoutError

from hooks import aws_rate_buckets
from hooks.metrics import AWS_RATE_LIMITED, AWS_RATE_WAIT_SECONDS

# How long a bucket AWS publishes no figure for stays limited after AWS throttled a call drawing from it.
ENGAGED_SECONDS = 120.0
# Seconds a call outside any hook call (warm-up, the CLI, a background refresh) may wait for its tokens.
OUTSIDE_HOOK_WAIT_SECONDS = 5.0
# What the hook call being served may still wait for tokens, all its AWS calls together (None: not in one).
_allowance: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar("aws_rate_allowance", default=None)
# The tokens the calls of a counting_draws block drew, per bucket name (None: not counting).
_drawn: contextvars.ContextVar[Drawn | None] = contextvars.ContextVar("aws_rate_drawn", default=None)
# The time the hook call being served gives its AWS attempts (None: not in one).
_window: contextvars.ContextVar[_Window | None] = contextvars.ContextVar("aws_attempt_window", default=None)
# Operations whose next attempt in this block has its tokens already (paid_ahead).
_prepaid: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("aws_rate_prepaid", default=None)
# Each metered client's limiter, service and region, for paid_ahead.
_METERED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class Limited(ClientError):
    """No token within the time the hook call may wait: the call was not sent."""

    def __init__(self, bucket: aws_rate_buckets.Bucket, key: str, operation: str, wait: float,
                 why: str | None = None):
        why = why or f"this process's share of {key} has no token for {wait:.1f} s (nodewarden's own rate limit)"
        super().__init__({"Error": {"Code": bucket.throttle_code, "Message": f"not sent: {why}"},
                          "ResponseMetadata": {"HTTPStatusCode": 0}}, operation)


class TimedOut(Limited):
    """An attempt of the hook call timed out, and this one could not end within the hook call's time: not
    sent. A throttling code, so every caller takes it as "try again later"."""


@dataclass
class _Window:
    clock: Callable[[], float]
    started: float
    seconds: float
    timed_out: bool = False  # an attempt within it has timed out: AWS is slow now

    def left(self) -> float:
        return self.seconds - (self.clock() - self.started)


@contextlib.contextmanager
def hook_call(wait_seconds: float, retry_seconds: float | None = None,
              clock: Callable[[], float] = time.monotonic) -> Iterator[None]:
    """Within this block, AWS calls together wait at most ``wait_seconds`` for tokens, and an attempt is
    retried only if it can end within ``retry_seconds`` of the block's start (None: botocore decides alone)."""
    token = _allowance.set([wait_seconds])
    window = _window.set(None if retry_seconds is None else _Window(clock, clock(), retry_seconds))
    try:
        yield
    finally:
        _window.reset(window)
        _allowance.reset(token)


def retry_fits(attempts: int, attempt_seconds: float) -> bool:
    """Whether a retry after ``attempts`` attempts ends within the hook call's time: its back-off at its
    longest (botocore's standard back-off: up to 2 ** (attempts - 1) seconds), and, once an attempt of the
    hook call has timed out, the attempt itself at its longest too."""
    window = _window.get()
    if window is None:
        return True
    return 2 ** max(0, attempts - 1) + (attempt_seconds if window.timed_out else 0.0) <= window.left()


def attempt_fits(attempt_seconds: float) -> bool:
    """Whether an attempt may be sent: always, unless one of the hook call's has timed out and this one, at
    its longest, would end past the hook call's time."""
    window = _window.get()
    return window is None or not window.timed_out or attempt_seconds <= window.left()


def timed_out() -> None:
    """An attempt of the hook call being served timed out."""
    window = _window.get()
    if window is not None:
        window.timed_out = True


class Drawn:
    """Tokens drawn per bucket name, by any thread the counting block's context runs in."""

    def __init__(self):
        self._lock = threading.Lock()
        self._tokens: dict[str, float] = {}

    def add(self, draws: tuple[aws_rate_buckets.Draw, ...]) -> None:
        with self._lock:
            for draw in draws:
                self._tokens[draw.bucket.name] = self._tokens.get(draw.bucket.name, 0.0) + draw.tokens

    def of(self) -> dict[str, float]:
        with self._lock:
            return dict(self._tokens)


@contextlib.contextmanager
def counting_draws() -> Iterator[Drawn]:
    """Count what every AWS call made within this block draws from each bucket, whether or not the limiter
    limits it (a thread pool inside counts only where its tasks run in a copy of this context)."""
    drawn = Drawn()
    token = _drawn.set(drawn)
    try:
        yield drawn
    finally:
        _drawn.reset(token)


@dataclass
class _Tokens:
    capacity: float
    refill_per_second: float
    level: float
    at: float

    def refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self.at) * self.refill_per_second)
        self.at = now


class Limiter:
    """Token buckets per (region, bucket key) at ``share`` of AWS's figures, shared by every thread.

    ``shares`` overrides ``share`` for one bucket, by name (``ec2-run-instances``). A share of 0 turns
    the limiter off for that bucket; a bucket AWS publishes no figure for and ``shares`` leaves out is
    limited only while engaged (``throttled``). ``outside_hook_wait``: how long a call made outside any
    hook call may wait for its tokens.
    """

    def __init__(self, share: float, shares: Mapping[str, float] | None = None, *,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                 outside_hook_wait: float = OUTSIDE_HOOK_WAIT_SECONDS):
        self._share = share
        self._outside_hook_wait = outside_hook_wait
        self._shares = dict(shares or {})
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._buckets: dict[tuple[str, str], _Tokens] = {}
        self._engaged_until: dict[str, float] = {}  # bucket name -> clock

    def share_of(self, bucket: aws_rate_buckets.Bucket) -> float:
        # A bucket whose size AWS does not publish limits nothing unless named, or until AWS throttled a call
        # of it: a guessed limit must not slow a node's detach or launch; AWS's own answer is the limit there.
        if bucket.name in self._shares:
            return self._shares[bucket.name]
        if bucket.documented or self._engaged_until.get(bucket.name, float("-inf")) > self._clock():
            return self._share
        return 0.0

    def throttled(self, region: str, draws: tuple[aws_rate_buckets.Draw, ...]) -> None:
        """AWS answered a call with these draws "slow down": limit its unpublished buckets for a while, from
        empty (AWS just said its bucket is)."""
        now = self._clock()
        with self._lock:
            for draw in draws:
                if draw.bucket.documented or draw.bucket.name in self._shares:
                    continue
                self._engaged_until[draw.bucket.name] = now + ENGAGED_SECONDS
                tokens = self._tokens(region, draw, now)
                if tokens is not None:
                    tokens.level, tokens.at = min(tokens.level, 0.0), now

    def acquire(self, region: str, operation: str, draws: tuple[aws_rate_buckets.Draw, ...],
                within: float | None = None) -> float:
        """Take the call's tokens, waiting for them while the hook call may (and at most ``within``); the
        seconds waited.

        Raises Limited, taking nothing, when they would come later than that.
        """
        now = self._clock()
        allowance = _allowance.get()
        allowed = max(0.0, allowance[0]) if allowance is not None else self._outside_hook_wait
        if within is not None:
            allowed = min(allowed, max(0.0, within))
        with self._lock:
            held = []
            for draw in draws:
                tokens = self._tokens(region, draw, now)
                if tokens is not None:
                    tokens.refill(now)
                    want = min(draw.tokens, tokens.capacity)
                    held.append(((want - tokens.level) / tokens.refill_per_second, draw, tokens, want))
            if not held:
                return 0.0
            wait, slowest, _, _ = max(held, key=lambda h: h[0])
            if wait > allowed:
                AWS_RATE_LIMITED.labels(slowest.bucket.name, operation).inc()
                raise Limited(slowest.bucket, slowest.key, operation, wait)
            for _, _, tokens, want in held:
                tokens.level -= want  # below zero: a reservation the next callers wait behind
            if allowance is not None and wait > 0:
                allowance[0] -= wait
        if wait > 0:
            AWS_RATE_WAIT_SECONDS.labels(slowest.bucket.name, operation).observe(wait)
            self._sleep(wait)
        return max(0.0, wait)

    def ready(self, region: str, draws: tuple[aws_rate_buckets.Draw, ...]) -> bool:
        """Whether a call with these draws would get its tokens now, without waiting (nothing is taken)."""
        now = self._clock()
        with self._lock:
            for draw in draws:
                tokens = self._tokens(region, draw, now)
                if tokens is not None:
                    tokens.refill(now)
                    if tokens.level < min(draw.tokens, tokens.capacity):
                        return False
        return True

    def _tokens(self, region: str, draw: aws_rate_buckets.Draw, now: float) -> _Tokens | None:
        share = self.share_of(draw.bucket)
        if share <= 0:
            return None
        key = (region, draw.key)
        tokens = self._buckets.get(key)
        if tokens is None:
            capacity = max(1.0, draw.bucket.capacity * share)
            tokens = self._buckets[key] = _Tokens(capacity, draw.bucket.refill_per_second * share, capacity, now)
        return tokens

    def refill_of(self, bucket: aws_rate_buckets.Bucket) -> float | None:
        """Tokens a second this process's share of ``bucket`` refills; None when it limits nothing."""
        share = self.share_of(bucket)
        return bucket.refill_per_second * share if share > 0 else None

    def levels(self) -> dict[tuple[str, str], float]:
        """Tokens in each bucket now (for tests and the benchmarks)."""
        now = self._clock()
        with self._lock:
            for tokens in self._buckets.values():
                tokens.refill(now)
            return {key: tokens.level for key, tokens in self._buckets.items()}


def wire_form(body) -> dict[str, str]:
    """The query-protocol parameters of a request body, as sent or as botocore holds them before (a dict);
    empty for a JSON body or none."""
    if isinstance(body, dict):
        return {str(k): str(v) for k, v in body.items()}
    if isinstance(body, (bytes, bytearray)):
        body = body.decode("utf-8", "replace")
    if not isinstance(body, str) or not body or body.lstrip().startswith("{"):
        return {}
    return dict(parse_qsl(body, keep_blank_values=True))


def ready(client, operation: str) -> bool:
    """Whether one ``operation`` call of ``client`` would get its tokens now (always, for a client no limiter
    meters)."""
    metered = _METERED.get(client)
    if metered is None:
        return True
    limiter, service, region = metered
    return limiter.ready(region, aws_rate_buckets.request_draws(service, operation, {}))


@contextlib.contextmanager
def paid_ahead(client, operation: str, within: float) -> Iterator[None]:
    """Take the tokens of one ``operation`` call of ``client`` now, waiting for them at most ``within``
    seconds (and no longer than the hook call may), for a call made in this block without waiting again:
    its first attempt takes nothing more, and a retry goes out only on a token already there.

    A call that must go out by a deadline checks it inside the block, after its tokens came, and is then
    sent at once: the wait for tokens never carries it past its deadline. Raises Limited, taking nothing,
    when the tokens would come later than ``within``.
    """
    paid = None
    metered = _METERED.get(client)
    if metered is not None:
        limiter, service, region = metered
        draws = aws_rate_buckets.request_draws(service, operation, {})
        if draws:
            limiter.acquire(region, operation, draws, within=within)
            paid = _prepaid.set([operation])
    no_wait = _allowance.set([0.0])
    try:
        yield
    finally:
        _allowance.reset(no_wait)
        if paid is not None:
            _prepaid.reset(paid)


def meter(client, service: str, region: str, limiter: Limiter) -> None:
    """Make every HTTP attempt of ``client`` take its tokens from ``limiter`` before it is sent, and tell it
    of every attempt AWS answered with a throttling code; hold its retries and attempts to the hook call's
    time."""
    _METERED[client] = (limiter, service, region)
    # The longest one attempt can take: its connection, then its answer.
    attempt_seconds = (client.meta.config.connect_timeout or 0) + (client.meta.config.read_timeout or 0)

    def before_send(request=None, event_name: str = "", **_):
        operation = event_name.rsplit(".", 1)[-1]
        draws = aws_rate_buckets.request_draws(service, operation, wire_form(getattr(request, "body", None)))
        if draws:
            counted = _drawn.get()
            if counted is not None:
                counted.add(draws)
            if not attempt_fits(attempt_seconds):
                raise TimedOut(draws[0].bucket, draws[0].key, operation, 0.0,
                               "an attempt of this hook call timed out, and this one could not end within the "
                               "hook call's time (NODEWARDEN_HOOK_AWS_RETRY_SECONDS)")
            prepaid = _prepaid.get()
            if prepaid and operation in prepaid:
                prepaid.remove(operation)  # its tokens were taken by paid_ahead
            else:
                limiter.acquire(region, operation, draws)
        return None  # botocore sends the request itself

    def needs_retry(response=None, operation=None, request_dict=None, **_):
        code = ((response[1] if response else None) or {}).get("Error", {}).get("Code")
        if code in aws_rate_buckets.THROTTLE_CODES and operation is not None:
            limiter.throttled(region, aws_rate_buckets.request_draws(
                service, operation.name, wire_form((request_dict or {}).get("body"))))
        return None  # botocore's own retry handler decides

    def retry_within_hook_call(attempts: int = 1, caught_exception=None, **_):
        if isinstance(caught_exception, (ConnectTimeoutError, ReadTimeoutError)):
            timed_out()
        # botocore takes the first answer that is not None, and this handler comes before its retry handler:
        # False is "no retry", None leaves the choice to it.
        return None if retry_fits(attempts, attempt_seconds) else False

    client.meta.events.register("before-send", before_send)
    client.meta.events.register("needs-retry", needs_retry)
    client.meta.events.register_first(f"needs-retry.{client.meta.service_model.service_id.hyphenize()}",
                                      retry_within_hook_call)
