"""JSON fixtures: a saved Metacontroller request in, the decided response and actions out.

Each tests/fixtures/<controller>/<case>.json holds the request as
Metacontroller sends it, the time, settings, what the controller observed
(AWS state, pods), and the expected Plan. decide() is pure, so these run
without AWS or Kubernetes. tests/fixtures/make_*.py write them.
"""
from __future__ import annotations

import json
import pathlib

import pytest

from tests.fixtures.writer import decide_case

ROOT = pathlib.Path(__file__).parent / "fixtures"
CASES = sorted(p for p in ROOT.glob("*/*.json"))


@pytest.mark.parametrize("path", CASES, ids=[f"{p.parent.name}/{p.stem}" for p in CASES])
def test_fixture(path):
    case = json.loads(path.read_text())
    assert case.get("description"), "every fixture says what it covers"
    assert decide_case(path.parent.name, case) == case["expected"]
