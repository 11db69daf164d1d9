"""A Jinja2 template from a spec, rendered in a sandboxed process of its own, with bounds.

A template is code from a spec. Jinja2's sandbox keeps it from Python's
internals but not from burning time or memory: nested loops, a string
multiplied a billion times or a huge power are each one expression, and one
expression in the hook process would hold every request thread (the GIL) for
as long as it runs. So the template is rendered in a fresh interpreter
(``template_sandbox_worker.py``, isolated mode) that caps its own CPU time and
address space, is killed once ``RENDER_SECONDS`` have passed, and stops as
soon as its output passes the caller's limit. The hook waits for it off the
GIL and is never held longer than that.
"""
from __future__ import annotations

import hashlib
import json
import pathlib
import signal
import subprocess
import sys

from hooks.recent import Recent

# Wall-clock bound of one render, process start included (about 0.1 s when idle).
RENDER_SECONDS = 3.0
# What the rendering process may use of its own.
RENDER_CPU_SECONDS = 1
RENDER_MEMORY_BYTES = 128 * 1024 * 1024  # address space: far more than a few KB of output needs
_WORKER = pathlib.Path(__file__).with_name("template_sandbox_worker.py")

# Renders already done in this process, by template, values and limit: a retried launch renders once. Only
# what the template itself decides is kept (its text, or the error it always gives); a render cut short by
# the clock may succeed on a calmer machine, so it is not kept.
_ANSWERS = Recent(256)


def render(template: str, values: dict, limit: int) -> dict:
    """``{"text"}``, or ``{"error"}`` saying why the template does not render within its bounds; output
    past ``limit`` bytes is an error."""
    request = json.dumps({"template": template, "values": values, "limit": limit})
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
        answer = json.loads(done.stdout[:2 * limit + 4096])
    except ValueError:
        answer = None
    if not isinstance(answer, dict) or not (isinstance(answer.get("text"), str) or isinstance(answer.get("error"), str)):
        if done.returncode == -signal.SIGXCPU:
            return {"error": f"takes more than {RENDER_CPU_SECONDS}s of CPU time to render"}
        # Killed for its memory, or it could not start.
        return {"error": f"does not render: the rendering process ended with status {done.returncode}"}
    _ANSWERS.put(key, answer)
    return answer
