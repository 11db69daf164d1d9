"""interruption: read what EC2 says is about to happen to this cluster's instances, and record it on their Machines.

CompositeController on InterruptionQueue (cluster-scoped: only cluster admins
name a queue), with no children, resynced about every second. Metacontroller
serialises the syncs of one object, so each queue has exactly one poller
however many hook replicas run; nothing is kept between calls (a message is
deleted only once what it caused is recorded, and SQS's visibility timeout
brings back one whose call crashed).

Each verified call (a body alone receives nothing: decide asks for
verification first):

1. ReceiveMessage: at most ``maxMessagesPerCall`` messages, long-polled at
   most ``waitSeconds``; each read by hooks.interruption.messages against
   the call's clock (a time out of range is malformed, never an exception).
2. Only when there is a claim to check, or status checks are due: the
   Machines listed from the API server, DescribeInstances for every instance
   named, DescribeSpotInstanceRequests for the spot instances of spot
   warnings whose deadline has passed, and every ``statusCheckInterval``
   DescribeInstanceStatus for the instances the Machines record.
3. hooks.interruption.judge: a claim is recorded only on the one Machine
   recording an instance that carries this cluster's tag and is that
   Machine's, and only when EC2 agrees now (a spot instance, a leaving state,
   a spot warning past its deadline reclaimed); a claim for an instance our
   tags give to a Machine that has not recorded it yet waits.
4. Per message, in order: the signal written on the Machine
   (``kube.annotate-machine``, checked against the Machine's uid and the
   signal already there), then the message deleted (``sqs.delete``) only if
   every write before it succeeded (the chain gate); a dropped message is
   deleted at once, a waiting one is left on the queue. Each message's
   outcome is counted in ``nodewarden_interruption_messages_total{kind,
   outcome}`` and the InterruptionQueue's status.

What the signal then causes (the replacement, the cordon, the drain within a
spot warning's two minutes) is the nodepool and machine controllers' to decide.
"""
from __future__ import annotations

import datetime as dt
import sys

from hooks import events, pipeline, runtime
from hooks.config import Settings
from hooks.contract import HookRequest
from hooks.interruption import decision
from hooks.kube import fresh, interruption_reads
from hooks.plan import Outcome, Plan

NAME = "interruption"
FAILURE_REASON = events.INTERRUPTION_ACTION_FAILED
gather = interruption_reads.gather
decide = decision.decide


# --------------------------------------------------------------------------- verify, settle


needs_verification = pipeline.by_plan


def verify(request: HookRequest, ctx: runtime.Context) -> HookRequest:
    return fresh.same_parent(request, ctx.kube)


# Nothing received, nothing written: the status says why, and the next call tries again.
unverified = pipeline.in_status


def settle(request: HookRequest, plan: Plan, outcomes: list[Outcome], settings: Settings,
           now: dt.datetime) -> Plan:
    """A failed write or delete: the message comes back after its visibility timeout; the error is lastError."""
    return pipeline.failed_in_status(plan, outcomes, float(settings.error_backoff_seconds))


def sync(request: HookRequest, ctx: runtime.Context | None = None) -> dict:
    return pipeline.run(sys.modules[__name__], request, ctx)
