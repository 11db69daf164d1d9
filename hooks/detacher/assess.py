"""Where a node stands in its detach/re-attach life (pure).

Both the look-ups before deciding (what to observe) and the decision itself
start from this one reading of the request, so they can never disagree; it is
kept on the request object, so one call reads the node once.
"""
from __future__ import annotations

from dataclasses import dataclass

from hooks import fields, objects
from hooks.aws import providerid
from hooks.config import Settings
from hooks.contract import HookRequest
from hooks.detacher import names, targets, triggers

# Phases, in the order a detach walks through them.
SKIP = "skip"  # control plane, not ours to touch
IDLE = "idle"  # serving traffic; nothing recorded (no Attachment)
EXCLUDE = "exclude"  # detach wanted: record the load balancers, then label and annotate
DEREGISTER = "deregister"  # label is on: leave every load balancer
DRAIN = "drain"  # wait for the targets to finish draining
SHUTDOWN = "shutdown"  # detached: ordered pod shutdown
REATTACH = "reattach"  # schedulable again: undo exactly what we did
REJOIN = "rejoin"  # back in service: register once more when no deregistration sent before can still land


@dataclass(frozen=True)
class Situation:
    phase: str
    reasons: tuple[str, ...]
    instance_id: str | None
    region: str | None
    provider_error: str | None
    attachment: dict | None  # the observed Attachment's spec
    deregistered: tuple | None  # memberships recorded as deregistered
    deregistering: tuple = ()  # memberships written on the Node as about to leave (sent, or about to be)
    rejoin: tuple = ()  # memberships a re-attach registered, to register once more (REJOIN)

    @property
    def memberships(self) -> list[tuple] | None:
        if self.attachment is None:
            return None
        return targets.from_attachment_spec(self.attachment)

    @property
    def pending(self) -> list[tuple]:
        done = set(self.deregistered or ())
        return [m for m in self.memberships or [] if m not in done]

    def needs_discovery(self) -> bool:
        """The load balancers are looked up as a detach begins, before our exclude label can make their
        controllers drop the node, and again only if the Attachment that froze them is missing."""
        if self.instance_id is None:
            return False
        return self.phase == EXCLUDE or (self.phase == DEREGISTER and self.attachment is None)


def observed_attachment(request: HookRequest, settings: Settings) -> dict | None:
    att = request.children.get(names.ATTACHMENT_KIND, request.name, settings.namespace)
    if att is None:
        return None
    return fields.mapping(att, "spec", where="attachment")


def assess(request: HookRequest, settings: Settings) -> Situation:
    """The node's situation: one reading per request and settings, shared by gather and decide."""
    return request.reading(("node-detacher", id(settings)), lambda: _assess(request, settings))


def _assess(request: HookRequest, settings: Settings) -> Situation:
    node = request.parent
    annotations = fields.mapping(node, "metadata", "annotations")
    labels = fields.mapping(node, "metadata", "labels")
    attachment = observed_attachment(request, settings)
    fields.objects(node, "status", "conditions")  # validated once: conditions.* read it unchecked
    try:
        pid = providerid.parse(fields.string(node, "spec", "providerID"))
        instance_id, region, provider_error = pid.instance_id, pid.region or settings.aws_region or None, None
    except providerid.ProviderIDError as exc:
        instance_id, region, provider_error = None, None, str(exc)
    if attachment and attachment.get("instanceID") not in (None, instance_id):
        attachment = None  # the node was re-created on another instance: rediscover
    deregistered = targets.decode(annotations.get(names.DEREGISTERED))
    deregistering = targets.decode(annotations.get(names.DEREGISTERING)) or []
    rejoin = targets.decode(annotations.get(names.REJOIN)) or []
    reasons = tuple(triggers.reasons(node, settings))
    if request.finalizing and not request.deleting:
        reasons = ()  # the node stopped matching our selector: hand it back as it was

    def situation(phase: str) -> Situation:
        return Situation(
            phase=phase,
            reasons=reasons,
            instance_id=instance_id,
            region=region,
            provider_error=provider_error,
            attachment=attachment,
            deregistered=tuple(deregistered) if deregistered is not None else None,
            deregistering=tuple(deregistering),
            rejoin=tuple(rejoin),
        )

    if objects.is_control_plane(fields.mapping(node, "metadata", "labels")) and not settings.detach_control_plane:
        return situation(SKIP)
    if not reasons:
        if triggers.ours_present(node):
            return situation(REATTACH)
        return situation(REJOIN if any(annotations.get(k) for k in names.REJOIN_ANNOTATIONS) else IDLE)
    if not annotations.get(names.SINCE) or names.EXCLUDE_LABEL not in labels:
        return situation(EXCLUDE)
    pending_or_new = deregistered is None or any(
        m not in set(deregistered) for m in (targets.from_attachment_spec(attachment) if attachment else [])
    )
    if pending_or_new:
        return situation(DEREGISTER)
    if not annotations.get(names.DETACHED_AT):
        return situation(DRAIN)
    return situation(SHUTDOWN)
