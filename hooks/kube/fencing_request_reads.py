"""What one fencing-request call reads: ``verify``, the FencingRequest and its Node as the API server has
them now; ``gather``, only what the call's phase looks at, from the API server, EC2 and Auto Scaling, its
failures recorded, never raised.
"""
from __future__ import annotations

import dataclasses
import datetime as dt

from hooks import bounds, fencing_names, fields, owner_names, providerid, runtime
from hooks.aws import autoscaling, ec2_power
from hooks.contract import HookRequest, ObjectGroups, RequestError, parse_object
from hooks.ec2_names import OFF_STATES
from hooks.fencing import request_rules
from hooks.fencing.request_phases import aftercare, authority, replacement
from hooks.fencing.request_phases.state import node_of, own_status, recorded, without_unverified
from hooks.kube import fencing_api, fresh, nodes, owner_api, pods, policy_cache
from hooks.plan import error_text
from hooks.replacement import owners


def gather(request: HookRequest, ctx: runtime.Context, now: dt.datetime) -> dict:
    """Only what this call's phase looks at; failures are recorded, never raised."""
    try:
        spec = request_rules.parse_spec(request.parent)
    except RequestError:
        return {}
    status = own_status(request.parent)
    observed: dict = {}
    if not request.finalizing and not authority.honoured_here(request.meta.get("namespace"), ctx.settings):
        return observed  # refused: nothing is read for it
    node = node_of(request, spec)
    if node is None:
        _look_up_node(ctx, spec.node_name, observed)
        node = observed.get("node")
    if request.finalizing:
        if replacement.standby_unanswered(status) and recorded(status, "providerStatus").get("instanceID"):
            _observe_group_member(ctx, node, recorded(status, "providerStatus"), observed)
        if aftercare.ours_to_remove(status, spec, node):
            try:
                observed["otherHolders"] = _other_holders(request, spec, ctx)
            except Exception as exc:  # noqa: BLE001 - unknown is not "no other holder"
                observed["holdersError"] = error_text(exc)
        return observed
    phase = status.get("phase") or fencing_names.PENDING
    provider, rec = recorded(status, "providerStatus"), recorded(status, "recovery")
    if phase == fencing_names.PENDING and not bounds.status_counter(provider, "stopAttempts"):
        try:
            observed["olderRequests"] = request_rules.older_active(
                request.parent, fencing_api.fencing_requests(ctx.kube), spec.node_name)
        except Exception as exc:  # noqa: BLE001 - unknown: the request waits, bounded by the queue timeout
            observed["requestsError"] = error_text(exc)
    if phase in (fencing_names.PENDING, fencing_names.POWERING_OFF, fencing_names.RECOVERING, fencing_names.POWERING_ON) and node is not None:
        _observe_instance(ctx, node, provider, observed)
    if phase in (fencing_names.PENDING, fencing_names.POWERING_OFF) and node is not None and request.verified and \
            not spec.allow_control_plane:
        try:  # whether the instance serves the API server: read only for a request the API server confirmed
            observed["apiServers"] = fencing_api.api_server_addresses(ctx.kube)
        except Exception as exc:  # noqa: BLE001 - unknown: no power-off until it is known
            observed["apiServersError"] = error_text(exc)
    powered_off_now = phase in (fencing_names.PENDING, fencing_names.POWERING_OFF) and \
        (observed.get("instance") or {}).get("state") in OFF_STATES
    recovering = phase == fencing_names.RECOVERING or powered_off_now
    taint_first = spec.strategy == fencing_names.OUT_OF_SERVICE and rec.get("outOfServiceTaint") != fencing_names.TAINT_APPLIED
    if (recovering and not taint_first) or aftercare.in_aftercare(status, node):
        observed.update(pods.whats_on(ctx.kube, spec.node_name, request_rules.pod_summary, pods_key="nodePods"))
    if aftercare.in_aftercare(status, node):
        try:
            observed["otherHolders"] = _other_holders(request, spec, ctx, unfinished_only=True)
        except Exception as exc:  # noqa: BLE001 - unknown is not "no other holder"
            observed["holdersError"] = error_text(exc)
    if node is not None and replacement.needs_standby_check(status, spec) and \
            phase in (fencing_names.PENDING, fencing_names.POWERING_OFF):
        _observe_group_member(ctx, node, provider, observed)
    if replacement.needs_proofs(status, spec, node, now):
        observed["replacement"] = _owner_proofs(request, ctx, node, provider, observed)
    return observed


