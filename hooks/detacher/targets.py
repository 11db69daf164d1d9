"""Load-balancer memberships: the Attachment's spec and the progress annotation.

A membership is ``("tg", arn, port)`` for an ELBv2 target group (the port
matters: a target registered with a port must be deregistered with it) or
``("elb", name)`` for a classic ELB.
"""
from __future__ import annotations

import json
from typing import Iterable

from hooks import fields
from hooks.contract import RequestError
from hooks.detacher import names

Membership = tuple


def from_attachment_spec(spec: dict, where: str = "attachment.spec") -> list[Membership]:
    found: list[Membership] = []
    for i, target in enumerate(fields.objects(spec, "awsTargets", where=where)):
        arn, port = target.get("arn"), target.get("port")
        if not isinstance(arn, str) or not isinstance(port, int) or isinstance(port, bool):
            raise RequestError(f"{where}.awsTargets[{i}]", "needs a string arn and an integer port")
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
        "awsTargets": [{"arn": m[1], "port": m[2]} for m in items if m[0] == "tg"],
        "awsLoadBalancers": [{"name": m[1]} for m in items if m[0] == "elb"],
    }


def encode(memberships: Iterable[Membership]) -> str:
    return json.dumps([list(m) for m in sorted(set(memberships))], separators=(",", ":"))


def decode(value: str | None) -> list[Membership] | None:
    """The memberships in the progress annotation; None when absent."""
    if value is None:
        return None
    try:
        raw = json.loads(value)
    except ValueError:
        raise RequestError(f"parent.metadata.annotations.{names.DEREGISTERED}", "is not JSON") from None
    found = []
    for item in raw if isinstance(raw, list) else [None]:
        if isinstance(item, list) and len(item) == 3 and item[0] == "tg" and isinstance(item[2], int):
            found.append(("tg", str(item[1]), item[2]))
        elif isinstance(item, list) and len(item) == 2 and item[0] == "elb":
            found.append(("elb", str(item[1])))
        else:
            raise RequestError(
                f"parent.metadata.annotations.{names.DEREGISTERED}", f"has an unreadable entry {item!r}"
            )
    return sorted(set(found))


def group_by_load_balancer(memberships: Iterable[Membership]) -> dict[tuple[str, str], list[int]]:
    """One entry per target group or ELB, with the ports, so each gets one batched call."""
    groups: dict[tuple[str, str], list[int]] = {}
    for m in sorted(set(memberships)):
        ports = groups.setdefault((m[0], m[1]), [])
        if m[0] == "tg":
            ports.append(m[2])
    return groups
