"""Where a node stands in its detach/re-attach life (pure).

Both the look-ups before deciding (what to observe) and the decision itself
start from this one reading of the request, so they can never disagree; it is
kept on the request object, so one call reads the node once.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from hooks import detacher_names, fields, objects, providerid, timefmt
from hooks.config import Settings
from hooks.contract import HookRequest
from hooks.detacher import targets, triggers

# Phases, in the order a detach walks through them.
SKIP = "skip"  # control plane, not ours to touch
IDLE = "idle"  # serving traffic; nothing recorded (no Attachment)
EXCLUDE = "exclude"  # detach wanted: record the load balancers, then label and annotate
DEREGISTER = "deregister"  # label is on: leave every load balancer
DRAIN = "drain"  # wait for the targets to finish draining
SHUTDOWN = "shutdown"  # detached: ordered pod shutdown
REATTACH = "reattach"  # schedulable again: undo exactly what we did
REJOIN = "rejoin"  # back in service: register once more when no deregistration sent before can still land

# Every load-balancer call of ours has landed this long after the call that decided it: node_detacher sends
# each within 5 s of that call or not at all (the check made with its rate-limit token in hand, so no wait
# for one comes after it), one sent lands within hooks.aws.elb.CALL_SECONDS (30 s), and the rest is room for two processes' clocks and timestamps to the second.
LANDED_SECONDS = 45.0


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
    # While a registration of ours may still be under way (a rejoin annotation is on the node): when every one
    # sent before this detach began has landed. None when none can be.
    registrations_land_by: dt.datetime | None = None
    # When the latest re-attach or rejoin decided its registrations (nodewarden.io/rejoin-at less
    # LANDED_SECONDS), as the Node says; None when it says none.
    registering_since: dt.datetime | None = None

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
    att = request.children.get(detacher_names.ATTACHMENT_KIND, request.name, settings.namespace)
    if att is None:
        return None
    return fields.mapping(att, "spec", where="attachment")


def assess(request: HookRequest, settings: Settings, now: dt.datetime) -> Situation:
    """The node's situation: one reading per request, settings and moment, shared by gather and decide."""
    return request.reading(("node-detacher", id(settings), now), lambda: _assess(request, settings, now))


def rejoin_at(annotations: dict, now: dt.datetime) -> dt.datetime | None:
    """nodewarden.io/rejoin-at, LANDED_SECONDS after a re-attach or a rejoin decided its registrations (written
    before them, or with them), so at most that far ahead: one further ahead is none of ours, read as absent."""
    due = timefmt.parse(annotations.get(detacher_names.REJOIN_AT))
    if due is None or due > now + dt.timedelta(seconds=LANDED_SECONDS):
        return None
    return due


def _registrations_land_by(annotations: dict, now: dt.datetime) -> dt.datetime | None:
    """When every registration of ours sent before this detach began has landed, while a rejoin annotation
    says one may still be under way: a re-attach writes them before it registers and a rejoin keeps
    nodewarden.io/rejoin-at until its own have landed. Those of a re-attach have landed by rejoin-at; a
    rejoin's, decided on the node schedulable, before the detach began, LANDED_SECONDS after it began."""
    if not any(annotations.get(k) for k in detacher_names.REJOIN_ANNOTATIONS):
        return None
    since = timefmt.parse(annotations.get(detacher_names.SINCE))
    bounds = [rejoin_at(annotations, now), since + dt.timedelta(seconds=LANDED_SECONDS) if since else None]
    return max((b for b in bounds if b is not None), default=None)


def began_before_registering(since: dt.datetime | None, registering_since: dt.datetime | None) -> bool:
    """Whether the detach on record (``since``) began no later than a re-attach or rejoin decided registrations:
    then the node may have been registered since, and what that detach recorded (what left, that it drained)
    proves nothing about it."""
    return since is not None and registering_since is not None and since <= registering_since


def _assess(request: HookRequest, settings: Settings, now: dt.datetime) -> Situation:
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
    deregistered = targets.decode(annotations.get(detacher_names.DEREGISTERED))
    joined_at = rejoin_at(annotations, now)
    registering_since = joined_at - dt.timedelta(seconds=LANDED_SECONDS) if joined_at is not None else None
    deregistering = targets.decode(annotations.get(detacher_names.DEREGISTERING)) or []
    rejoin = targets.decode(annotations.get(detacher_names.REJOIN)) or []
    reasons = tuple(triggers.reasons(node, settings))
    if request.finalizing and not request.deleting:
        reasons = ()  # the node stopped matching our selector: hand it back as it was
    # Leaving again after a re-attach began registering, with the detach it interrupted still on record (its
    # answer was lost, or never came): that detach is over. A new one begins, and everything leaves again.
    restart = bool(reasons) and began_before_registering(timefmt.parse(annotations.get(detacher_names.SINCE)),
                                                          registering_since)
    if restart:
        deregistered = None

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
            registrations_land_by=_registrations_land_by(annotations, now),
            registering_since=registering_since,
        )

    if objects.is_control_plane(fields.mapping(node, "metadata", "labels")) and not settings.detach_control_plane:
        return situation(SKIP)
    if not reasons:
        if triggers.ours_present(node):
            return situation(REATTACH)
        return situation(REJOIN if any(annotations.get(k) for k in detacher_names.REJOIN_ANNOTATIONS) else IDLE)
    if not annotations.get(detacher_names.SINCE) or detacher_names.EXCLUDE_LABEL not in labels or restart:
        return situation(EXCLUDE)
    pending_or_new = deregistered is None or any(
        m not in set(deregistered) for m in (targets.from_attachment_spec(attachment) if attachment else [])
    )
    if pending_or_new:
        return situation(DEREGISTER)
    if not annotations.get(detacher_names.DETACHED_AT):
        return situation(DRAIN)
    return situation(SHUTDOWN)
