"""The controllers this server hosts: name -> (Metacontroller kind, module).

Each module implements hooks.pipeline.Controller and defines ``sync`` and
optionally ``finalize`` and ``customize``, taking the parsed request (and an
optional Context) and returning the response.
"""
from __future__ import annotations

import importlib
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


def load(name: str) -> tuple[str, ModuleType] | None:
    entry = CONTROLLERS.get(name)
    if entry is None:
        return None
    kind, module = entry
    return kind, importlib.import_module(module)


__all__ = ["CONTROLLERS", "COMPOSITE", "DECORATOR", "load"]