def _instance_of(node: dict, provider: dict) -> tuple[str, str | None]:
    """The instance this request fences once known, else the node's (ProviderIDError when it names none)."""
    known = provider.get("instanceID")
    if isinstance(known, str) and known:
        return known, provider.get("region") or None
    pid = providerid.parse((node.get("spec") or {}).get("providerID"))
    return pid.instance_id, pid.region


def _observe_group_member(ctx: runtime.Context, node: dict | None, provider: dict, observed: dict) -> None:
    """Which Auto Scaling group holds the instance: before a Reboot's stop (it enters Standby first), and when a
    deleted request's EnterStandby went unanswered (finalize leaves the Standby it may have made)."""
    try:
        instance, region = _instance_of(node, provider)
        observed["asgInstance"] = autoscaling.describe_instance(ctx.aws.client("autoscaling", region),
                                                                         instance)
    except providerid.ProviderIDError:
        pass  # decide fails the request with the reason
    except Exception as exc:  # noqa: BLE001 - not known: the stop waits, bounded
        observed["asgError"] = error_text(exc)


def _owner_proofs(request: HookRequest, ctx: runtime.Context, node: dict | None, provider: dict,
                  observed: dict) -> dict:
    """The owner's proofs, read fresh where the hints point; then what the guards weigh: the policies, the
    owner's group, the other FencingRequests. Each failure is recorded, never raised."""
    read: dict = {"proofs": {}}
    proofs = read["proofs"]
    if node is not None:
        if "instance" not in observed:
            _observe_instance(ctx, node, provider, observed)
        instance = observed.get("instance") or {}
        wanted = owners.to_read(node, instance.get("tags"))
        _read_proofs(ctx, wanted, provider, proofs)
        if instance.get("error") and not instance.get("notFound"):
            proofs["instanceError"] = instance["error"]  # the tags' hints unread: attribute waits
    try:
        owner = owners.attribute(node, proofs) if node is not None else None
    except owners.Unreadable:
        return read  # decide waits for the proof; the guards are read once the owner is known
    try:
        read["policies"] = list(policy_cache.read_all(ctx.kube).values())
    except Exception as exc:  # noqa: BLE001 - unknown: held
        read["policiesError"] = error_text(exc)
    if owner is not None and owner.kind != owner_names.OWNER_MACHINE:  # a NodePool keeps its own budgets
        try:
            read["requests"] = fencing_api.fencing_requests(ctx.kube, ctx.settings.namespace)
        except Exception as exc:  # noqa: BLE001 - unknown: waits
            read["requestsError"] = error_text(exc)
        try:
            read["group"] = _group(ctx, owner, proofs)
        except Exception as exc:  # noqa: BLE001 - unknown: waits
            read["groupError"] = error_text(exc)
    return read


def _read_proofs(ctx: runtime.Context, wanted: dict, provider: dict, proofs: dict) -> None:
    reads = {
        "machine": lambda: fresh.read(ctx.kube, "Machine", wanted["machine"]),
        "nodeClaims": lambda: owner_api.nodeclaims_for(ctx.kube, wanted["nodeClaims"]),
        "asgInstance": lambda: autoscaling.describe_instance(
            ctx.aws.client("autoscaling", provider.get("region") or None), wanted["asg"]),
        "capiMachine": lambda: owner_api.capi_machine(ctx.kube, *wanted["capiMachine"]),
    }
    hint_of = {"machine": "machine", "nodeClaims": "nodeClaims", "asgInstance": "asg", "capiMachine": "capiMachine"}
    for key, read in reads.items():
        if hint_of[key] not in wanted:
            continue
        try:
            proofs[key] = read()
        except Exception as exc:  # noqa: BLE001 - unknown is not "not the owner"
            proofs[f"{hint_of[key]}Error"] = error_text(exc)


def _group(ctx: runtime.Context, owner: owners.Owner, proofs: dict) -> dict:
    """The members of the owner's group, as the guards count them."""
    if owner.kind == owner_names.OWNER_NODECLAIM:
        return {"nodeClaims": owner_api.nodeclaims_in_pool(ctx.kube, owner.group),
                "readiness": nodes.readiness(ctx.kube, {"matchLabels": {owner_names.KARPENTER_NODEPOOL_LABEL:
                                                                        owner.group}})}
    if owner.kind == owner_names.OWNER_ASG:
        return {"group": autoscaling.describe_group(ctx.aws.client("autoscaling", owner.region or None),
                                                    owner.group),
                "readiness": {"notReadyInstances": _not_ready_instances(ctx)}}
    if owner.kind == owner_names.OWNER_CAPI_MACHINE:
        return {"machines": owner_api.capi_machines_in_group(ctx.kube, owner.namespace,
                                                                     proofs["capiMachine"])}
    return {}


