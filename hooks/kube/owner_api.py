"""A node's owners on the API server: Karpenter NodeClaims and Cluster API Machines, read and asked to replace.

Reads answer what the API server has now. A resource type it does not serve
(Karpenter or Cluster API not installed) answers as having none: an empty
list, or None. Each write names the uid it was decided on, so an object
made again under the same name is never the one deleted or marked.

A Cluster API Machine is replaced by its owner (MachineSet,
KubeadmControlPlane) once its status says what a MachineHealthCheck writes
for an unhealthy Machine whose owner remediates it: HealthCheckSucceeded
False and OwnerRemediated False. Cluster API v1.14 reads the v1beta2
conditions (``status.conditions``); the deprecated v1beta1 ones
(``status.deprecated.v1beta1.conditions``) are written too, for the readers
that still look there. OwnerRemediated already False is the owner's
remediation in progress and stays as it is; a Machine being deleted gets no
OwnerRemediated, as a MachineHealthCheck leaves it.
"""
from __future__ import annotations

from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_namespaced_resource

from hooks.kube import fresh
from hooks.kube.client import is_missing
from hooks.kube.deletes import delete_exact
from hooks.owner_names import (CAPI_DEPLOYMENT_LABEL, CAPI_GROUP, CAPI_HEALTH_CHECK_SUCCEEDED, CAPI_MACHINE_KIND,
                               CAPI_OWNER_REMEDIATED, CAPI_UNHEALTHY_NODE_REASON,
                               CAPI_VERSION, CAPI_WAITING_FOR_REMEDIATION_REASON, KARPENTER_NODEPOOL_LABEL,
                               NODECLAIM_KIND)

# What the writes answer.
DELETED = "deleted"
DONE = "done"
GONE = "gone"  # the object of that uid is no longer there (or its type is not served): nothing left to ask

CAPI_MACHINE = create_namespaced_resource(CAPI_GROUP, CAPI_VERSION, CAPI_MACHINE_KIND, "machines")
# The Cluster API's own words for what the owner is asked (core/v1beta2): OwnerRemediated's message, and the
# severity of a v1beta1 condition that is False.
WAITING_FOR_REMEDIATION_MESSAGE = "Waiting for remediation"
SEVERITY_WARNING = "Warning"
# The CRD's bounds on a condition's message: v1beta1 10240 (and at least 1, else left out), v1beta2 32768.
_V1BETA1_MESSAGE_MAX = 10240
_V1BETA2_MESSAGE_MAX = 32768
_ATTEMPTS = 4


def _listed(kube, res, namespace: str | None = None, labels: dict | None = None) -> list[dict]:
    try:
        return [fresh.as_dict(o) for o in kube.list(res, namespace=namespace, labels=labels)]
    except Exception as exc:  # noqa: BLE001 - lightkube's ApiError or httpx's HTTPStatusError
        if is_missing(exc):
            return []
        raise


def _status(obj: dict) -> dict:
    return obj.get("status") if isinstance(obj.get("status"), dict) else {}


def _meta(obj: dict) -> dict:
    return obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}


def nodeclaims_for(kube, provider_id: str) -> list[dict]:
    """The NodeClaims whose ``status.providerID`` is ``provider_id`` (a NodeClaim's status is not a field the
    API server selects on, so all are listed)."""
    if not provider_id:
        return []
    return [c for c in _listed(kube, fresh.resource(NODECLAIM_KIND)) if _status(c).get("providerID") == provider_id]


def nodeclaims_in_pool(kube, pool: str) -> list[dict]:
    """The NodeClaims of the Karpenter NodePool ``pool`` (by the label Karpenter puts on each)."""
    if not pool:
        return []
    return _listed(kube, fresh.resource(NODECLAIM_KIND), labels={KARPENTER_NODEPOOL_LABEL: pool})


def capi_machine(kube, namespace: str, name: str) -> dict | None:
    """The Cluster API Machine as the API server has it now; None when it (or its type) does not exist."""
    try:
        return fresh.as_dict(kube.get(CAPI_MACHINE, name, namespace=namespace))
    except Exception as exc:  # noqa: BLE001
        if is_missing(exc):
            return None
        raise


