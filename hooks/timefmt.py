"""RFC 3339 timestamps as Kubernetes writes them."""
from __future__ import annotations

import datetime as dt


def fmt(moment: dt.datetime) -> str:
    """``moment`` in UTC to the second; the year always has four digits, so every time written reads back with
    ``parse`` (strftime writes the year 999 as ``999``, which no RFC 3339 reader accepts)."""
    return moment.astimezone(dt.timezone.utc).replace(tzinfo=None, microsecond=0).isoformat() + "Z"


def parse(value: str | None) -> dt.datetime | None:
    """Parse a Kubernetes timestamp; None for absent or unreadable values."""
    if not value or not isinstance(value, str):
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(dt.timezone.utc)
    except (ValueError, OverflowError):  # OverflowError: year 1 shifted before year 1
        return None


def seconds_since(value: str | None, now: dt.datetime) -> float | None:
    moment = parse(value)
    return None if moment is None else (now - moment).total_seconds()
