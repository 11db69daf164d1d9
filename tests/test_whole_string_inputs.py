"""Every input check in hooks/ matches the whole string: Python's ``$`` also matches before a final newline, so
``"prod\\n"`` would pass a ``^...$`` pattern with ``re.match``. And a region botocore refuses is an AWS error
with a reason, never a ValueError out of a hook."""
from __future__ import annotations

import ast
import pathlib

import pytest
from botocore.exceptions import ClientError

from hooks import cli, providerid
from hooks.contract import RequestError
from hooks.interruption import queue
from hooks.kube import fresh
from hooks.machines import budgets
from hooks.replacement import spec as replacement_spec
from hooks.teardown.scope import is_region
from hooks.teardown_names import LAST_ERROR
from worlds import cluster_gc as w

HOOKS = pathlib.Path(__file__).resolve().parents[1] / "hooks"


def _compiled_patterns(tree: ast.Module) -> dict[str, str]:
    """Module-level ``NAME = re.compile(<literal>)``: name -> pattern."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and len(node.targets) == 1:
            call, target = node.value, node.targets[0]
            if isinstance(call.func, ast.Attribute) and call.func.attr == "compile" and isinstance(target, ast.Name) \
                    and call.args and isinstance(call.args[0], ast.Constant):
                found[target.id] = call.args[0].value
    return found


def test_no_pattern_in_hooks_is_anchored_with_a_dollar_or_matched_from_the_start_only():
    anchored, matched = [], []
    for path in sorted(HOOKS.rglob("*.py")):
        tree = ast.parse(path.read_text())
        patterns = _compiled_patterns(tree)
        where = path.relative_to(HOOKS.parent)
        anchored += [f"{where}: {name}" for name, pattern in patterns.items() if pattern.endswith("$")]
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "match" \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id in patterns:
                matched.append(f"{where}:{node.lineno}: {node.func.value.id}.match")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "match" \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "re":
                matched.append(f"{where}:{node.lineno}: re.match")
    assert anchored == [], "use fullmatch, not a $ anchor"
    assert matched == [], "use fullmatch, which needs the whole string"


@pytest.mark.parametrize("check", [
    lambda: providerid.parse("aws:///us-east-1a/i-0123456789abcdef0\n"),
    lambda: budgets.parse({"spec": {"disruption": {"budgets": [{"nodes": "10%\n"}]}}}),
    lambda: budgets.parse({"spec": {"disruption": {"budgets": [{"nodes": "3\n"}]}}}),
    lambda: queue.parse({"spec": {"queueURL": "https://sqs.us-east-1.amazonaws.com/123456789012/q\n"}}),
    lambda: queue.parse({"spec": {"queueURL": "https://sqs.us-east-1.amazonaws.com/123456789012/q",
                                  "region": "us-east-1\n"}}),
], ids=["providerID", "budget percent", "budget count", "queue URL", "queue region"])
def test_a_value_with_a_trailing_newline_is_refused(check):
    with pytest.raises((RequestError, providerid.ProviderIDError)):
        check()


def test_the_same_values_without_it_are_taken():
    assert providerid.parse("aws:///us-east-1a/i-0123456789abcdef0").instance_id == "i-0123456789abcdef0"
    assert budgets.parse({"spec": {"disruption": {"budgets": [{"nodes": "10%"}]}}})[0].nodes == "10%"
    assert queue.parse({"spec": {"queueURL": "https://sqs.us-east-1.amazonaws.com/123456789012/q",
                                 "region": "us-east-1"}}).region == "us-east-1"
    assert is_region("us-east-1") and not is_region("us-east-1\n")
    assert fresh.version_of({"apiVersion": "nodewarden.io/v1alpha1", "kind": "Machine"}) == "v1alpha1"
    assert fresh.version_of({"apiVersion": "nodewarden.io/v1alpha1\n", "kind": "Machine"}) is None


@pytest.mark.parametrize("raw", ["40%\n", "4\n"])
def test_a_replacement_limit_with_a_trailing_newline_is_refused(raw):
    assert replacement_spec.int_or_percent("40%", "spec.replacement.maxUnhealthy", 1) == "40%"
    with pytest.raises(RequestError):
        replacement_spec.int_or_percent(raw, "spec.replacement.maxUnhealthy", 1)


def test_an_audit_of_a_name_with_a_trailing_newline_is_a_usage_error(capsys):
    assert cli.main(["gc", "audit", "prod\n", "--region", "us-east-1"]) == 2
    assert "is not a cluster name" in capsys.readouterr().err


def test_a_region_botocore_refuses_is_an_aws_error(make_ctx):
    with pytest.raises(ClientError) as refused:
        make_ctx().aws.client("ec2", "us-east-1\n")
    assert refused.value.response["Error"]["Code"] == "InvalidRegion"


def test_an_aws_cluster_whose_region_ends_in_a_newline_is_held_with_a_reason(make_ctx):
    ctx = make_ctx(kube=w.FakeKube())
    response = w.finalize_once(ctx, w.aws_cluster(region="us-east-1\n"))
    assert response["finalized"] is False
    assert "is not an AWS region" in response["annotations"][LAST_ERROR]