def _controller(machine: dict) -> dict | None:
    refs = _meta(machine).get("ownerReferences")
    for ref in refs if isinstance(refs, list) else []:
        if isinstance(ref, dict) and ref.get("controller") is True:
            return ref
    return None


def _same_controller(a: dict, b: dict) -> bool:
    if a.get("uid") and b.get("uid"):
        return a["uid"] == b["uid"]
    return (a.get("kind"), a.get("name")) == (b.get("kind"), b.get("name"))


def capi_machines_in_group(kube, namespace: str, machine: dict) -> list[dict]:
    """The Machines of ``machine``'s group as the API server has them now, itself included: those with its
    controller (a MachineSet, a KubeadmControlPlane), else those of its MachineDeployment (by label). A Machine
    with neither is a group of one."""
    controller = _controller(machine)
    labels = _meta(machine).get("labels")
    deployment = labels.get(CAPI_DEPLOYMENT_LABEL) if isinstance(labels, dict) else None
    if controller is not None:
        return [m for m in _listed(kube, CAPI_MACHINE, namespace=namespace)
                if (c := _controller(m)) is not None and _same_controller(c, controller)]
    if deployment:
        return _listed(kube, CAPI_MACHINE, namespace=namespace, labels={CAPI_DEPLOYMENT_LABEL: deployment})
    name = _meta(machine).get("name")
    found = capi_machine(kube, namespace, name) if name else None
    return [found] if found is not None else []


def delete_nodeclaim(kube, name: str, uid: str) -> str:
    """Delete the NodeClaim of ``uid``: Karpenter drains what is left, terminates its instance and makes
    another for the pods. DELETED, or GONE when that NodeClaim is not there (another under its name is not
    touched)."""
    return DELETED if delete_exact(kube, fresh.resource(NODECLAIM_KIND), name, uid) else GONE


def _set_v1beta2(conditions: list, wanted: dict, now: str, only_if=lambda c: True) -> list:
    """``conditions`` with ``wanted`` set as metav1 conditions are set: its transition time moves only when
    its status does. ``only_if(current)`` says whether a condition already there may be changed."""
    out = [dict(c) for c in conditions if isinstance(c, dict)]
    for i, current in enumerate(out):
        if current.get("type") == wanted["type"]:
            if not only_if(current):
                return out
            moved = current.get("status") != wanted["status"] or not current.get("lastTransitionTime")
            out[i] = {**wanted, "lastTransitionTime": now if moved else current["lastTransitionTime"]}
            return out
    return out + [{**wanted, "lastTransitionTime": now}]


def _set_v1beta1(conditions: list, wanted: dict, now: str, only_if=lambda c: True) -> list:
    """As ``_set_v1beta2`` for Cluster API's v1beta1 conditions: the transition time moves when the status,
    reason, severity or message does."""
    out = [dict(c) for c in conditions if isinstance(c, dict)]
    for i, current in enumerate(out):
        if current.get("type") == wanted["type"]:
            if not only_if(current):
                return out
            same = all(current.get(k) == wanted.get(k) for k in ("status", "reason", "severity", "message"))
            out[i] = {**wanted, "lastTransitionTime": current.get("lastTransitionTime") if same and
                      current.get("lastTransitionTime") else now}
            return out
    return out + [{**wanted, "lastTransitionTime": now}]


def _not_false(condition: dict) -> bool:
    """A MachineHealthCheck asks again only when OwnerRemediated is missing or True: False is the owner's
    remediation under way, left to the owner."""
    return condition.get("status") != "False"


