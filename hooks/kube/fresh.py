"""Fresh reads from the API server: the only proof an irreversible step may rest on.

Anyone who can reach the hook port can send a request body, and
Metacontroller sends no credentials. So before a destructive step (a cloud
delete, a power-off, a force delete, a termination) a controller reads the
objects that justify it again, here, and acts only on what the API server
says now. A body names objects; it never proves anything about them.

``read`` answers the object as a plain dict, or None when the API server says
it does not exist (404, also for a type it does not serve). Anything else (no
configuration, unreachable, 5xx, forbidden) raises Unverified: an API that
cannot be asked proves nothing.
"""
from __future__ import annotations

import dataclasses
import re
from functools import lru_cache

from lightkube.generic_resource import create_global_resource, create_namespaced_resource

from hooks.contract import HookRequest, RequestError, parse_object
from hooks.kube.client import is_missing
from hooks.owner_names import NODECLAIM_GROUP, NODECLAIM_KIND, NODECLAIM_VERSION
from hooks.plan import error_text


class Unverified(RuntimeError):
    """A step's justification could not be confirmed from the API server."""


# Kinds a controller may re-read: (group, plural, namespaced). A request
# body chooses only the version, never which resource is read.
KINDS: dict[str, tuple[str, str, bool]] = {
    "Node": ("", "nodes", False),
    "Pod": ("", "pods", True),
    "DaemonSet": ("apps", "daemonsets", True),
    "FencingRequest": ("nodewarden.io", "fencingrequests", True),
    "NodeFencingPolicy": ("nodewarden.io", "nodefencingpolicies", False),
    "Machine": ("nodewarden.io", "machines", False),
    "NodePool": ("nodewarden.io", "nodepools", False),
    "InterruptionQueue": ("nodewarden.io", "interruptionqueues", False),
    "AWSCluster": ("infrastructure.cluster.x-k8s.io", "awsclusters", True),
    "AWSManagedControlPlane": ("controlplane.cluster.x-k8s.io", "awsmanagedcontrolplanes", True),
    "Attachment": ("nodewarden.io", "attachments", True),
    "UnhealthyNode": ("nodewarden.io", "unhealthynodes", False),
    "DecoratorController": ("metacontroller.k8s.io", "decoratorcontrollers", False),
    NODECLAIM_KIND: (NODECLAIM_GROUP, "nodeclaims", False),
}
_VERSION = re.compile(r"v[0-9]{1,3}((alpha|beta)[0-9]{1,3})?")
_DEFAULT_VERSION = {"": "v1", "apps": "v1", "nodewarden.io": "v1alpha1", "metacontroller.k8s.io": "v1alpha1",
                    NODECLAIM_GROUP: NODECLAIM_VERSION}


@lru_cache(maxsize=64)
def resource(kind: str, version: str | None = None):
    """The lightkube resource class for a known kind (at ``version`` for CRDs)."""
    if not isinstance(kind, str) or kind not in KINDS:
        raise Unverified(f"{kind!r} is not a kind nodewarden re-reads")
    group, plural, namespaced = KINDS[kind]
    if group == "":
        from lightkube.resources import core_v1

        return getattr(core_v1, kind)
    if group == "apps":
        from lightkube.resources import apps_v1

        return getattr(apps_v1, kind)
    version = version or _DEFAULT_VERSION.get(group)
    if not version:
        raise Unverified(f"no API version given for {kind}")
    make = create_namespaced_resource if namespaced else create_global_resource
    return make(group, version, kind, plural)


def version_of(obj: dict) -> str | None:
    """The version part of an object's apiVersion, if its group is the one KINDS expects."""
    api_version = obj.get("apiVersion") if isinstance(obj.get("apiVersion"), str) else ""
    group, _, version = api_version.rpartition("/")
    expected = KINDS.get(obj.get("kind"), (None,))[0]
    if group != expected or not _VERSION.fullmatch(version):
        return None  # also keeps a crafted "version" from steering the read to another path
    return version


def as_dict(obj) -> dict:
    if isinstance(obj, dict) and not hasattr(obj, "to_dict"):
        return obj
    return obj.to_dict()


def read(kube, kind: str, name: str, namespace: str | None = None, version: str | None = None) -> dict | None:
    """The object as the API server has it now; None only on a 404."""
    res = resource(kind, version)
    namespaced = KINDS[kind][2]
    try:
        found = kube.get(res, name, namespace=namespace if namespaced else None)
    except Exception as exc:  # noqa: BLE001 - anything but a 404 proves nothing
        if is_missing(exc):  # no such object, or no such type (its CRD not installed)
            return None
        raise Unverified(f"cannot read {kind} {_where(name, namespace)} from the API server: "
                         f"{error_text(exc)}") from exc
    return as_dict(found)


def same_object(kube, seen: dict, what: str = "") -> dict:
    """Re-read the object a request body names and require that it is the same one.

    ``seen`` is the body's copy: its kind, version, name, namespace and uid
    say what to read. Raises Unverified unless the API server has an object
    there with that uid; returns the API server's copy.
    """
    meta = seen.get("metadata") if isinstance(seen.get("metadata"), dict) else {}
    kind, name, namespace, uid = seen.get("kind"), meta.get("name"), meta.get("namespace"), meta.get("uid")
    label = what or f"{kind} {_where(name, namespace)}"
    if not isinstance(name, str) or not name:
        raise Unverified(f"{label}: the request names no object")
    if not isinstance(uid, str) or not uid:
        raise Unverified(f"{label}: the request carries no uid to check")
    if not isinstance(kind, str) or kind not in KINDS:
        raise Unverified(f"{kind!r} is not a kind nodewarden re-reads")
    version = None
    if KINDS[kind][0] not in ("", "apps"):
        version = version_of(seen)
        if version is None:
            raise Unverified(f"{kind} with apiVersion {seen.get('apiVersion')!r} is not in group {KINDS[kind][0]}")
    return expect(kube, kind, name, namespace, uid, version, label)


def expect(kube, kind: str, name: str, namespace: str | None, uid: str, version: str | None = None,
           label: str = "") -> dict:
    """The object as the API server has it now, which must exist with ``uid``; else Unverified."""
    label = label or f"{kind} {_where(name, namespace)}"
    found = read(kube, kind, name, namespace, version)
    if found is None:
        raise Unverified(f"{label} does not exist on the API server")
    found_uid = (found.get("metadata") or {}).get("uid")
    if found_uid != uid:
        raise Unverified(f"{label} on the API server is uid {found_uid}, not the {uid} expected")
    return found


def _where(name, namespace) -> str:
    return f"{namespace}/{name}" if namespace else f"{name}"


def same_parent(request: HookRequest, kube) -> HookRequest:
    """The hook request with its parent as the API server has it now: same uid, well formed, or Unverified."""
    parent = same_object(kube, request.parent)
    try:
        return dataclasses.replace(request, parent=parse_object(parent, "parent"))
    except RequestError as exc:
        raise Unverified(f"{request.parent.get('kind')} {request.name} as the API server has it: {exc}") from None
