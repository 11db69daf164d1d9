"""``nodewarden gc plan`` and ``gc audit`` given input they cannot use: a clear error and exit 2, never a
traceback, and never a verdict on a name no cluster can have."""
from __future__ import annotations

import pytest

from hooks import cli
from worlds import cluster_gc as w
from worlds.fake_kube import FakeKube

pytestmark = pytest.mark.moto


@pytest.fixture
def net(aws):
    return w.network(aws("ec2"))


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    args = cli.build_parser().parse_args(["gc", *argv])
    code = args.func(args, kube=FakeKube()) if argv[0] == "plan" else args.func(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("command", ["plan", "audit"])
@pytest.mark.parametrize("name", ["", "alpha*", "alph?", "alpha/x", " alpha"])
def test_a_name_no_cluster_can_have_is_a_usage_error(aws, net, capsys, command, name):
    """EC2's tag filters take ``*`` and ``?`` as wildcards: ``alpha*`` would audit alpha-2's resources as
    alpha's leftovers; an empty name audits nothing and would pass as clean."""
    w.build_cluster(aws, net, "b", w.cluster_tags("alpha-2"), security_groups=1, network_interfaces=1)
    code, out, err = _run(capsys, command, name, "--region", w.REGION)
    assert code == 2 and out == ""
    assert "cluster name" in err and repr(name) in err


@pytest.mark.parametrize("command", ["plan", "audit"])
def test_a_region_that_is_not_one_is_a_usage_error(aws, capsys, command):
    code, out, err = _run(capsys, command, "alpha", "--region", "not a region")
    assert code == 2 and out == ""
    assert "'not a region'" in err and "not an AWS region" in err


def test_an_empty_gc_task_is_a_usage_error(aws, capsys):
    """An empty --gc-task would plan no task at all, every resource 'its task is not selected'."""
    code, out, err = _run(capsys, "plan", "alpha", "--region", w.REGION, "--gc-task", "")
    assert code == 2 and out == ""
    assert "--gc-task" in err


def test_a_plan_file_nested_too_deep_is_a_usage_error(aws, capsys, tmp_path):
    path = tmp_path / "plan.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    code, out, err = _run(capsys, "audit", "alpha", "--region", w.REGION, "--expect-kept", str(path))
    assert code == 2 and out == ""
    assert "--expect-kept" in err
