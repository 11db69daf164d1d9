"""The desired Attachment of a detaching node (pure): the load balancers it was in as the detach began, with
any found since, frozen until it is back."""
from __future__ import annotations

from hooks import templates
from hooks.config import Settings
from hooks.contract import HookRequest
from hooks.detacher import targets
from hooks.detacher.assess import IDLE, REJOIN, SKIP, Situation


def desired(request: HookRequest, sit: Situation, settings: Settings, observed: dict) -> list[dict]:
    """The Attachment to ask Metacontroller for; a node that is not detaching has none."""
    if sit.instance_id is None or sit.phase in (SKIP, IDLE, REJOIN):
        return []
    kept = sit.memberships or []
    discovery = observed.get("discovery")
    if discovery is not None:
        known = set(kept)
        memberships = kept + [m for m in (tuple(m) for m in discovery["memberships"]) if m not in known]
        # Nothing new: the Attachment as it is, so Metacontroller writes nothing (each write would also sync
        # the Node again, its owner).
        discovered_at = sit.attachment.get("discoveredAt") if sit.attachment is not None \
            and len(memberships) == len(kept) else discovery["discoveredAt"]
    elif sit.attachment is not None:
        memberships, discovered_at = kept, sit.attachment.get("discoveredAt")
    else:
        return []
    spec = targets.to_attachment_spec(memberships)
    return [
        templates.render(
            "attachment.json.j2",
            node=request.name,
            namespace=settings.namespace,
            instance_id=sit.instance_id,
            region=sit.region or "",
            targets=spec["awsTargets"],
            classic_elbs=[lb["name"] for lb in spec["awsLoadBalancers"]],
            discovered_at=discovered_at,
        )
    ]
