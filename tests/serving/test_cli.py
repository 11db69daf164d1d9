"""`nodewarden replay`: how users try a hook on a saved request."""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

from worlds.envelope import hook_request

ROOT = pathlib.Path(__file__).parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "node-detacher" / "shutdown-next-group.json"


def run(*args, env=None):
    return subprocess.run([sys.executable, "-m", "hooks.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "NODEWARDEN_CLUSTER_NAME": "test-cluster",
                               "AWS_REGION": "us-east-1", **(env or {})}, timeout=60)


def test_offline_replay_prints_the_decided_response_and_actions():
    # The fixture is node-detacher's own decision; its request is the node decorator's, which runs node-detacher
    # among its concerns, so the concern is named.
    out = run("replay", str(FIXTURE), "--offline", "--controller", "node-detacher")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    expected = json.loads(FIXTURE.read_text())["expected"]
    assert result["response"] == {k: v for k, v in expected["response"].items()}
    assert result["actions"] == expected["actions"]


def test_replay_of_a_raw_request_guesses_the_controller(tmp_path):
    body = json.loads(FIXTURE.read_text())["request"]
    path = tmp_path / "req.json"
    path.write_text(json.dumps(body))
    out = run("replay", str(path), "--offline")
    assert out.returncode == 0, out.stderr
    assert "attachments" in json.loads(out.stdout)["response"]


def test_replay_of_a_bad_request_says_what_is_wrong(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(hook_request("node-detacher", {"metadata": {}})))
    out = run("replay", str(path), "--offline")
    assert out.returncode == 2
    assert "object.metadata.name" in out.stderr


def test_replay_needs_a_controller_it_can_tell(tmp_path):
    path = tmp_path / "anon.json"
    path.write_text(json.dumps({"parent": {"metadata": {"name": "x"}}}))
    out = run("replay", str(path))
    assert out.returncode == 2 and "--controller" in out.stderr