# Nodes not Ready looked up one by one for a group's count; more than this and the count waits (a storm).
MAX_NOT_READY_LOOKUPS = 100


def _not_ready_instances(ctx: runtime.Context) -> list[str]:
    """The instances behind the Nodes that are not Ready, read from the API server: an Auto Scaling group's
    Nodes share no label to select them by, so the few not Ready are read for their providerIDs."""
    names = nodes.readiness(ctx.kube, {})["notReady"]
    if len(names) > MAX_NOT_READY_LOOKUPS:
        raise RuntimeError(f"{len(names)} Nodes are not Ready, more than the {MAX_NOT_READY_LOOKUPS} "
                           "looked up for a group's count")
    instances = []
    for name in names:
        node = fresh.read(ctx.kube, "Node", name)
        try:
            instances.append(providerid.parse(((node or {}).get("spec") or {}).get("providerID")).instance_id)
        except providerid.ProviderIDError:
            continue  # gone, or not an EC2 instance: no member of a group
    return sorted(instances)


def _look_up_node(ctx: runtime.Context, name: str, observed: dict) -> None:
    """The request lacked the Node: ask the API server, whose 404 alone proves it gone."""
    try:
        node = fresh.read(ctx.kube, "Node", name)
    except fresh.Unverified as exc:
        observed["nodeError"] = str(exc)
        return
    if node is None:
        observed["nodeGone"] = True
    else:
        observed["node"] = node


def _observe_instance(ctx: runtime.Context, node: dict, provider: dict, observed: dict) -> None:
    """The instance's power state and tags now: the one this request fences once known, else the node's."""
    try:
        instance, region = _instance_of(node, provider)
        observed["instance"] = ec2_power.describe(ctx.instances, region, instance)
    except providerid.ProviderIDError:
        pass  # decide fails the request with the reason
    except ec2_power.InstanceNotFound as exc:  # not this cluster's to act on, wherever it is
        observed["instance"] = {"notFound": True, "error": str(exc)}
    except Exception as exc:  # noqa: BLE001 - an unreadable state is no confirmation; keep polling
        observed["instance"] = {"error": error_text(exc)}


def _other_holders(request: HookRequest, spec: request_rules.Spec, ctx: runtime.Context,
                   unfinished_only: bool = False) -> list[str]:
    """Other live requests for the same node, in any namespace, that still count on the out-of-service taint."""
    return request_rules.taint_holders(request.parent, fencing_api.fencing_requests(ctx.kube), spec.node_name,
                                       unfinished_only)


def verify(request: HookRequest, ctx: runtime.Context) -> HookRequest:
    """The request as the API server has it now: the FencingRequest and its Node, read fresh.

    Anyone reaching the hook port can send a body; only a FencingRequest that
    exists with the body's uid may act (that it is being deleted when
    finalizing is the pipeline's check), and only on the Node the API server
    has under that name. The decision is then made again on these fresh objects.
    """
    if request.parent.get("kind") != fencing_names.REQUEST_KIND:
        raise fresh.Unverified(f"fencing-request acts only for a {fencing_names.REQUEST_KIND}")
    parent = fresh.same_parent(request, ctx.kube).parent
    if parent["metadata"].get("deletionTimestamp") and not request.finalizing:
        # Deleted since this sync was sent: nothing new starts; the finalize hook takes over.
        raise fresh.Unverified(f"FencingRequest {request.meta.get('namespace')}/{request.name} is being deleted")
    parent = dict(parent, status=without_unverified(fields.mapping(parent, "status")))
    if not authority.honoured_here(request.meta.get("namespace"), ctx.settings) and not request.finalizing:
        return dataclasses.replace(request, parent=parent, related=ObjectGroups())  # refused: nothing is read
    try:
        spec = request_rules.parse_spec(parent)
    except RequestError:  # decided (and reported) as the invalid spec it is: nothing is read or done
        return dataclasses.replace(request, parent=parent, related=ObjectGroups())
    node = fresh.read(ctx.kube, "Node", spec.node_name)
    try:
        related = {"Node.v1": {spec.node_name: parse_object(node, "related.Node")}} if node else {}
    except RequestError as exc:
        raise fresh.Unverified(f"the Node as the API server has it: {exc}") from None
    # The API server answered: the record of earlier unverified calls went above.
    return dataclasses.replace(request, parent=parent, related=ObjectGroups(related))
