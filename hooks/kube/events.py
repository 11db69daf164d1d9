"""Kubernetes Events about the objects nodewarden acts on."""
from __future__ import annotations

import logging
import uuid

from lightkube.models.core_v1 import EventSource, ObjectReference
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Event

from hooks import timefmt
from hooks.runtime import utcnow

log = logging.getLogger(__name__)


def emit(kube, obj: dict, reason: str, message: str, *, warning: bool = False, component: str = "nodewarden") -> bool:
    """Create an Event; never raises (an Event is a report, not progress)."""
    meta = obj.get("metadata", {})
    # Cluster-scoped objects (Nodes) have their Events in "default", like the kubelet's.
    namespace = meta.get("namespace") or "default"
    now = timefmt.fmt(utcnow())
    event = Event(
        metadata=ObjectMeta(name=f"{meta.get('name', 'object')}.{uuid.uuid4().hex[:16]}", namespace=namespace),
        involvedObject=ObjectReference(
            apiVersion=obj.get("apiVersion"),
            kind=obj.get("kind"),
            name=meta.get("name"),
            namespace=meta.get("namespace"),
            uid=meta.get("uid"),
        ),
        reason=reason,
        message=message[:1024],
        type="Warning" if warning else "Normal",
        source=EventSource(component=component),
        firstTimestamp=now,
        lastTimestamp=now,
        count=1,
    )
    try:
        kube.create(event, namespace=namespace)
        return True
    except Exception as exc:  # noqa: BLE001 - an Event must never fail a hook
        log.warning("event not recorded", extra={"reason": reason, "error": str(exc)})
        return False
