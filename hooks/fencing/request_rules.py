"""FencingRequest: its spec with defaults, and what recovery waits for."""
from __future__ import annotations

from dataclasses import dataclass

from hooks import bounds, fencing_names, fields, owner_names
from hooks.contract import RequestError
from hooks.replacement.spec import ReplacementSpec, parse_replacement

DEFAULT_RETRIES = 5
DEFAULT_RETRY_INTERVAL = 5.0
DEFAULT_TIMEOUT = 60.0
MAX_RETRIES = 100
MAX_POWER_SECONDS = 3600.0  # an attempt or a pause longer than an hour is a mistake


@dataclass(frozen=True)
class Spec:
    node_name: str
    node_uid: str | None
    action: str
    strategy: str
    retries: int  # attempts of each power operation, the first included
    retry_interval: float
    timeout: float  # per attempt: how long a power-off may take to be confirmed
    allow_control_plane: bool = False  # the request's explicit opt-in to fence a control-plane node
    # How the node's owner replaces it once fenced; a request without spec.replacement is not replaced.
    replacement: ReplacementSpec = ReplacementSpec(mode=owner_names.REPLACE_NONE)


def _duration(obj: dict, key: str, default: float, positive: bool = False) -> float:
    return bounds.duration(fields.mapping(obj, "spec").get(key), f"parent.spec.{key}", default=default,
                           maximum=MAX_POWER_SECONDS, positive=positive)


def parse_spec(obj: dict) -> Spec:
    node_name = fields.string(obj, "spec", "nodeRef", "name")
    if not node_name:
        raise RequestError("parent.spec.nodeRef.name", "is required: the Node to fence")
    action = fields.string(obj, "spec", "action", default=fencing_names.ACTION_OFF)
    if action not in fencing_names.ACTIONS:
        raise RequestError("parent.spec.action", f"must be one of {', '.join(fencing_names.ACTIONS)}, got {action!r}")
    strategy = fields.string(obj, "spec", "recoveryStrategy", default=fencing_names.OUT_OF_SERVICE)
    if strategy not in fencing_names.STRATEGIES:
        raise RequestError("parent.spec.recoveryStrategy",
                           f"must be one of {', '.join(fencing_names.STRATEGIES)}, got {strategy!r}")
    retries = bounds.whole_number(fields.mapping(obj, "spec").get("retries"), "parent.spec.retries",
                                  minimum=1, maximum=MAX_RETRIES, default=DEFAULT_RETRIES)
    timeout = _duration(obj, "timeout", DEFAULT_TIMEOUT, positive=True)
    return Spec(
        node_name=node_name,
        node_uid=fields.string(obj, "spec", "nodeRef", "uid"),
        action=action,
        strategy=strategy,
        retries=retries,
        retry_interval=_duration(obj, "retryInterval", DEFAULT_RETRY_INTERVAL),
        timeout=timeout,
        allow_control_plane=fields.boolean(obj, "spec", "allowControlPlane", default=False),
        replacement=parse_replacement(obj, "parent", absent=owner_names.REPLACE_NONE),
    )


def _matches(tol: dict, key: str, value: str, effect: str) -> bool:
    if tol.get("effect") and tol["effect"] != effect:
        return False
    operator = tol.get("operator") or "Equal"
    if operator == "Exists":
        return not tol.get("key") or tol["key"] == key
    return operator == "Equal" and tol.get("key") == key and (tol.get("value") or "") == value


def tolerates(tolerations: list[dict], key: str, value: str, effect: str) -> bool:
    """Whether a pod stays despite this taint: a toleration with tolerationSeconds only delays eviction."""
    return any(_matches(tol, key, value, effect) and tol.get("tolerationSeconds") is None
               for tol in tolerations or [])


def removed_with_the_taint(waiting: list[dict]) -> list[dict]:
    """Of the pods out-of-service recovery waits for, those kube-controller-manager removes without delay.

    The taint-eviction controller deletes a pod with no toleration for the
    out-of-service taint at once, and pod GC force-deletes a terminating pod
    on a NotReady node with that taint on its next pass (every 20 s). A pod
    whose toleration has tolerationSeconds is left until the taint-eviction
    controller marks it.
    """
    taint = (fencing_names.OUT_OF_SERVICE_TAINT, fencing_names.OUT_OF_SERVICE_VALUE, fencing_names.OUT_OF_SERVICE_EFFECT)
    return [p for p in waiting
            if p.get("terminating") or not any(_matches(t, *taint) for t in p.get("tolerations") or [])]


