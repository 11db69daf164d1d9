"""What one interruption call reads: the queue's messages, and only when a claim or a status check needs
them, the Machines and EC2's word on their instances; failures are recorded, never raised.
"""
from __future__ import annotations

import datetime as dt

from hooks import runtime
from hooks.aws import instance_health, sqs_messages
from hooks.contract import HookRequest, RequestError
from hooks.interruption import decision, judge, messages, queue
from hooks.kube import machine_api
from hooks.plan import error_text


def _region(ctx: runtime.Context) -> str:
    try:
        return ctx.aws.region(ctx.settings.aws_region or None)
    except ValueError:
        return ""


def gather(request: HookRequest, ctx: runtime.Context, now: dt.datetime) -> dict:
    """The look-ups of a verified call; a body alone receives nothing (decide asks for verification)."""
    if not request.verified:
        return {}
    try:
        spec = queue.parse(request.parent)
    except RequestError:
        return {}
    observed: dict = {"region": _region(ctx)}
    try:
        client = ctx.aws.client("sqs", spec.region or None)
        observed["messages"] = sqs_messages.receive(client, spec.queue_url, spec.max_messages, spec.wait_seconds)
    except Exception as exc:  # noqa: BLE001 - recorded; nothing received is nothing decided
        observed["receiveError"] = error_text(exc)
        observed["messages"] = []
    claims = [c for c in (messages.parse(messages.message_id(m.get("id")), m.get("body"), observed["region"], now)
                          for m in observed["messages"]) if isinstance(c, messages.Claim)]
    checks_due = decision.status_check_due(request, spec, now)
    if not claims and not checks_due:
        return observed  # nothing to check: no cluster-wide list of Machines
    try:
        observed["machines"] = [judge.machine_summary(m) for m in machine_api.listed(ctx.kube)]
    except Exception as exc:  # noqa: BLE001 - not listed is not proof of anything
        observed["machinesError"] = error_text(exc)
        return observed
    wanted = {iid for c in claims for iid in c.instances}
    if checks_due:
        recorded = sorted({m["instanceID"] for m in observed["machines"] if m["instanceID"]})
        try:
            observed["impaired"] = instance_health.impaired(_ec2(ctx), recorded)
            wanted |= set(observed["impaired"])
        except Exception as exc:  # noqa: BLE001
            observed["statusError"] = error_text(exc)
    if wanted:
        try:
            observed["instances"] = instance_health.describe(_ec2(ctx), sorted(wanted))
        except Exception as exc:  # noqa: BLE001 - not described is not proof of anything
            observed["instancesError"] = error_text(exc)
            return observed
    _spot_requests(ctx, claims, now, observed)
    return observed


def _spot_requests(ctx: runtime.Context, claims: list, now: dt.datetime, observed: dict) -> None:
    """For spot warnings past their deadline: each spot instance's request status, as ``spotRequest``."""
    described = observed.get("instances") or {}
    stale = sorted({iid for c in claims if judge.spot_status_needed(c, now) for iid in c.instances
                    if (described.get(iid) or {}).get("lifecycle") == "spot"})
    if not stale:
        return
    try:
        codes = instance_health.spot_requests(_ec2(ctx), stale)
    except Exception as exc:  # noqa: BLE001 - not asked is not reclaimed, nor proof it is not
        observed["spotRequestsError"] = error_text(exc)
        return
    for iid, code in codes.items():
        described[iid]["spotRequest"] = code


def _ec2(ctx: runtime.Context):
    return ctx.aws.client("ec2", ctx.settings.aws_region or None)