def _remediation_patch(machine: dict, message: str, now: str) -> list[dict]:
    """The JSON patch of the Machine's status that asks its owner to remediate it, as a MachineHealthCheck
    does; [] when its status says so already. Tests the uid and resourceVersion read."""
    meta, status = _meta(machine), _status(machine)
    deleting = bool(meta.get("deletionTimestamp"))
    generation = meta.get("generation")
    v1beta2 = status.get("conditions") if isinstance(status.get("conditions"), list) else []
    failed = {"type": CAPI_HEALTH_CHECK_SUCCEEDED, "status": "False", "reason": CAPI_UNHEALTHY_NODE_REASON,
              "message": message[:_V1BETA2_MESSAGE_MAX]}
    if isinstance(generation, int):
        failed["observedGeneration"] = generation
    new_v1beta2 = _set_v1beta2(v1beta2, failed, now)
    if not deleting:
        waiting = {"type": CAPI_OWNER_REMEDIATED, "status": "False", "reason": CAPI_WAITING_FOR_REMEDIATION_REASON,
                   "message": WAITING_FOR_REMEDIATION_MESSAGE}
        if isinstance(generation, int):
            waiting["observedGeneration"] = generation
        new_v1beta2 = _set_v1beta2(new_v1beta2, waiting, now, only_if=_not_false)

    deprecated = status.get("deprecated") if isinstance(status.get("deprecated"), dict) else None
    old = deprecated.get("v1beta1") if deprecated is not None and isinstance(deprecated.get("v1beta1"), dict) \
        else None
    v1beta1 = old.get("conditions") if old is not None and isinstance(old.get("conditions"), list) else []
    failed_v1beta1 = {"type": CAPI_HEALTH_CHECK_SUCCEEDED, "status": "False", "severity": SEVERITY_WARNING,
                      "reason": CAPI_UNHEALTHY_NODE_REASON}
    if message:
        failed_v1beta1["message"] = message[:_V1BETA1_MESSAGE_MAX]
    new_v1beta1 = _set_v1beta1(v1beta1, failed_v1beta1, now)
    if not deleting:
        new_v1beta1 = _set_v1beta1(new_v1beta1, {"type": CAPI_OWNER_REMEDIATED, "status": "False",
                                                 "severity": SEVERITY_WARNING,
                                                 "reason": CAPI_WAITING_FOR_REMEDIATION_REASON},
                                   now, only_if=_not_false)

    ops: list[dict] = []
    if new_v1beta2 != v1beta2 or new_v1beta1 != v1beta1:
        if not isinstance(machine.get("status"), dict):
            ops.append({"op": "add", "path": "/status", "value": {}})
    if new_v1beta2 != v1beta2:
        ops.append({"op": "add", "path": "/status/conditions", "value": new_v1beta2})
    if new_v1beta1 != v1beta1:
        if deprecated is None:
            ops.append({"op": "add", "path": "/status/deprecated", "value": {}})
        if old is None:
            ops.append({"op": "add", "path": "/status/deprecated/v1beta1", "value": {}})
        ops.append({"op": "add", "path": "/status/deprecated/v1beta1/conditions", "value": new_v1beta1})
    if not ops:
        return []
    tests = [{"op": "test", "path": "/metadata/uid", "value": meta.get("uid")}]
    if meta.get("resourceVersion"):
        tests.append({"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]})
    return tests + ops


def mark_capi_remediation(kube, namespace: str, name: str, uid: str, message: str, now: str) -> str:
    """Ask the Machine's owner to replace it, on the Machine's status subresource (``_remediation_patch``);
    ``message`` says why (HealthCheckSucceeded's message), ``now`` is the RFC 3339 time of the transitions.
    DONE (also when its status said so already), or GONE when the Machine of ``uid`` is not there.

    The patch tests the uid and the resourceVersion read: a concurrent writer (the Machine's own controller
    writes its status often) makes it read again and try again, a few times."""
    for attempt in range(_ATTEMPTS):
        machine = capi_machine(kube, namespace, name)
        if machine is None or _meta(machine).get("uid") != uid:
            return GONE
        ops = _remediation_patch(machine, message, now)
        if not ops:
            return DONE
        try:
            kube.json_patch(CAPI_MACHINE.Status, name, ops, namespace=namespace)
            return DONE
        except Exception as exc:  # noqa: BLE001
            if is_missing(exc):
                return GONE
            # 409 Conflict / 422 failed test: written meanwhile (or another Machine now); read again.
            if not isinstance(exc, ApiError) or exc.status.code not in (409, 422) or attempt == _ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable: the last attempt returns or raises")
