"""Load-balancer memberships: the Attachment's spec and the progress annotation.

A membership is ``("tg", arn, port)`` for an ELBv2 target group (the port
matters: a target registered with a port must be deregistered with it) or
``("elb", name)`` for a classic ELB.

In the Attachment a target group's port is ``targetPort``, never ``port``:
Metacontroller updates a child's list of objects as a map keyed by a field
every item has, and ``port`` is one it picks, so two target groups on one
port would collapse into one. ``port`` is still read, from Attachments
written before.
"""
from __future__ import annotations

import json
import logging
from typing import Iterable

from hooks import bounds, detacher_names, fields
from hooks.contract import RequestError

Membership = tuple
log = logging.getLogger(__name__)


def from_attachment_spec(spec: dict, where: str = "attachment.spec") -> list[Membership]:
    found: list[Membership] = []
    for i, target in enumerate(fields.objects(spec, "awsTargets", where=where)):
        arn, port = target.get("arn"), target.get("targetPort", target.get("port"))
        if not isinstance(arn, str) or not isinstance(port, int) or isinstance(port, bool):
            raise RequestError(f"{where}.awsTargets[{i}]", "needs a string arn and an integer targetPort")
        found.append(("tg", arn, port))
    for i, elb in enumerate(fields.objects(spec, "awsLoadBalancers", where=where)):
        name = elb.get("name")
        if not isinstance(name, str):
            raise RequestError(f"{where}.awsLoadBalancers[{i}]", "needs a string name")
        found.append(("elb", name))
    return sorted(set(found))


def to_attachment_spec(memberships: Iterable[Membership]) -> dict:
    items = sorted(set(memberships))
    return {
        "awsTargets": [{"arn": m[1], "targetPort": m[2]} for m in items if m[0] == "tg"],
        "awsLoadBalancers": [{"name": m[1]} for m in items if m[0] == "elb"],
    }


def encode(memberships: Iterable[Membership]) -> str:
    return json.dumps([list(m) for m in sorted(set(memberships))], separators=(",", ":"))


def decode(value: str | None) -> list[Membership] | None:
    """The memberships in the progress annotation; None when absent or unreadable.

    Only we write it, so garbage there means "nothing known": deregistering
    again is idempotent, and a re-attach restores the Attachment's list too.
    Refusing instead would leave the node stuck wherever it is.
    """
    if value is None:
        return None
    try:
        raw = bounds.json_value(value, f"parent.metadata.annotations.{detacher_names.DEREGISTERED}")
    except RequestError as exc:
        log.warning("progress annotation unreadable; treated as absent", extra={"error": str(exc)})
        return None
    found = []
    for item in raw if isinstance(raw, list) else [None]:
        if isinstance(item, list) and len(item) == 3 and item[0] == "tg" and isinstance(item[1], str) \
                and isinstance(item[2], int) and not isinstance(item[2], bool) and 0 < item[2] < 65536:
            found.append(("tg", item[1], item[2]))
        elif isinstance(item, list) and len(item) == 2 and item[0] == "elb" and isinstance(item[1], str):
            found.append(("elb", item[1]))
        else:
            log.warning("progress annotation has an unreadable entry; treated as absent", extra={"entry": repr(item)[:200]})
            return None
    return sorted(set(found))


def state_key(membership: Membership) -> str:
    """How a membership's state is keyed where the hook notes what it read: ``arn|port``, or ``elb|name``."""
    return f"{membership[1]}|{membership[2]}" if membership[0] == "tg" else f"elb|{membership[1]}"


def group_by_load_balancer(memberships: Iterable[Membership]) -> dict[tuple[str, str], list[int]]:
    """One entry per target group or ELB, with the ports, so each gets one batched call."""
    groups: dict[tuple[str, str], list[int]] = {}
    for m in sorted(set(memberships)):
        ports = groups.setdefault((m[0], m[1]), [])
        if m[0] == "tg":
            ports.append(m[2])
    return groups