def older_active(me: dict, others: list[dict], node_name: str) -> list[str]:
    """Requests for the same node, live and unfinished, that came first: one node, one fence at a time.

    First by creationTimestamp, then by uid, so two requests made in the
    same second still agree which of them goes first.
    """
    mine = _section(me, "metadata")
    my_key = (str(mine.get("creationTimestamp") or ""), str(mine.get("uid") or ""))
    found = []
    for other in others:
        meta = other.get("metadata") if isinstance(other.get("metadata"), dict) else {}
        spec = other.get("spec") if isinstance(other.get("spec"), dict) else {}
        status = other.get("status") if isinstance(other.get("status"), dict) else {}
        node_ref = spec.get("nodeRef") if isinstance(spec.get("nodeRef"), dict) else {}
        if meta.get("uid") == mine.get("uid") or meta.get("deletionTimestamp") or node_ref.get("name") != node_name:
            continue
        if status.get("phase") in fencing_names.FINISHED_PHASES:
            continue
        if (str(meta.get("creationTimestamp") or ""), str(meta.get("uid") or "")) < my_key:
            found.append(f"{meta.get('namespace')}/{meta.get('name')}")
    return sorted(found)


def _section(obj, key: str) -> dict:
    value = obj.get(key) if isinstance(obj, dict) else None
    return value if isinstance(value, dict) else {}


def holds_out_of_service_taint(obj: dict) -> bool:
    """Whether a request counts on the out-of-service taint of its node.

    Recorded as applied; or fenced with the taint strategy and not recorded as
    removed (the taint may be on while the status saying so was never written).
    """
    status = _section(obj, "status")
    recorded = _section(status, "recovery").get("outOfServiceTaint")
    if recorded == fencing_names.TAINT_APPLIED:
        return True
    if recorded == fencing_names.TAINT_REMOVED:
        return False
    strategy = _section(obj, "spec").get("recoveryStrategy") or fencing_names.OUT_OF_SERVICE
    listed = status.get("conditions") if isinstance(status.get("conditions"), list) else []
    fenced = any(isinstance(c, dict) and c.get("type") == fencing_names.FENCING_SUCCEEDED and c.get("status") == "True"
                 for c in listed)
    return fenced and strategy == fencing_names.OUT_OF_SERVICE


def taint_holders(me: dict, others: list, node_name: str, unfinished_only: bool = False) -> list[str]:
    """Other live requests for the node, from any namespace, that still count on its out-of-service taint.

    ``unfinished_only``: a finished request takes the taint off by itself once
    the node is back, so two finished ones never wait on each other.
    A malformed request is skipped, never a reason to fail the whole listing.
    """
    my_uid = _section(me, "metadata").get("uid")
    found = []
    for other in others:
        meta = _section(other, "metadata")
        if meta.get("uid") == my_uid or meta.get("deletionTimestamp"):
            continue
        if unfinished_only and _section(other, "status").get("phase") in fencing_names.FINISHED_PHASES:
            continue
        if _section(_section(other, "spec"), "nodeRef").get("name") != node_name:
            continue
        if holds_out_of_service_taint(other):
            found.append(f"{meta.get('namespace')}/{meta.get('name')}")
    return sorted(found)


def pod_summary(pod: dict) -> dict:
    meta = pod.get("metadata") or {}
    return {
        "namespace": meta.get("namespace"),
        "name": meta.get("name"),
        "uid": meta.get("uid"),
        "terminating": bool(meta.get("deletionTimestamp")),
        "phase": (pod.get("status") or {}).get("phase"),
        "tolerations": (pod.get("spec") or {}).get("tolerations") or [],
    }


def waiting_pods(node_pods: list[dict], strategy: str) -> list[dict]:
    """Pods recovery still waits for.

    Out-of-service: a pod kube-controller-manager has yet to remove, i.e. one
    that is terminating or does not tolerate the taint (the taint-eviction
    controller will delete it, then pod GC force-deletes it). Resource
    deletion: every pod still bound to the node. Finished pods never wait.
    """
    waiting = []
    for pod in node_pods:
        if pod.get("phase") in ("Succeeded", "Failed") and not pod.get("terminating"):
            continue
        if strategy == fencing_names.OUT_OF_SERVICE and not pod.get("terminating") and tolerates(
                pod.get("tolerations"), fencing_names.OUT_OF_SERVICE_TAINT, fencing_names.OUT_OF_SERVICE_VALUE,
                fencing_names.OUT_OF_SERVICE_EFFECT):
            continue
        waiting.append(pod)
    return waiting


def terminating_pods(node_pods: list[dict]) -> list[dict]:
    return [p for p in node_pods if p.get("terminating")]
