"""Power: force the instance off and wait until DescribeInstances says it is; a Reboot starts it again.

Only ``stopped`` or ``terminated`` as DescribeInstances reports it proves a
power-off; StopInstances' answer is a request accepted. A stop is issued,
and a power-off confirmed, only for an instance of this cluster (ownership)
behind a node that is not control plane unless the request opts in
(authority). Each attempt has the spec's timeout, an attempt that errors is
retried after its retryInterval, and after the last of its retries the
request fails with nothing recovered.
"""
from __future__ import annotations

from hooks import bounds, events, fencing_names, fields, timefmt
from hooks.ec2_names import OFF_STATES, RUNNING
from hooks.fencing import health, request_rules
from hooks.fencing.request_phases import authority, ownership, queue, replacement
from hooks.fencing.request_phases.locate import locate
from hooks.fencing.request_phases.state import Step
from hooks.plan import Action

# op -> (the title of its status fields and Events, the errorReason prefix, the phase it runs in)
OPERATIONS = {"stop": ("Stop", "PowerOff", fencing_names.POWERING_OFF), "start": ("Start", "PowerOn", fencing_names.POWERING_ON)}


def start(step: Step) -> None:
    """The request's first call: its start time and phase, said once."""
    if not step.status.get("startTime"):
        step.status["startTime"] = step.stamp()
    if not step.status.get("phase"):
        step.phase = fencing_names.PENDING
        step.event("FencingStarted", f"Fencing node {step.spec.node_name}: action {step.spec.action}, "
                                     f"recovery {step.spec.strategy}")


def observe_instance(step: Step) -> str | None:
    """The instance's state as gather read it this call; None when it could not be read."""
    seen = step.observed.get("instance")
    seen = seen if isinstance(seen, dict) else {}
    if isinstance(seen.get("state"), str) and seen["state"]:
        step.provider["instanceState"] = seen["state"]
        step.provider.pop("lastDescribeError", None)
        return seen["state"]
    if seen.get("error"):
        # Unreadable is not confirmed: keep polling; the attempt timeout decides.
        step.provider["lastDescribeError"] = str(seen["error"])[:1000]
    return None


def power_off(step: Step) -> None:
    if queue.queued(step) or not locate(step):
        return
    state = observe_instance(step)
    if state in OFF_STATES:
        if not cleared_to_power_off(step):
            return
        step.provider["poweredOffTime"] = step.stamp()
        step.condition(fencing_names.FENCING_SUCCEEDED, "True", "PoweredOff",
                       f"instance {step.provider['instanceID']} is {state}")
        step.phase = fencing_names.RECOVERING
        step.event("PoweredOff", f"Instance {step.provider['instanceID']} is {state}: node "
                                 f"{step.spec.node_name} can no longer write")
        return
    if not health.is_ready(fields.mapping(step.node, "status", where="related.Node")) and \
            not replacement.standby_before_stop(step):
        return  # a group's instance enters Standby before a Reboot's stop
    attempt(step, "stop")


def cleared_to_power_off(step: Step) -> bool:
    """The instance is this cluster's and the node not control plane (or the request opts in)."""
    return ownership.ours(step) and authority.may_fence(step)


def power_on(step: Step) -> None:
    if not locate(step):
        return
    state = observe_instance(step) if step.observed.get("instance") else None
    if state == RUNNING and bounds.status_counter(step.provider, "startAttempts", request_rules.MAX_RETRIES) > 0:
        step.provider["poweredOnTime"] = step.stamp()
        step.event("PoweredOn", f"Instance {step.provider['instanceID']} is running again")
        return step.succeed()
    attempt(step, "start")


def attempt(step: Step, op: str) -> None:
    """One step of a power operation with the spec's retries, interval and timeout."""
    title, what, phase = OPERATIONS[op]
    ps = step.provider
    count = bounds.status_counter(ps, f"{op}Attempts", request_rules.MAX_RETRIES)
    last = timefmt.parse(ps.get(f"last{title}Time"))
    error = ps.get(f"last{title}Error")
    elapsed = (step.now - last).total_seconds() if last else None
    if count == 0 or elapsed is None:
        return issue(step, op, count + 1)
    if error:
        if count >= step.spec.retries:
            return step.fail(f"{what}Failed", f"{op} of instance {ps.get('instanceID')} failed "
                                              f"{count} time(s); last: {error}")
        if elapsed >= step.spec.retry_interval:
            return issue(step, op, count + 1)
        return step.resync(step.spec.retry_interval - elapsed)
    if elapsed >= step.spec.timeout:
        if count >= step.spec.retries:
            return step.fail(f"{what}Timeout", f"instance {ps.get('instanceID')} still "
                                               f"{ps.get('instanceState', 'unknown')} {step.spec.timeout:g}s after "
                                               f"attempt {count} of {step.spec.retries}")
        return issue(step, op, count + 1)
    step.phase = phase
    step.resync(min(step.settings.fencing_poll_seconds, step.spec.timeout - elapsed))


def issue(step: Step, op: str, number: int) -> None:
    title, _, phase = OPERATIONS[op]
    ps = step.provider
    if op == "stop" and health.is_ready(fields.mapping(step.node, "status", where="related.Node")):
        # Fencing is for a node that stopped answering; a Ready node is serving and writing.
        return step.fail("NodeReady", f"Node {step.spec.node_name} is Ready: only a NotReady node is powered off")
    if not (cleared_to_power_off(step) if op == "stop" else ownership.ours(step)):
        return
    ps[f"{op}Attempts"] = number
    ps[f"last{title}Time"] = step.stamp()
    ps.pop(f"last{title}Error", None)
    step.phase = phase
    verb = "Force-stopping" if op == "stop" else "Starting"
    step.actions.append(Action(
        f"aws.{op}", ps["instanceID"], {"region": ps.get("region"), "attempt": number},
        requires=ownership.proof(step),
        reports=events.normal(f"{title}Requested",
                              f"{verb} instance {ps['instanceID']} (attempt {number} of {step.spec.retries})")))
    step.resync(step.settings.fencing_poll_seconds)
