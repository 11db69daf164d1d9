"""A Machine's user data: its template rendered in a sandboxed process of its own, with bounds.

A template is code from a spec. Jinja2's sandbox keeps it from Python's
internals but not from burning time or memory: nested loops, a string
multiplied a billion times or a huge power are each one expression, and one
expression in the hook process would hold every request thread (the GIL) for
as long as it runs. So the template is rendered in a fresh interpreter
(``userdata_worker.py``, isolated mode) that caps its own CPU time and
address space, is killed once ``RENDER_SECONDS`` have passed, and stops as
soon as its output passes EC2's limit (16 KB of user data before base64).
The hook waits for it off the GIL and is never held longer than that.

Rendering happens only for a Machine the API server confirmed, right before a
launch (gather), never on a request body alone.

The kubelet must register with the Machine's label and the unregistered
taint, or the Machine can never join its Node; a template that leaves them
out is refused before anything is launched.
"""
from __future__ import annotations

import hashlib
import json
import pathlib
import signal
import subprocess
import sys

from hooks.contract import RequestError
from hooks.recent import Recent
from hooks.machines import names

DEFAULT_TEMPLATE = """#!/bin/bash
set -euo pipefail
# Joins {{ cluster_name }} as machine {{ machine_name }} of node pool {{ nodepool }}.
/etc/eks/bootstrap.sh '{{ cluster_name }}' --kubelet-extra-args '{{ kubelet_args }}'
"""
# EC2 takes at most 16 KB of user data, counted before base64 encoding.
MAX_RENDERED_BYTES = 16384
# Wall-clock bound of one render, process start included (about 0.1 s when idle).
RENDER_SECONDS = 3.0
# What the rendering process may use of its own.
RENDER_CPU_SECONDS = 1
RENDER_MEMORY_BYTES = 128 * 1024 * 1024  # address space: far more than 16 KB of output needs
_WORKER = pathlib.Path(__file__).with_name("userdata_worker.py")
FIELD = "parent.spec.userData"


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


# Renders already done in this process, by template and values: a retried launch renders once. Only what
# the template itself decides is kept (its text, or the error it always gives); a render cut short by the
# clock may succeed on a calmer machine, so it is not kept.
_ANSWERS = Recent(256)


def _render(template: str, given: dict) -> dict:
    """{"text"} or {"error"}, from the worker process."""
    request = json.dumps({"template": template, "values": given, "limit": MAX_RENDERED_BYTES})
    key = hashlib.sha256(request.encode()).hexdigest()
    known = _ANSWERS.get(key)
    if known is not None:
        return known
    argv = [sys.executable, "-I", str(_WORKER), str(RENDER_CPU_SECONDS), str(RENDER_MEMORY_BYTES)]
    try:
        done = subprocess.run(argv, input=request.encode(), capture_output=True, timeout=RENDER_SECONDS,
                              check=False)
    except subprocess.TimeoutExpired:  # the process is killed by now
        return {"error": f"does not render within {RENDER_SECONDS:g}s"}
    try:
        answer = json.loads(done.stdout[:2 * MAX_RENDERED_BYTES + 4096])
    except ValueError:
        answer = None
    if not isinstance(answer, dict) or not (isinstance(answer.get("text"), str) or isinstance(answer.get("error"), str)):
        if done.returncode == -signal.SIGXCPU:
            return {"error": f"takes more than {RENDER_CPU_SECONDS}s of CPU time to render"}
        # Killed for its memory, or it could not start.
        return {"error": f"does not render: the rendering process ended with status {done.returncode}"}
    _ANSWERS.put(key, answer)
    return answer


def render(template: str | None, cluster_name: str, machine_name: str, nodepool: str) -> str:
    """The user data; RequestError when the template fails, is too slow or too big, or would not
    register the Node as the Machine's."""
    given = values(cluster_name, machine_name, nodepool)
    answer = _render(template or DEFAULT_TEMPLATE, given)
    if "error" in answer:
        raise RequestError(FIELD, answer["error"])
    text = answer["text"]
    if len(text.encode()) > MAX_RENDERED_BYTES:
        raise RequestError(FIELD, f"renders to more than {MAX_RENDERED_BYTES} bytes")
    for needed in (given["node_labels"], names.UNREGISTERED_TAINT):
        if needed not in text:
            raise RequestError(FIELD, f"must register the kubelet with {needed!r} (use {{{{ kubelet_args }}}})")
    return text
