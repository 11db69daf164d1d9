"""One thread at a time decodes into a lightkube model type for the first time.

lightkube decodes typed resources (Pod, Node, the Status of an error, a
list of them) with msgspec, which builds its decoder for a type on the first
decode into it, evaluating the model's string annotations through typing:
Python code, so another thread runs meanwhile. Two threads making that first
decode of one type at once crash the process with SIGSEGV in msgspec's
``_core`` (msgspec 0.19 to 0.22 with lightkube 1.0.1: eight threads at a
barrier crash it every time, one thread never does). A hook worker serves on
several threads, so its first concurrent reads of one kind (the pods of
several failing Nodes, the 404 Status of several FencingRequests) took the
whole worker down.

``install`` routes lightkube's decodes through ``decode``: a type's first
decode runs under one process-wide lock, every later one as before.
"""
from __future__ import annotations

import threading
from typing import Any

import msgspec
from lightkube.core import decoders

_msgspec_decode = msgspec.json.decode
_lock = threading.Lock()
_ready: set = set()  # the types msgspec has built its decoder for


def decode(data, type=Any):  # noqa: A002 - msgspec's own keyword, as lightkube passes it
    if type is Any or type in _ready:
        return _msgspec_decode(data, type=type)
    with _lock:
        try:
            return _msgspec_decode(data, type=type)
        finally:
            _ready.add(type)  # built even when this body failed to validate


def install() -> None:
    """Idempotent; lightkube's decoders read the module global at each call."""
    decoders.json_decode = decode
