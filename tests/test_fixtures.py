"""JSON fixtures: a saved Metacontroller request in, the decided response and actions out.

Each tests/fixtures/<controller>/<case>.json holds the request as
Metacontroller sends it, the time, settings, what the controller observed
(AWS state, pods), and the expected Plan. decide() is pure, so these run
without AWS or Kubernetes.
"""
from __future__ import annotations

import json
import pathlib

import pytest

from hooks import controllers, timefmt
from hooks.config import load_settings
from hooks.contract import parse_request, shape_response

ROOT = pathlib.Path(__file__).parent / "fixtures"
CASES = sorted(p for p in ROOT.glob("*/*.json"))


def load_case(path: pathlib.Path) -> dict:
    return json.loads(path.read_text())


def run_case(path: pathlib.Path) -> dict:
    case = load_case(path)
    kind, module = controllers.load(path.parent.name)
    hook = case.get("hook", "sync")
    request = parse_request(case["request"], kind, hook)
    settings = load_settings({"NODEWARDEN_CLUSTER_NAME": "test-cluster", **case.get("env", {})})
    plan = module.decide(request, settings, timefmt.parse(case["now"]), case.get("observed", {}))
    result = plan.to_dict()
    # What would go over the wire must also pass the strict v2 field check.
    shape_response(kind, result["response"])
    return result


@pytest.mark.parametrize("path", CASES, ids=[f"{p.parent.name}/{p.stem}" for p in CASES])
def test_fixture(path):
    case = load_case(path)
    assert case.get("description"), "every fixture says what it covers"
    assert run_case(path) == case["expected"]
