"""Which Metacontroller the build makes, and the launcher's use of that choice.

hack/controlplane/build.sh prefers v4 and falls back to v1.5.20 when the module
proxy refuses v4 or its download fails; it records the choice in
.bin/metacontroller.version, from which the launcher picks the flags. The build
tests run the real script against a small local module proxy that refuses v4
and serves everything else from this machine's Go module cache.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from devcluster import components, manifests
from devcluster import metacontroller as mc
from devcluster.components import Ports
from devcluster.layout import REPO, Layout
from tests.support.builds import assert_binary_takes, binary_help, flag_names, go_env

BUILD_SH = REPO / "hack" / "controlplane" / "build.sh"
V4_MODULE = "github.com/metacontroller/metacontroller"
V4_VERSION = "v0.0.0-20260813213314-76b818bdc67b"
PORTS = Ports(etcd_client=1, etcd_peer=2, apiserver=3, controller_manager=4, scheduler=5,
              metacontroller_metrics=19999, moto=6, hooks=7, hooks_metrics=9, metacontroller_health=18081, kwok=8)

V4_FLAGS = ("--kubeconfig", "--metrics-address", "--health-probe-bind-address", "--zap-log-level")
V1_FLAGS = ("--client-config-path", "--debug-addr", "--v")


def _record(bin_dir: Path, release: str, **fields: str) -> Path:
    lines = [f"release={release}", *(f"{k}={v}" for k, v in fields.items())]
    path = bin_dir / mc.RECORD
    path.write_text("\n".join(lines) + "\n")
    return path


# -- the launcher follows the record ------------------------------------------------

@pytest.mark.parametrize("release, present, absent", [
    ("v4.17.2", V4_FLAGS, V1_FLAGS),
    ("v1.5.20", V1_FLAGS, V4_FLAGS),
])
def test_launcher_flags_follow_the_recorded_release(tmp_path, release, present, absent):
    _record(tmp_path, release, reason="test")
    layout = Layout(bin_dir=tmp_path, workdir=tmp_path / "w")
    argv = components.metacontroller(layout, PORTS, mc.read(tmp_path))
    names = flag_names(argv)
    assert set(present) <= names
    assert not set(absent) & names
    # The metrics address is the one the readiness wait polls, on loopback only.
    metrics = "--metrics-address" if release.startswith("v4") else "--debug-addr"
    assert f"{metrics}=127.0.0.1:{PORTS.metacontroller_metrics}" in argv
    assert f"={layout.kubeconfig}" in next(a for a in argv if a.startswith(("--kubeconfig", "--client-config-path")))
    if release.startswith("v4"):
        assert f"--health-probe-bind-address=127.0.0.1:{PORTS.metacontroller_health}" in argv


def test_record_round_trip_and_missing_record(tmp_path):
    with pytest.raises(mc.NoRecord):
        mc.read(tmp_path)
    _record(tmp_path, "v1.5.20", module=f"{V4_MODULE}@v1.5.20", source="/nowhere",
            reason="fallback: v4.17.2 (x) is refused by the module proxy: 403 Forbidden", retry="v4")
    build = mc.read(tmp_path)
    assert (build.release, build.major, build.legacy_flags, build.is_fallback) == ("v1.5.20", 1, True, True)
    assert build.reason.startswith("fallback: ") and build.source == Path("/nowhere")
    # A metacontroller binary without a record is reported missing: nobody knows its flags.
    (tmp_path / mc.RECORD).unlink()
    exe = tmp_path / "metacontroller"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    assert mc.RECORD in Layout(bin_dir=tmp_path).missing_binaries()


def test_the_built_binary_takes_the_flags_the_launcher_gives_it():
    layout = Layout()
    if not os.access(layout.binary("metacontroller"), os.X_OK) or not layout.metacontroller_record.exists():
        pytest.skip("no Metacontroller built in .bin/ (make controlplane-bins)")
    build = mc.read(layout.bin_dir)
    assert_binary_takes(layout.binary("metacontroller"), components.metacontroller(layout, PORTS, build))


# -- the build's choice, against a module proxy that refuses v4 ----------------------

class _RefusingProxy(ThreadingHTTPServer):
    """A GOPROXY that answers v4 as the real one does on a bad day (403) and
    serves everything else from the local module cache (404 when absent)."""

    def __init__(self, cache_download: Path):
        self.cache_download = cache_download
        self.requests: list[str] = []
        super().__init__(("127.0.0.1", 0), _ProxyHandler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _ProxyHandler(BaseHTTPRequestHandler):
    server: _RefusingProxy

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        path = self.path.split("?", 1)[0]
        self.server.requests.append(path)
        if path.startswith(f"/{V4_MODULE}/@v/{V4_VERSION}."):
            self._answer(403, b"This module version is not available.")
            return
        file = self.server.cache_download / path.lstrip("/")
        if ".." not in path and file.is_file():
            self._answer(200, file.read_bytes())
        else:
            self._answer(404, b"not found")

    def _answer(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def refusing_proxy():
    if shutil.which("go") is None:
        pytest.skip("Go is not on PATH")
    server = _RefusingProxy(Path(go_env("GOMODCACHE")) / "cache" / "download")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _build(bin_dir: Path, proxy: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k != "NODEWARDEN_METACONTROLLER"}
    return subprocess.run(["bash", str(BUILD_SH), "metacontroller", str(bin_dir)],
                          env={**base, "GOPROXY": proxy, **env},
                          capture_output=True, text=True, timeout=600)


def _v1_modules_cached() -> bool:
    """v1.5.20 and what it needs are in the module cache (any earlier build puts them there)."""
    result = subprocess.run(["go", "list", "-deps", "metacontroller"],
                            cwd=REPO / "hack" / "controlplane" / "metacontroller",
                            env={**os.environ, "GOPROXY": "off", "GOFLAGS": "-mod=readonly",
                                 "GOSUMDB": "off", "GOTOOLCHAIN": "local"},
                            capture_output=True, text=True, timeout=120)
    return result.returncode == 0


def test_a_refused_v4_builds_v1_5_20_says_why_and_is_not_rebuilt(tmp_path, refusing_proxy):
    if not _v1_modules_cached():
        pytest.skip("v1.5.20's modules are not in the Go module cache yet (make controlplane-bins)")
    bin_dir = tmp_path / "bin"

    first = _build(bin_dir, refusing_proxy.url)
    assert first.returncode == 0, first.stdout + first.stderr
    assert f"/{V4_MODULE}/@v/{V4_VERSION}.info" in refusing_proxy.requests
    assert "building v1.5.20 (fallback: v4.17.2" in first.stdout
    assert "refused by the module proxy" in first.stdout and "403" in first.stdout

    build = mc.read(bin_dir)
    assert build.release == "v1.5.20" and build.legacy_flags
    assert build.module == f"{V4_MODULE}@v1.5.20"
    assert build.is_fallback and "refused by the module proxy" in build.reason
    assert (build.source / "manifests" / "production").is_dir()  # where the launcher reads the CRDs
    binary = bin_dir / "metacontroller"
    # The binary is v1.5.20: it takes exactly the flags the launcher gives that release.
    assert_binary_takes(binary, components.metacontroller(Layout(bin_dir=bin_dir), PORTS, build))
    assert "-metrics-address" not in binary_help(binary)

    # Next time: v4 is asked for again, still refused, and nothing is rebuilt.
    built_at = binary.stat().st_mtime_ns
    asked = len(refusing_proxy.requests)
    second = _build(bin_dir, refusing_proxy.url)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "metacontroller is up to date (v1.5.20, the fallback: v4.17.2" in second.stdout
    assert len(refusing_proxy.requests) > asked
    assert binary.stat().st_mtime_ns == built_at


def test_forcing_v4_fails_loudly_when_it_is_refused(tmp_path, refusing_proxy):
    result = _build(tmp_path, refusing_proxy.url, NODEWARDEN_METACONTROLLER="v4")
    assert result.returncode == 1
    assert "NODEWARDEN_METACONTROLLER=v4, but v4.17.2" in result.stderr
    assert "refused by the module proxy" in result.stderr
    assert not (tmp_path / "metacontroller").exists() and not (tmp_path / mc.RECORD).exists()


def test_a_failed_download_is_reported_as_such(tmp_path):
    if shutil.which("go") is None:
        pytest.skip("Go is not on PATH")
    with ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler) as closed:
        port = closed.server_address[1]  # closed again when the block ends: nothing listens
    result = _build(tmp_path, f"http://127.0.0.1:{port}", NODEWARDEN_METACONTROLLER="v4")
    assert result.returncode == 1
    assert "v4.17.2" in result.stderr and "could not be downloaded" in result.stderr


def test_an_unknown_choice_is_refused(tmp_path):
    result = _build(tmp_path, "off", NODEWARDEN_METACONTROLLER="v3")
    assert result.returncode == 2 and "must be auto, v4 or v1" in result.stderr


# -- `version: v2` on hooks, decided by the CRDs that are installed ----------------

def _v2_controller() -> dict:
    return {"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
            "metadata": {"name": "c"},
            "spec": {"hooks": {h: {"version": "v2", "webhook": {"url": f"http://x/c/{h}"}}
                               for h in ("customize", "sync", "finalize")}}}


def test_v1_5_20s_own_crds_make_the_launcher_drop_version_v2():
    if shutil.which("go") is None:
        pytest.skip("Go is not on PATH")
    source = Path(go_env("GOMODCACHE")) / f"{V4_MODULE}@v1.5.20"
    if not (source / "manifests" / "production").is_dir():
        pytest.skip("v1.5.20 is not in the Go module cache yet (make controlplane-bins)")
    build = mc.Build(release="v1.5.20", module=f"{V4_MODULE}@v1.5.20", source=source)
    crds = manifests.metacontroller_crds(Layout(), build)
    docs = [_v2_controller()]
    docs[0]["spec"]["endpointConfigs"] = [{"host": "x", "authorization": {"secretRef": {"name": "t"}}}]
    dropped = manifests.drop_unknown_fields(docs, crds)
    assert sorted(d.split(" ")[1] for d in dropped) == ["spec.endpointConfigs", "spec.hooks.customize.version",
                                                         "spec.hooks.finalize.version", "spec.hooks.sync.version"]
    assert all("version" not in hook and "webhook" in hook for hook in docs[0]["spec"]["hooks"].values())


def test_crds_with_the_version_field_keep_version_v2():
    """v4's CRDs declare spec.hooks.<hook>.version (enum v1, v2)."""
    version = {"type": "string", "enum": ["v1", "v2"], "default": "v1"}
    hook = {"properties": {"version": version, "webhook": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}
    crd = {"kind": "CustomResourceDefinition", "spec": {
        "names": {"kind": "CompositeController"},
        "versions": [{"name": "v1alpha1", "schema": {"openAPIV3Schema": {"properties": {
            "apiVersion": {}, "kind": {}, "metadata": {"type": "object"}, "spec": {"properties": {
                "hooks": {"properties": {h: hook for h in ("customize", "sync", "finalize")}}}}}}}}],
    }}
    docs = [_v2_controller()]
    assert manifests.drop_unknown_fields(docs, [crd]) == []
    assert all(hook["version"] == "v2" for hook in docs[0]["spec"]["hooks"].values())
