"""The one validating parser for values read from a spec, a status or an annotation.

Every number, duration and encoded value a controller reads from an object
goes through here, so input the CRDs accept (``"²"``, ``Infinity``,
``"70000000h"``, ``1e400``, a 10,000-deep JSON annotation) becomes a clear
RequestError naming the field, never an exception deep inside a controller.
Controllers turn a RequestError from a spec into a condition saying why, and
the server answers 400 for a body it cannot read.

Our own progress counters (annotations we write) are read leniently:
garbage there reads as the default, because refusing would stall a node on
a value nobody but us should have written.
"""
from __future__ import annotations

import json
import math
import re
from typing import Any, Mapping

from hooks import durations
from hooks.contract import RequestError

# Longest duration any setting of ours may take: a year. Longer ones are
# mistakes (and past ~2.9e11 s a datetime overflows).
MAX_DURATION_SECONDS = 366 * 24 * 3600.0
# Our counters (attempts, pods deleted) never need more.
MAX_COUNTER = 1_000_000
# Encoded annotations of ours: small and flat.
MAX_JSON_BYTES = 64 * 1024
MAX_JSON_DEPTH = 6

_DIGITS = re.compile(r"[0-9]{1,18}")  # ASCII only: "²".isdigit() is True


def whole_number(value: Any, where: str, *, minimum: int, maximum: int, default: int | None = None,
                 strings: bool = False) -> int:
    """An integer in [minimum, maximum]; integral floats pass, bools, inf and NaN do not."""
    if value is None:
        if default is None:
            raise RequestError(where, "is required")
        return default
    if isinstance(value, bool):
        raise RequestError(where, f"must be a whole number, got {value!r}")
    if isinstance(value, str) and strings:
        if not _DIGITS.fullmatch(value.strip()):
            raise RequestError(where, f"must be a whole number, got {value[:40]!r}")
        value = int(value.strip())
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise RequestError(where, f"must be a whole number, got {value!r}")
        value = int(value)
    if not isinstance(value, int):
        raise RequestError(where, f"must be a whole number, got {type(value).__name__}")
    if value < minimum or value > maximum:
        raise RequestError(where, f"must be from {minimum} to {maximum}, got {value}")
    return value


def duration(value: Any, where: str, *, default: float | None = None, minimum: float = 0.0,
             maximum: float = MAX_DURATION_SECONDS, positive: bool = False) -> float:
    """Seconds in a Go duration (``"90s"``, ``"1m30s"``) or a number, within bounds."""
    if value is None:
        if default is None:
            raise RequestError(where, "is required")
        return default
    if isinstance(value, str) and len(value) > 64:
        raise RequestError(where, f"is not a duration: {len(value)} characters long")
    try:
        seconds = durations.parse(value)
    except durations.DurationError as exc:
        raise RequestError(where, str(exc)) from None
    if not math.isfinite(seconds):
        raise RequestError(where, f"must be a finite duration, got {value!r}")
    if positive and seconds <= 0:
        raise RequestError(where, f"must be longer than 0s, got {value!r}")
    if seconds < minimum or seconds > maximum:
        raise RequestError(where, f"must be from {minimum:g}s to {maximum:g}s, got {value!r}")
    return seconds


def counter(annotations: Mapping[str, Any], key: str, maximum: int = MAX_COUNTER) -> int:
    """One of our own counters from an annotation; missing or unreadable reads as 0."""
    raw = annotations.get(key) if isinstance(annotations, Mapping) else None
    if isinstance(raw, str) and _DIGITS.fullmatch(raw.strip()):
        return min(int(raw.strip()), maximum)
    return 0


def status_counter(obj: Mapping[str, Any], key: str, maximum: int = MAX_COUNTER) -> int:
    """A counter we keep in a status field; anything but a sane whole number reads as 0."""
    raw = obj.get(key) if isinstance(obj, Mapping) else None
    if isinstance(raw, bool):
        return 0
    if isinstance(raw, int):
        return max(0, min(raw, maximum))
    if isinstance(raw, float) and math.isfinite(raw):
        return max(0, min(int(raw), maximum))
    if isinstance(raw, str):
        return counter({key: raw}, key, maximum)
    return 0


def json_value(text: Any, where: str, *, max_bytes: int = MAX_JSON_BYTES, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Decode a small JSON annotation, refusing huge or deeply nested ones before decoding."""
    if not isinstance(text, str):
        raise RequestError(where, f"must be a JSON string, got {type(text).__name__}")
    if len(text) > max_bytes:
        raise RequestError(where, f"is {len(text)} bytes; at most {max_bytes} are read")
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:  # bracket depth, outside strings, so json.loads never recurses deep
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
            if deepest > max_depth:
                raise RequestError(where, f"is nested deeper than {max_depth} levels")
        elif ch in "]}":
            depth -= 1
    try:
        return json.loads(text)
    except ValueError as exc:
        raise RequestError(where, f"is not valid JSON: {exc}") from None
