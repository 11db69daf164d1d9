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

from tests.fixtures.writer import HOOK_V1_SUFFIX, decide_case
from worlds.envelope import NAMES, controller_kind, declared_version, object_key

ROOT = pathlib.Path(__file__).parents[1] / "fixtures"
CASES = sorted(p for p in ROOT.glob("*/*.json"))


@pytest.mark.parametrize("path", CASES, ids=[f"{p.parent.name}/{p.stem}" for p in CASES])
def test_fixture(path):
    case = json.loads(path.read_text())
    assert case.get("description"), "every fixture says what it covers"
    assert decide_case(path.parent.name, case) == case["expected"]


def _id(path):
    return f"{path.parent.name}/{path.stem}"


@pytest.mark.parametrize("path", CASES, ids=[_id(p) for p in CASES])
def test_fixture_request_is_shaped_as_its_declared_hook_version(path):
    """Names and keys as Metacontroller sends them for the version the request's controller declares."""
    case = json.loads(path.read_text())
    request = case["request"]
    version = declared_version(request, case["hook"])
    assert version in ("v1", "v2"), "every fixture's controller declares its hook version"
    assert version == ("v1" if path.stem.endswith(HOOK_V1_SUFFIX) else "v2")
    name = request["controller"]["metadata"]["name"]
    parent_name, children_name = NAMES[controller_kind(name)]
    assert set(request) == {"controller", parent_name, children_name, "related", "finalizing"}
    parent = request[parent_name]
    for field in (children_name, "related"):
        for group, objects in request[field].items():
            for key, obj in objects.items():
                assert group == f"{obj['kind']}.{obj['apiVersion']}"
                assert key == object_key(parent, obj, version), f"{field}.{group}.{key}"


TWINS = [p for p in CASES if p.stem.endswith(HOOK_V1_SUFFIX)]


@pytest.mark.parametrize("path", TWINS, ids=[_id(p) for p in TWINS])
def test_hook_v1_and_v2_of_the_same_case_decide_the_same(path):
    v1 = json.loads(path.read_text())
    v2 = json.loads(path.with_name(path.name.replace(HOOK_V1_SUFFIX, "")).read_text())
    assert {k: v1[k] for k in ("hook", "now", "env", "observed")} == {k: v2[k] for k in ("hook", "now", "env", "observed")}
    assert (declared_version(v1["request"], v1["hook"]), declared_version(v2["request"], v2["hook"])) == ("v1", "v2")
    controller = path.parent.name
    assert decide_case(controller, v1) == decide_case(controller, v2) == v1["expected"] == v2["expected"]


def test_every_controller_has_fixtures_in_both_hook_versions():
    from hooks import controllers

    for name in controllers.CONTROLLERS:
        stems = [p.stem for p in CASES if p.parent.name == name]
        assert any(s.endswith(HOOK_V1_SUFFIX) for s in stems), f"{name}: no hook v1 fixture"
        assert any(not s.endswith(HOOK_V1_SUFFIX) for s in stems), f"{name}: no hook v2 fixture"
