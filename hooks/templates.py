"""Child objects rendered from the Jinja2 templates in ``templates/``.

Templates write JSON (values through ``tojson``), so rendering is exact and
cheap to parse; they are compiled once per process.
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


def render(name: str, **values) -> dict:
    return json.loads(_template(name).render(**values))
