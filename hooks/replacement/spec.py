"""spec.replacement: how a fenced node is replaced, on a NodeFencingPolicy and on the FencingRequest it makes."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from hooks import bounds, fields, owner_names
from hooks.contract import RequestError

DEFAULT_REBOOT_TIMEOUT = 300.0
DEFAULT_MAX_UNHEALTHY = "40%"  # the storm guard's default too (hooks/fencing/policy.py)
DEFAULT_MAX_REPLACING = 1
MAX_MEMBERS = 9_999_999  # the CRD allows 7 digits
MAX_REBOOT_TIMEOUT = 86400.0
_PERCENT = re.compile(r"([0-9]{1,3})%")


@dataclass(frozen=True)
class ReplacementSpec:
    mode: str = owner_names.REPLACE_OWNER
    unattributed: str = owner_names.UNATTRIBUTED_KEEP
    reboot_timeout: float = DEFAULT_REBOOT_TIMEOUT
    max_unhealthy: int | str = DEFAULT_MAX_UNHEALTHY
    max_replacing: int | str = DEFAULT_MAX_REPLACING
    declared: bool = True  # False: the object has no spec.replacement (``mode`` is then the caller's default)

    @property
    def enabled(self) -> bool:
        return self.mode == owner_names.REPLACE_OWNER

    def allowed_unhealthy(self, total: int) -> int:
        """Unhealthy members a group may have for a replacement to start: never fewer than one, so a group of
        1 to 4 nodes may always replace one."""
        return max(1, scaled(self.max_unhealthy, total, round_up=False))

    def allowed_replacing(self, total: int) -> int:
        """Replacements a group may have in flight at once (a percentage rounds up, as Cluster API's
        maxInFlight does; 0 stops replacement in the group)."""
        return scaled(self.max_replacing, total, round_up=True)

    def to_dict(self) -> dict:
        """As written into a FencingRequest's spec: every field, so the request never depends on defaults."""
        return {"mode": self.mode, "unattributed": self.unattributed, "rebootTimeout": f"{self.reboot_timeout:g}s",
                "maxUnhealthy": self.max_unhealthy, "maxReplacing": self.max_replacing}


def scaled(value: int | str, total: int, round_up: bool) -> int:
    """An int, or a percentage of ``total``."""
    if isinstance(value, int):
        return value
    share = total * int(_PERCENT.fullmatch(value).group(1)) / 100
    return math.ceil(share) if round_up else math.floor(share)


def int_or_percent(raw, path: str, default: int | str, maximum: int = MAX_MEMBERS) -> int | str:
    """An integer (or a string of digits) from 0 to ``maximum``, or a percentage from 0% to 100%."""
    if raw is None:
        return default
    if isinstance(raw, bool):
        raise RequestError(path, "must be an integer or a percentage like '40%'")
    if isinstance(raw, int):
        return bounds.whole_number(raw, path, minimum=0, maximum=maximum)
    if isinstance(raw, str):
        if raw.isascii() and raw.isdigit():  # "²".isdigit() is True too
            return bounds.whole_number(raw, path, minimum=0, maximum=maximum, strings=True)
        match = _PERCENT.fullmatch(raw)
        if match and int(match.group(1)) <= 100:
            return raw
    raise RequestError(path, f"must be an integer or a percentage from 0% to 100%, got {raw!r}")


def _choice(section: dict, key: str, allowed: tuple[str, ...], default: str, path: str) -> str:
    value = fields.string(section, key, where=path, default=default)
    if value not in allowed:
        raise RequestError(f"{path}.{key}", f"must be one of {', '.join(allowed)}, got {value!r}")
    return value


def parse_replacement(obj: dict, where: str = "parent", absent: str = owner_names.REPLACE_OWNER) -> ReplacementSpec:
    """``spec.replacement`` of ``obj``; RequestError names a bad field.

    ``absent`` is the mode when the object has no ``spec.replacement``: a
    policy's default is Owner; a FencingRequest without one (made by hand)
    is not replaced, since node-fencing always writes the policy's in full.
    """
    spec = fields.mapping(obj, "spec", where=where)
    if spec.get("replacement") is None:
        return ReplacementSpec(mode=absent, declared=False)
    path = f"{where}.spec.replacement"
    section = fields.mapping(obj, "spec", "replacement", where=where)
    return ReplacementSpec(
        mode=_choice(section, "mode", owner_names.REPLACE_MODES, owner_names.REPLACE_OWNER, path),
        unattributed=_choice(section, "unattributed", owner_names.UNATTRIBUTED_CHOICES,
                             owner_names.UNATTRIBUTED_KEEP, path),
        reboot_timeout=bounds.duration(section.get("rebootTimeout"), f"{path}.rebootTimeout",
                                       default=DEFAULT_REBOOT_TIMEOUT, maximum=MAX_REBOOT_TIMEOUT, positive=True),
        max_unhealthy=int_or_percent(section.get("maxUnhealthy"), f"{path}.maxUnhealthy", DEFAULT_MAX_UNHEALTHY),
        max_replacing=int_or_percent(section.get("maxReplacing"), f"{path}.maxReplacing", DEFAULT_MAX_REPLACING),
    )
