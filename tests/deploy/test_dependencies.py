"""The image holds the hook server's runtime and nothing the tests need.

requirements/runtime.txt is what the Dockerfile installs; requirements/test.txt
adds the tests' and the local stack's tools. The checks here read the
installed metadata of this virtualenv (which holds the same pins) and import
the whole hook server in a fresh interpreter that refuses every module a
distribution outside requirements/runtime.txt provides.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]
RUNTIME = REPO / "requirements" / "runtime.txt"
TEST = REPO / "requirements" / "test.txt"
# What only tests and the local stack use; none of it belongs in the image.
TEST_TOOLS = {"pytest", "pytest-xdist", "hypothesis", "moto", "cryptography", "responses", "jsonpatch",
              "requests", "docker"}


def _name(text: str) -> str:
    return re.sub(r"[-_.]+", "-", text).lower()


def _pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-r"):
            continue
        req = Requirement(line)
        (spec,) = req.specifier
        assert spec.operator == "==", f"{path.name}: {line} is not an exact pin"
        pins[_name(req.name)] = spec.version
    return pins


def _requires(dist: str) -> set[str]:
    """What an installed distribution needs (no extras), under this interpreter's markers."""
    env = default_environment() | {"extra": ""}
    out = set()
    for text in metadata.requires(dist) or []:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate(env):
            out.add(_name(req.name))
    return out


def test_runtime_lock_holds_no_test_tool_and_the_test_lock_builds_on_it():
    runtime = _pins(RUNTIME)
    assert not TEST_TOOLS & set(runtime), sorted(TEST_TOOLS & set(runtime))
    assert "-r runtime.txt" in TEST.read_text().splitlines()
    test_only = _pins(TEST)
    assert not set(runtime) & set(test_only), "a package pinned in both locks"
    assert TEST_TOOLS - {"docker", "responses"} <= set(test_only)


def test_runtime_lock_is_closed_and_covers_pyproject():
    """Every runtime dependency is pinned, and so is everything it pulls in: pip installs nothing unpinned."""
    runtime = _pins(RUNTIME)
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert {_name(Requirement(d).name) for d in declared} <= set(runtime)
    for dist, version in runtime.items():
        assert metadata.version(dist) == version, f"{dist}: .venv has {metadata.version(dist)}, the lock {version}"
        missing = _requires(dist) - set(runtime)
        assert not missing, f"{dist} needs {sorted(missing)}, not in requirements/runtime.txt"


def test_dockerfile_installs_the_runtime_lock_only():
    text = (REPO / "Dockerfile").read_text()
    assert "COPY requirements/runtime.txt" in text
    assert "-r runtime.txt" in text
    assert "test.txt" not in text and "requirements.txt" not in text


# Run in a fresh interpreter: import every hooks module and serve a request,
# refusing any top-level module that a distribution outside the runtime lock provides.
_PROBE = r"""
import importlib, importlib.abc, json, pkgutil, runpy, sys
from importlib import metadata

allowed, repo = set(json.loads(sys.argv[1])), sys.argv[2]
owners = metadata.packages_distributions()
refused = []

class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        dists = {d.lower().replace("_", "-").replace(".", "-") for d in owners.get(top, [])}
        if dists and not dists & allowed:
            refused.append(name)
            raise ImportError(f"{name} comes from {sorted(dists)}, which is not in the image")
        return None

sys.meta_path.insert(0, Refuse())
import hooks
for info in pkgutil.walk_packages(hooks.__path__, "hooks."):
    importlib.import_module(info.name)
runpy.run_path(repo + "/gunicorn.conf.py")
import gunicorn.app.wsgiapp
from hooks.app import create_app
client = create_app().test_client()
codes = [client.get(p).status_code for p in ("/healthz", "/metrics")]
print(json.dumps({"codes": codes, "refused": refused, "modules": sorted(sys.modules)}))
"""


def test_the_runtime_lock_alone_imports_the_hook_server_and_no_test_tool():
    allowed = set(_pins(RUNTIME)) | {"nodewarden"}
    result = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(sorted(allowed)), str(REPO)],
                            capture_output=True, text=True, cwd=REPO, timeout=120,
                            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)})
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["codes"] == [200, 200]
    # botocore tries certifi for its CA bundle and falls back to the one it ships.
    assert {m.partition(".")[0] for m in out["refused"]} <= {"certifi"}, out["refused"]
    tools = {"pytest", "moto", "hypothesis", "cryptography", "jsonpatch", "requests", "xdist"}
    assert not tools & {m.partition(".")[0] for m in out["modules"]}


def test_the_probe_refuses_what_the_lock_lacks():
    """The check above can fail: without flask in the allowed set, the hook server does not import."""
    allowed = set(_pins(RUNTIME)) - {"flask"} | {"nodewarden"}
    result = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(sorted(allowed)), str(REPO)],
                            capture_output=True, text=True, cwd=REPO, timeout=120,
                            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)})
    assert result.returncode != 0
    assert "flask comes from ['flask']" in result.stderr
