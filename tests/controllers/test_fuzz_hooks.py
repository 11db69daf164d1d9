"""Every controller and hook, fed the project's own fixture requests with one value mistyped.

A hook must answer (200) or refuse the body with a RequestError (400); any
other exception would be a 500. The bodies come from tests/fixtures: each
example picks a fixture, walks to one value anywhere in its request, and
replaces it with an arbitrary JSON value (wrong types, huge or non-finite
numbers, non-ASCII digits, deep nesting).

No AWS or Kubernetes API is reachable here, on purpose: every client call
fails at once the way an unreachable endpoint does, so the fuzzer explores
the failure paths too and nothing irreversible can happen. This offline
stand-in replaces only the network; the code under test is the real one.
"""
from __future__ import annotations

import copy
import json
import pathlib

import pytest
from botocore.exceptions import EndpointConnectionError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hooks import controllers, runtime
from hooks.config import load_settings
from hooks.contract import RequestError
from hooks.dispatch import serve
from hooks.kube.client import KubeUnavailable

ROOT = pathlib.Path(__file__).parents[1] / "fixtures"
CASES = [(p.parent.name, json.loads(p.read_text())) for p in sorted(ROOT.glob("*/*.json"))]


class _OfflineAws:
    region = staticmethod(lambda: "us-east-1")

    def client(self, service, region=None):
        raise EndpointConnectionError(endpoint_url=f"https://{service}.offline.invalid")


class _OfflineKube:
    def __getattr__(self, name):
        def unreachable(*args, **kwargs):
            raise KubeUnavailable("Kubernetes API unreachable (offline fuzzing)")

        return unreachable


def _ctx(case: dict) -> runtime.Context:
    env = {"NODEWARDEN_CLUSTER_NAME": "test-cluster", "AWS_REGION": "us-east-1", **case.get("env", {})}
    ctx = runtime.Context(load_settings(env), events_inline=True)
    ctx._aws, ctx._kube = _OfflineAws(), _OfflineKube()
    return ctx


leaves = (
    st.none() | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)  # the server refuses NaN/Infinity before any hook
    | st.sampled_from(["", "²", "1.5", "abc", "-1", "10000000000", "70000000h", "0s", "Infinity", "[[[[[]]]]]",
                       "2026-13-45T99:99:99Z", "aws:///", "aws:///us-east-1a/", "{\"a\":", "True", "40%", "101%"])
    | st.text(max_size=6)
)
values = st.recursive(leaves, lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=5), kids,
                                                                                         max_size=3), max_leaves=8)


def _deep(depth: int):
    value: object = "x"
    for _ in range(depth):
        value = {"a": value}
    return value


def _paths(obj, prefix=()):
    """Every place in a body a value can be replaced: each key and each list index, at every depth."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield prefix + (key,)
            yield from _paths(value, prefix + (key,))
    elif isinstance(obj, list):
        for index, value in enumerate(obj):
            yield prefix + (index,)
            yield from _paths(value, prefix + (index,))


SEEDS = [(controller, case, list(_paths(case["request"]))) for controller, case in CASES]


@st.composite
def mutated(draw):
    controller, case, paths = draw(st.sampled_from(SEEDS))
    body = copy.deepcopy(case["request"])
    path = draw(st.sampled_from(paths))
    parent = body
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = draw(values | st.just(_deep(400)))
    return controller, case, body


def _calls(controller: str, case: dict, body) -> list[tuple[str, object]]:
    """(hook, body) pairs: the fixture's own hook, and customize on the same parent where there is one."""
    _, module = controllers.load(controller)
    calls = [(case.get("hook", "sync"), body)]
    if hasattr(module, "customize") and isinstance(body, dict):
        # A customize request carries the parent under "parent" in both hook versions.
        parent = body.get("parent", body.get("object"))
        calls.append(("customize", {"controller": body.get("controller"), "parent": parent}))
    return calls


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_a_mistyped_value_anywhere_is_answered_or_refused(example):
    controller, case, body = example
    for hook, hook_body in _calls(controller, case, body):
        try:
            response = serve(controller, hook, copy.deepcopy(hook_body), _ctx(case))
        except RequestError:
            continue
        assert isinstance(response, dict)
        json.dumps(response, allow_nan=False)  # what goes back over the wire is plain JSON


@pytest.mark.parametrize("controller", sorted(controllers.CONTROLLERS))
def test_every_controller_is_fuzzed(controller):
    assert any(c == controller for c, _ in CASES), f"no fixture seeds the fuzzer for {controller}"


@pytest.mark.parametrize("controller,case", [c for c in CASES], ids=[f"{c}-{i}" for i, (c, _) in enumerate(CASES)])
def test_every_fixture_answers_offline(controller, case):
    """The unmutated fixtures answer with no API reachable (the baseline the fuzzer mutates)."""
    for hook, hook_body in _calls(controller, case, case["request"]):
        try:
            serve(controller, hook, copy.deepcopy(hook_body), _ctx(case))
        except RequestError as exc:
            pytest.fail(f"{controller}/{hook} refused its own fixture: {exc}")
