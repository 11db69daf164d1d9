"""A Machine's user data: its template rendered in a sandbox (pure).

The kubelet must register with the Machine's label and the unregistered
taint, or the Machine can never join its Node; a template that leaves them
out is refused before anything is launched.
"""
from __future__ import annotations

import functools

import jinja2
from jinja2.sandbox import SandboxedEnvironment

from hooks.contract import RequestError
from hooks.machines import names

DEFAULT_TEMPLATE = """#!/bin/bash
set -euo pipefail
# Joins {{ cluster_name }} as machine {{ machine_name }} of node pool {{ nodepool }}.
/etc/eks/bootstrap.sh '{{ cluster_name }}' --kubelet-extra-args '{{ kubelet_args }}'
"""
MAX_RENDERED = 16384


@functools.lru_cache(maxsize=1)
def _environment() -> SandboxedEnvironment:
    # Templates come from a spec: a sandbox keeps them from reaching Python internals.
    return SandboxedEnvironment(undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=True)


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


def render(template: str | None, cluster_name: str, machine_name: str, nodepool: str) -> str:
    """The user data; RequestError when the template fails or would not register the Node as ours."""
    given = values(cluster_name, machine_name, nodepool)
    try:
        text = _environment().from_string(template or DEFAULT_TEMPLATE).render(**given)
    except jinja2.TemplateError as exc:
        raise RequestError("parent.spec.userData", f"does not render: {exc}") from None
    if len(text) > MAX_RENDERED:
        raise RequestError("parent.spec.userData", f"renders to more than {MAX_RENDERED} characters")
    for needed in (given["node_labels"], names.UNREGISTERED_TAINT):
        if needed not in text:
            raise RequestError("parent.spec.userData",
                               f"must register the kubelet with {needed!r} (use {{{{ kubelet_args }}}})")
    return text
