"""Go-style durations ("60s", "5m", "1m30s", "1.5h") as Kubernetes APIs write them."""
from __future__ import annotations

import re

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


class DurationError(ValueError):
    pass


def parse(value) -> float:
    """Seconds in ``value``: a Go duration string, or a plain number of seconds."""
    if isinstance(value, bool):
        raise DurationError(f"{value!r} is not a duration")
    if isinstance(value, (int, float)):
        if value < 0:
            raise DurationError(f"{value!r} is negative")
        return float(value)
    if not isinstance(value, str) or not value.strip():
        raise DurationError(f"{value!r} is not a duration like '60s' or '5m'")
    text = value.strip()
    if text == "0":
        return 0.0
    pos, total = 0, 0.0
    for match in _PART.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(text) or pos == 0:
        raise DurationError(f"{value!r} is not a duration like '60s', '5m' or '1m30s'")
    return total
