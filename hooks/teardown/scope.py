"""Whether a finalize call collects at all, and for which cluster, region and tasks.

Read from the parent and the settings alone: the global switch, a clusterctl
move, the opt-out annotation (a Go boolean, absent means true), the tasks
annotation, the cluster's name and the region. A value that cannot be read
blocks the deletion rather than guessing.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from hooks import fields
from hooks.config import Settings
from hooks.contract import HookRequest, RequestError
from hooks.teardown_names import (
    CLUSTER_NAME_LABEL,
    DELETE_FOR_MOVE,
    GC_ANNOTATION,
    MANAGED_CONTROL_PLANE,
    TASKS_ANNOTATION,
)
from hooks.teardown.tasks import DEFAULT_TASKS, TASK_ORDER

SKIP = "skip"  # finalize at once, delete nothing
BLOCKED = "blocked"  # hold the cluster: something must be fixed first
COLLECT = "collect"

# An AWS region's shape; anything else never reaches an endpoint name.
_REGION = re.compile(r"[a-z]{2,8}(-[a-z0-9]{1,16}){1,4}")


def is_region(value: str) -> bool:
    """Whether ``value`` is shaped like an AWS region (``us-east-1``, ``us-gov-west-1``)."""
    return bool(_REGION.fullmatch(value))


@dataclass(frozen=True)
class Scope:
    decision: str
    reason: str = ""
    cluster_name: str = ""
    region: str = ""
    tasks: tuple[str, ...] = ()
    # The AWS Load Balancer Controller's resources are collected too (NODEWARDEN_GC_INCLUDE_LB_CONTROLLER).
    include_lb_controller: bool = False


def parse_go_bool(value: str) -> bool | None:
    """strconv.ParseBool, which CAPA uses for the opt-out annotation; None if unreadable."""
    if value in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if value in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    return None


def parse_tasks(value: str | None) -> tuple[tuple[str, ...], str]:
    """(tasks in TASK_ORDER, problem). Absent or empty means CAPA's default tasks."""
    if value is None or not value.strip():
        return DEFAULT_TASKS, ""
    asked = [item.strip() for item in value.split(",") if item.strip()]
    unknown = [item for item in asked if item not in TASK_ORDER]
    if unknown:
        return (), (
            f"annotation {TASKS_ANNOTATION}={value!r} names unknown task(s) {', '.join(unknown)}; "
            f"known: {', '.join(TASK_ORDER)}"
        )
    return tuple(task for task in TASK_ORDER if task in asked), ""


_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"


def eks_cluster_name(name: str, namespace: str) -> str:
    """The EKS cluster name CAPA's webhook gives an AWSManagedControlPlane without one.

    ``<namespace>_<name>`` with dots as underscores; from 100 bytes on,
    ``capa_`` plus a 27-character base-36 digest (blake2b) of that string.
    """
    joined = f"{namespace}_{name.replace('.', '_')}"
    if len(joined.encode()) < 100:
        return joined
    digest = hashlib.blake2b(joined.encode(), digest_size=32 - len("capa_")).digest()
    return "capa_" + "".join(_BASE36[b % 36] for b in digest)


def cluster_name(parent: dict) -> tuple[str, str]:
    """(the workload cluster's name as its cloud controller tags it, problem)."""
    meta = parent["metadata"]
    if parent.get("kind") == MANAGED_CONTROL_PLANE:
        name = fields.string(parent, "spec", "eksClusterName")
        return name or eks_cluster_name(meta["name"], meta.get("namespace") or "default"), ""
    label = (meta.get("labels") or {}).get(CLUSTER_NAME_LABEL)
    if label:
        return label, ""
    for i, ref in enumerate(fields.objects(parent, "metadata", "ownerReferences")):
        where = f"parent.metadata.ownerReferences[{i}]"
        api_version = fields.item_string(ref, "apiVersion", where) or ""
        if fields.item_string(ref, "kind", where) == "Cluster" and api_version.startswith("cluster.x-k8s.io/"):
            owner = fields.item_string(ref, "name", where)
            if owner:
                return owner, ""
    return "", (
        f"cannot tell the workload cluster's name: no {CLUSTER_NAME_LABEL} label and no owning "
        f"cluster.x-k8s.io Cluster; set the label, or set {GC_ANNOTATION}=false to delete without collecting"
    )


def awaits_verification(request: HookRequest, settings: Settings) -> bool:
    """A deletion this controller would collect for, not yet confirmed by the API server.

    Until it is, nothing is looked up and nothing is decided from the body.
    """
    return request.deleting and settings.external_resource_gc and not request.verified


def resolve_scope(request: HookRequest, settings: Settings) -> Scope:
    """What this finalize call should do, from the request and settings alone.

    Raises RequestError for a mistyped field (spec.region, spec.eksClusterName,
    an ownerReferences item); ``scope_of`` turns that into a blocked deletion.
    """
    if not request.deleting:
        # finalize also runs when an object stops matching the selector: not a deletion.
        return Scope(SKIP, "")
    if not settings.external_resource_gc:
        return Scope(SKIP, "external resource GC is off (NODEWARDEN_EXTERNAL_RESOURCE_GC=false)")
    if DELETE_FOR_MOVE in request.annotations:
        return Scope(SKIP, f"being moved by clusterctl ({DELETE_FOR_MOVE}): the cluster lives on elsewhere, "
                           "nothing deleted")
    raw = request.annotations.get(GC_ANNOTATION)
    if raw is not None:
        enabled = parse_go_bool(raw)
        if enabled is None:
            return Scope(
                BLOCKED,
                f"annotation {GC_ANNOTATION}={raw!r} is not a boolean; set it to \"true\" to collect "
                f"or \"false\" to delete the cluster without collecting",
            )
        if not enabled:
            return Scope(SKIP, f"opted out ({GC_ANNOTATION}={raw}): nothing deleted")
    tasks, problem = parse_tasks(request.annotations.get(TASKS_ANNOTATION))
    if problem:
        return Scope(BLOCKED, problem)
    name, problem = cluster_name(request.parent)
    if problem:
        return Scope(BLOCKED, problem)
    region = fields.string(request.parent, "spec", "region") or settings.aws_region
    if not region:
        return Scope(BLOCKED, "no AWS region: spec.region is empty and AWS_REGION is not set")
    if not is_region(region):
        return Scope(BLOCKED, f"region {region[:64]!r} (spec.region, else AWS_REGION) is not an AWS region")
    return Scope(COLLECT, "", name, region, tasks, settings.gc_include_lb_controller)


def scope_of(request: HookRequest, settings: Settings) -> Scope:
    """resolve_scope, with a field it cannot read blocking the deletion (and saying which)."""
    try:
        return resolve_scope(request, settings)
    except RequestError as exc:
        return Scope(BLOCKED, f"cannot read {exc}; fix the field, or set {GC_ANNOTATION}=false "
                              "to delete without collecting")
