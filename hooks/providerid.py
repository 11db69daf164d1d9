"""Instance and region from a Node's ``spec.providerID``, and the shape of an EC2 instance id."""
from __future__ import annotations

import re
from dataclasses import dataclass

INSTANCE_ID = re.compile(r"i-[0-9a-f]{8,17}")
_ZONE = re.compile(r"([a-z]{2}(?:-[a-z]+)+-[0-9]+)[a-z]")


class ProviderIDError(ValueError):
    pass


@dataclass(frozen=True)
class ProviderID:
    instance_id: str
    zone: str | None

    @property
    def region(self) -> str | None:
        """The zone minus its letter (us-east-1a → us-east-1); local zones included."""
        if not self.zone:
            return None
        match = _ZONE.fullmatch(self.zone)
        if match:
            return match.group(1)
        # Local/Wavelength zones (us-east-1-bos-1a) end in a letter after a digit too.
        trimmed = self.zone[:-1] if self.zone[-1].isalpha() else self.zone
        parts = trimmed.split("-")
        return "-".join(parts[:3]) if len(parts) >= 3 else None


def parse(provider_id: str | None) -> ProviderID:
    """``aws:///us-east-1a/i-0abc`` or ``aws:////i-0abc``; anything else is an error."""
    if not provider_id or not isinstance(provider_id, str):
        raise ProviderIDError("node has no spec.providerID")
    if not provider_id.startswith("aws://"):
        raise ProviderIDError(f"providerID {provider_id!r} is not an AWS providerID")
    segments = [s for s in provider_id[len("aws://"):].split("/") if s]
    if not segments or not INSTANCE_ID.fullmatch(segments[-1]):
        raise ProviderIDError(f"providerID {provider_id!r} does not end in an instance id")
    zone = segments[-2] if len(segments) >= 2 else None
    return ProviderID(instance_id=segments[-1], zone=zone)
