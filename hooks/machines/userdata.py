"""A Machine's user data: its template, the values it is rendered with, and what the result must hold.

The rendering itself runs in a sandboxed process with bounds (hooks/template_sandbox.py), which the
caller hands to ``render``: a template is code from a spec. Rendering happens only for a Machine the API
server confirmed, right before a launch (gather), never on a request body alone.

The kubelet must register with the Machine's label and the unregistered
taint, or the Machine can never join its Node; a template that leaves them
out is refused before anything is launched.
"""
from __future__ import annotations

from typing import Callable

from hooks.contract import RequestError
from hooks.machines import names

DEFAULT_TEMPLATE = """#!/bin/bash
set -euo pipefail
# Joins {{ cluster_name }} as machine {{ machine_name }} of node pool {{ nodepool }}.
/etc/eks/bootstrap.sh '{{ cluster_name }}' --kubelet-extra-args '{{ kubelet_args }}'
"""
# EC2 takes at most 16 KB of user data, counted before base64 encoding.
MAX_RENDERED_BYTES = 16384
FIELD = "parent.spec.userData"

# (template, values, limit) -> {"text"} or {"error"}: hooks.template_sandbox.render.
Renderer = Callable[[str, dict, int], dict]


def values(cluster_name: str, machine_name: str, nodepool: str) -> dict:
    node_labels = f"{names.MACHINE_LABEL}={machine_name}"
    taints = f"{names.UNREGISTERED_TAINT}=true:{names.UNREGISTERED_EFFECT}"
    return {
        "cluster_name": cluster_name,
        "machine_name": machine_name,
        "nodepool": nodepool,
        "node_labels": node_labels,
        "register_with_taints": taints,
        "kubelet_args": f"--node-labels={node_labels} --register-with-taints={taints}",
    }


def render(template: str | None, cluster_name: str, machine_name: str, nodepool: str, renderer: Renderer) -> str:
    """The user data; RequestError when the template fails, is too slow or too big, or would not
    register the Node as the Machine's."""
    given = values(cluster_name, machine_name, nodepool)
    answer = renderer(template or DEFAULT_TEMPLATE, given, MAX_RENDERED_BYTES)
    if "error" in answer:
        raise RequestError(FIELD, answer["error"])
    text = answer["text"]
    if len(text.encode()) > MAX_RENDERED_BYTES:
        raise RequestError(FIELD, f"renders to more than {MAX_RENDERED_BYTES} bytes")
    for needed in (given["node_labels"], names.UNREGISTERED_TAINT):
        if needed not in text:
            raise RequestError(FIELD, f"must register the kubelet with {needed!r} (use {{{{ kubelet_args }}}})")
    return text
