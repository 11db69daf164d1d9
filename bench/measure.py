"""What the benchmarks share: the percentile they report and where they write their results."""
from __future__ import annotations

import json
import math
import pathlib


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile: with 20 values, p99 is the largest."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def write_json(path: pathlib.Path | None, results: dict) -> None:
    """Results as JSON at ``path`` (the --json option), when one was given."""
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(results, indent=2) + "\n")
