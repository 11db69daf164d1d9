"""The controllers this server hosts: name -> (Metacontroller kind, module).

Each module implements hooks.pipeline.Controller and defines ``sync`` and
optionally ``finalize`` and ``customize``, taking the parsed request (and an
optional Context) and returning the response.
"""
from __future__ import annotations

import importlib
import threading
from types import ModuleType

from hooks.contract import COMPOSITE, DECORATOR

CONTROLLERS: dict[str, tuple[str, str]] = {
    "node": (DECORATOR, "hooks.controllers.node"),
    "node-detacher": (DECORATOR, "hooks.controllers.node_detacher"),
    "node-detacher-pods": (DECORATOR, "hooks.controllers.node_detacher_pods"),
    "node-fencing": (DECORATOR, "hooks.controllers.node_fencing"),
    "node-fencing-policy": (COMPOSITE, "hooks.controllers.node_fencing_policy"),
    "fencing-request": (COMPOSITE, "hooks.controllers.fencing_request"),
    "cluster-gc": (DECORATOR, "hooks.controllers.cluster_gc"),
    "nodepool": (COMPOSITE, "hooks.controllers.nodepool"),
    "machine": (COMPOSITE, "hooks.controllers.machine"),
    "interruption": (COMPOSITE, "hooks.controllers.interruption"),
}


# Python's imports are not safe for first imports of one import cycle from two threads at once (ours, or
# lightkube's own): one thread gets a half-initialised module. A controller's first import takes this lock.
_IMPORT_LOCK = threading.Lock()
_imported: dict[str, ModuleType] = {}


def _import_once(module: str) -> ModuleType:
    """``module``, imported under the one import lock the first time: a thread that asks while another
    imports it waits for that import instead of starting its own."""
    loaded = _imported.get(module)
    if loaded is None:
        with _IMPORT_LOCK:
            loaded = _imported.get(module) or importlib.import_module(module)
            _imported[module] = loaded
    return loaded


def load(name: str) -> tuple[str, ModuleType] | None:
    entry = CONTROLLERS.get(name)
    if entry is None:
        return None
    kind, module = entry
    return kind, _import_once(module)


def load_all() -> None:
    """Every controller's module (and all it imports), on the calling thread."""
    for name in CONTROLLERS:
        load(name)


__all__ = ["CONTROLLERS", "COMPOSITE", "DECORATOR", "load", "load_all"]
