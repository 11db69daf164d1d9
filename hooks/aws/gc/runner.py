"""The order and budget of cluster-gc's delete actions, and what their outcomes mean.

Actions come in task order, each with its ``stage`` (index in TASK_ORDER).
A stage runs only once every earlier stage of this call has succeeded: a
target group is not tried while a load balancer that may use it failed to go.
The runner never waits: what is in use, throttled or over the budget is
reported, and the next hook call (after a resync) tries again.
"""
from __future__ import annotations

import time
from typing import Callable

from hooks.aws_rate_buckets import THROTTLE_CODES
from hooks.plan import DEFERRED, GATED, HELD, TRANSPORT, Action, Gate, Outcome
from hooks.teardown.tasks import TASK_ORDER

# What an outcome means (classify); DELETED/GONE when the delete succeeded, and the Gate's codes when not
# tried: DEFERRED (out of time, or stopped after throttling), HELD (an earlier task of this call is unfinished).
IN_USE = "in-use"  # still used by something that is going away: retry later
THROTTLED = "throttled"  # AWS asked us to slow down: stop this call
FAILED = "failed"  # any other error: retried with backoff, reported

IN_USE_CODES = ("ResourceInUse", "DependencyViolation", "VolumeInUse", "IncorrectState",
                "InvalidNetworkInterface.InUse", "InvalidIPAddress.InUse")


class StageGate(Gate):
    """cluster-gc's order and budget for its deletes (see the module docstring).

    ``budget`` seconds from the start of the hook call; the first delete
    always runs, so a slow discovery cannot starve every call.
    """

    def __init__(self, budget: float, clock: Callable[[], float] = time.monotonic):
        self.budget, self.clock = budget, clock

    def hold(self, action: Action, outcomes: list[Outcome], started: float) -> Outcome | None:
        stage = action.params["stage"]
        stopped = next((o.error for o in outcomes if o.code == DEFERRED), "")
        for outcome in outcomes:
            kind = classify(outcome)
            if kind == THROTTLED:
                stopped = "throttled by AWS"
            elif kind == FAILED and outcome.code == TRANSPORT:
                stopped = "AWS unreachable"
        if stopped:
            return Outcome(action, False, stopped, code=DEFERRED)
        unfinished = [o.action.params["stage"] for o in outcomes if not o.ok]
        if unfinished and stage > min(unfinished):
            return Outcome(action, False, f"waiting for {TASK_ORDER[min(unfinished)]}s to go", code=HELD)
        if outcomes and self.clock() >= started + self.budget:
            return Outcome(action, False, "time budget of this call used up", code=DEFERRED)
        return None


def classify(outcome: Outcome) -> str:
    """What an outcome means for cluster-gc: the delete status when it succeeded, else why not."""
    if outcome.ok:
        return outcome.result
    if outcome.code in GATED:
        return outcome.code
    if outcome.code in THROTTLE_CODES:
        return THROTTLED
    if outcome.code in IN_USE_CODES:
        return IN_USE
    return FAILED
