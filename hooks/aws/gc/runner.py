"""Carry out cluster-gc's delete actions, in task order, within a time budget.

Actions come in task order, each with its ``stage`` (index in TASK_ORDER).
A stage runs only once every earlier stage of this call has succeeded: a
target group is not tried while a load balancer that may use it failed to go.
The runner never waits: what is in use, throttled or over the budget is
reported, and the next hook call (after a resync) tries again.
"""
from __future__ import annotations

import time
from typing import Callable

from botocore.exceptions import BotoCoreError, ClientError

from hooks.aws import gc
from hooks.aws.clients import describe_error, error_code
from hooks.aws.gc.resources import TASK_ORDER
from hooks.metrics import record_action
from hooks.plan import Action, Outcome

CONTROLLER = "cluster-gc"

# Outcome.result of an action that did not delete (DELETED/GONE when it did).
IN_USE = "in-use"  # still used by something that is going away: retry later
THROTTLED = "throttled"  # AWS asked us to slow down: stop this call
FAILED = "failed"  # any other error: retried with backoff, reported
DEFERRED = "deferred"  # not tried: out of time, or stopped after throttling
HELD = "held"  # not tried: an earlier task of this call is unfinished

IN_USE_CODES = ("ResourceInUse", "DependencyViolation", "VolumeInUse", "IncorrectState")
THROTTLE_CODES = (
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestLimitExceeded",
    "RequestThrottled",
    "RequestThrottledException",
    "TooManyRequestsException",
    "SlowDown",
)


def run(
    aws,
    actions: list[Action],
    *,
    deadline: float,
    clock: Callable[[], float] = time.monotonic,
    delete: Callable[..., str] = gc.delete,
) -> list[Outcome]:
    """One Outcome per action, in order; never raises for an AWS failure."""
    outcomes: list[Outcome] = []
    unfinished_stage: int | None = None
    stopped = ""
    for action in actions:
        params = action.params
        stage = params["stage"]
        if stopped:
            outcomes.append(Outcome(action, False, stopped, DEFERRED))
            continue
        if unfinished_stage is not None and stage > unfinished_stage:
            outcomes.append(Outcome(action, False, f"waiting for {TASK_ORDER[unfinished_stage]}s to go", HELD))
            continue
        # The first action always runs, so a slow discovery cannot starve every call.
        if outcomes and clock() >= deadline:
            stopped = "time budget of this call used up"
            outcomes.append(Outcome(action, False, stopped, DEFERRED))
            continue
        outcome = _delete_one(aws, action, delete)
        outcomes.append(outcome)
        record_action(CONTROLLER, f"delete-{params['kind']}", outcome.ok)
        if not outcome.ok:
            unfinished_stage = stage if unfinished_stage is None else min(unfinished_stage, stage)
            if outcome.result == THROTTLED:
                stopped = "throttled by AWS"
            elif outcome.result == FAILED and outcome.error.startswith("transport:"):
                stopped = "AWS unreachable"
    return outcomes


def _delete_one(aws, action: Action, delete: Callable[..., str]) -> Outcome:
    params = action.params
    try:
        status = delete(aws, params["kind"], params["region"], action.target)
    except ClientError as exc:
        code = error_code(exc)
        if code in THROTTLE_CODES:
            return Outcome(action, False, describe_error(exc), THROTTLED)
        if code in IN_USE_CODES:
            return Outcome(action, False, describe_error(exc), IN_USE)
        return Outcome(action, False, describe_error(exc), FAILED)
    except BotoCoreError as exc:
        # Endpoint unreachable, timeouts: every further call would wait as long.
        return Outcome(action, False, f"transport: {describe_error(exc)}", FAILED)
    return Outcome(action, True, "", status)
