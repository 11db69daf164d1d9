"""Child objects rendered from the Jinja2 templates in ``templates/``.

Templates write JSON (values through ``tojson``), so rendering is exact and
cheap to parse; they are compiled once per process. Values must be JSON-able.
"""
from __future__ import annotations

import functools
import json
import os
import pathlib

import jinja2


def _directory() -> pathlib.Path:
    configured = os.environ.get("NODEWARDEN_TEMPLATES_DIR")
    return pathlib.Path(configured) if configured else pathlib.Path(__file__).resolve().parents[1] / "templates"


@functools.lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_directory())),
        undefined=jinja2.StrictUndefined,  # a missing value is a bug, never an empty string
        autoescape=False,
        keep_trailing_newline=False,
    )


@functools.lru_cache(maxsize=None)
def _template(name: str) -> jinja2.Template:
    return _environment().get_template(name)


@functools.lru_cache(maxsize=8192)
def _rendered(name: str, values_json: str) -> str:
    return _template(name).render(**json.loads(values_json))


def render(name: str, **values) -> dict:
    """The object, as a fresh dict. Renders are memoized by their values: a
    steady-state sync asks for the same child again and again."""
    return json.loads(_rendered(name, json.dumps(values, sort_keys=True, separators=(",", ":"))))
