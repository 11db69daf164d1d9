"""JSON logs, each line carrying the id of the request being served."""
from __future__ import annotations

import contextvars
import logging
import sys

from pythonjsonlogger.json import JsonFormatter

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")


class _RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id.get()
        return True


def configure(level: str = "INFO") -> None:
    """Install one JSON handler on the root logger (idempotent)."""
    root = logging.getLogger()
    if any(getattr(h, "_nodewarden", False) for h in root.handlers):
        root.setLevel(level)
        return
    handler = logging.StreamHandler(sys.stderr)
    handler._nodewarden = True  # type: ignore[attr-defined]
    handler.addFilter(_RequestIdFilter())
    handler.setFormatter(
        JsonFormatter(
            "%(asctime)s %(levelname)s %(name)s %(message)s %(request_id)s",
            rename_fields={"levelname": "level", "asctime": "time"},
        )
    )
    root.addHandler(handler)
    root.setLevel(level)
    # botocore and urllib3 are chatty at INFO; their failures reach us as exceptions.
    for noisy in ("botocore", "urllib3", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
