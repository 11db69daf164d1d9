"""What one nodepool call reads, from the API server and EC2; failures are recorded, never raised.

- The pool's Machines as the API server lists them now (Metacontroller's
  cache may lag its own deletes) and nodewarden's FencingRequests (repair
  rests on them; a Node's conditions prove nothing).
- A provisioning pool's round readings: every pending pod, every
  provisioning pool with its Machines and Nodes, the pods on them, the
  DaemonSets, and EC2's instance types, offerings, prices and subnets.
- The instances tagged for the pool, when a leaked-instance check is due.

A body alone makes no read at all (decide asks for verification first).
"""
from __future__ import annotations

import datetime as dt

from hooks import runtime, timefmt
from hooks.aws import images, instance_catalog, instances, pricing
from hooks.config import Settings
from hooks.contract import HookRequest, RequestError
from hooks.kube import fencing_api, machine_api, provisioning_reads
from hooks.machines import spec
from hooks.plan import error_text
from hooks.provisioning import inputs, pods


def gather(request: HookRequest, ctx: runtime.Context, now: dt.datetime) -> dict:
    observed: dict = {}
    if not request.verified:
        return observed
    try:
        listed = machine_api.listed(ctx.kube, request.name)
        observed["machineUIDs"] = sorted((m.get("metadata") or {}).get("uid") or "" for m in listed)
        observed["machines"] = [m for m in listed if _owned_by(m, request.meta.get("uid") or "")]
    except Exception as exc:  # noqa: BLE001
        observed["machinesError"] = error_text(exc)
    try:
        observed["fencingRequests"] = fencing_api.fencing_requests(ctx.kube, ctx.settings.namespace)
    except Exception as exc:  # noqa: BLE001
        observed["fencingError"] = error_text(exc)
    _provisioning(request, ctx, now, observed)
    if not ctx.settings.cluster_name or not _leak_check_due(request, ctx.settings, now):
        return observed
    try:
        # The process's view: every leak it shows is proven again, read fresh, before it is terminated.
        observed["instances"] = ctx.instances.view(ctx.settings.aws_region).of_pool(request.name)
    except Exception as exc:  # noqa: BLE001
        observed["instancesError"] = error_text(exc)
    return observed


def _owned_by(machine: dict, pool_uid: str) -> bool:
    refs = (machine.get("metadata") or {}).get("ownerReferences") or []
    return any(isinstance(r, dict) and r.get("uid") == pool_uid and r.get("controller") for r in refs)


def _previous(request: HookRequest) -> dict:
    status = request.parent.get("status")
    return status if isinstance(status, dict) else {}


def _leak_check_due(request: HookRequest, settings: Settings, now: dt.datetime) -> bool:
    if request.finalizing:
        return True
    since = timefmt.seconds_since(_previous(request).get("lastLeakCheck"), now)
    return since is None or since < 0 or since >= settings.leaked_instance_check_seconds


def _round_due(request: HookRequest, settings: Settings, now: dt.datetime, raw_pending: list[dict]) -> bool:
    """A full round when pods wait for room, else now and then for the pool's status and consolidation."""
    if any(pods.is_provisionable(p) for p in raw_pending):
        return True
    shown = _previous(request).get("provisioning")
    since = timefmt.seconds_since(shown.get("lastRound") if isinstance(shown, dict) else None, now)
    return since is None or since < 0 or since >= settings.consolidation_check_seconds


def _provisioning(request: HookRequest, ctx: runtime.Context, now: dt.datetime, observed: dict) -> None:
    """A provisioning pool's round readings, in ``observed["provisioning"]`` (or ``provisioningError``)."""
    try:
        parsed = spec.pool(request.parent)
    except RequestError:
        return
    if parsed.provisioning is None or request.finalizing:
        return
    kube = ctx.kube
    try:
        raw_pending = provisioning_reads.pending(kube)
        if not _round_due(request, ctx.settings, now, raw_pending):
            return
        pool_objects = provisioning_reads.provisioning_pools(kube)
        readings = {"pending": raw_pending, "bound": provisioning_reads.running_on_nodes(kube),
                    "nodes": provisioning_reads.pool_nodes(kube), "pools": pool_objects,
                    "machines": machine_api.listed(kube),
                    "daemonsets": provisioning_reads.daemonsets(kube),
                    "podDisruptionBudgets": provisioning_reads.pod_disruption_budgets(kube),
                    "storage": provisioning_reads.storage(kube, raw_pending)}
    except Exception as exc:  # noqa: BLE001
        observed["provisioningError"] = f"API server: {error_text(exc)}"
        return
    try:
        ec2 = ctx.aws.client("ec2", ctx.settings.aws_region or None)
        facts = instance_catalog.all_type_facts(ctx.aws, ec2.meta.region_name)
        specs = {**inputs.pools_of(pool_objects), request.name: parsed}
        spot = instance_catalog.spot_prices(ec2, inputs.spot_candidates(specs, facts))
        zones, own, subnet_zones, architectures = {}, [], {}, {}
        for name, other in sorted(specs.items()):
            found = instances.subnets(ec2, list(other.template.subnets), other.template.subnet_selector)
            zones[name] = sorted({s["zone"] for s in found if s.get("zone")})
            subnet_zones.update({s["id"]: s["zone"] for s in found if s.get("zone")})
            if inputs.mixes_architectures(other, facts):
                architectures[name] = images.architecture_of(ec2, other.template.image_id,
                                                             other.template.launch_template)
            if name == request.name:
                own = found
        readings.update(
            typeFacts=facts, zoneOfferings=instance_catalog.zone_offerings(ctx.aws, ec2.meta.region_name),
            zones=zones, subnets=own, subnetZones=subnet_zones, images=architectures,
            prices={spec.ON_DEMAND: pricing.on_demand_prices(ctx.aws, ctx.settings.aws_region or ec2.meta.region_name),
                    spec.SPOT: [[t, z, p] for (t, z), p in sorted(spot.items())]})
    except Exception as exc:  # noqa: BLE001
        observed["provisioningError"] = f"EC2: {error_text(exc)}"
        return
    observed["provisioning"] = readings
