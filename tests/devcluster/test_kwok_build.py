"""kwok is built and recorded like the other control-plane binaries, and the
launcher runs it with flags and Stages it takes.

hack/controlplane/build.sh builds sigs.k8s.io/kwok/cmd/kwok from the wrapper
module hack/controlplane/kwok/ and records the module it came from in
.bin/kwok.version; the launcher reads kwok's pod Stages from that module in
the Go module cache and ours for Nodes from devcluster/kwok_node_stages.yaml.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from devcluster import components, kwok
from devcluster.components import Ports
from devcluster.layout import REPO, Layout
from tests.support.builds import assert_binary_takes, flag_names, go_env

BUILD_SH = REPO / "hack" / "controlplane" / "build.sh"
WRAPPER = REPO / "hack" / "controlplane" / "kwok"
MODULE = "sigs.k8s.io/kwok"
PORTS = Ports(etcd_client=1, etcd_peer=2, apiserver=3, controller_manager=4, scheduler=5,
              metacontroller_metrics=6, moto=7, hooks=8, hooks_metrics=11, metacontroller_health=9, kwok=10247)


def _pinned_version() -> str:
    for line in (WRAPPER / "go.mod").read_text().splitlines():
        words = line.split()
        if words[:2] == ["require", MODULE]:
            return words[2]
    raise AssertionError(f"{WRAPPER}/go.mod does not require {MODULE}")


def _module_source() -> Path:
    """The pinned kwok module in the Go module cache (skips when it is not there yet)."""
    if shutil.which("go") is None:
        pytest.skip("Go is not on PATH")
    source = Path(go_env("GOMODCACHE")) / f"{MODULE}@{_pinned_version()}"
    if not source.is_dir():
        pytest.skip(f"{source} is not in the Go module cache yet (make controlplane-bins)")
    return source


def _write_record(bin_dir: Path, source: Path) -> None:
    (bin_dir / kwok.RECORD).write_text(f"release=v0.8.0\nmodule={MODULE}@v0.8.0\nsource={source}\n")


# -- the wrapper and the record -------------------------------------------------------

def test_the_wrapper_pins_kwok_and_the_build_knows_it():
    assert _pinned_version() == "v0.8.0"
    assert 'import _ "sigs.k8s.io/kwok/cmd/kwok"' in (WRAPPER / "tools.go").read_text()
    assert (WRAPPER / "go.sum").read_text().count(f"{MODULE} v0.8.0") == 2  # the module and its go.mod
    mk = (REPO / "hack" / "controlplane" / "controlplane.mk").read_text()
    components_line = next(line for line in mk.splitlines() if line.startswith("CONTROLPLANE_COMPONENTS"))
    assert "kwok" in components_line.split()


def test_record_round_trip_and_missing_record(tmp_path):
    with pytest.raises(kwok.NoRecord):
        kwok.read(tmp_path)
    _write_record(tmp_path, Path("/nowhere"))
    assert kwok.read(tmp_path) == kwok.Build(release="v0.8.0", module=f"{MODULE}@v0.8.0", source=Path("/nowhere"))
    # A kwok binary without its record is reported missing: the launcher needs its module.
    (tmp_path / kwok.RECORD).unlink()
    exe = tmp_path / "kwok"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    missing = Layout(bin_dir=tmp_path).missing_binaries()
    assert kwok.RECORD in missing and "kwok" not in missing


# -- the command line and the Stages ----------------------------------------------------

def test_the_launcher_gives_kwok_its_selector_lease_and_every_stage(tmp_path):
    stages = [tmp_path / "a.yaml", tmp_path / "b.yaml"]
    layout = Layout(bin_dir=tmp_path, workdir=tmp_path / "w")
    argv = components.kwok(layout, PORTS, stages)
    assert argv[0] == str(tmp_path / "kwok")
    assert f"--kubeconfig={layout.kubeconfig}" in argv
    assert f"--manage-nodes-with-label-selector={kwok.LABEL}={kwok.VALUE}" in argv
    assert f"--node-lease-duration-seconds={kwok.FAST.lease_seconds}" in argv
    assert "--server-address=127.0.0.1:10247" in argv
    assert [a for a in argv if a.startswith("--config=")] == [f"--config={p}" for p in stages]
    kcm = components.kube_controller_manager(layout, PORTS, pki=_NoPki())
    assert f"--node-monitor-grace-period={kwok.FAST.grace_seconds}s" in kcm


def test_a_cluster_can_beat_at_a_real_kubelets_pace(tmp_path):
    layout = Layout(bin_dir=tmp_path, workdir=tmp_path / "w")
    slow = kwok.KUBELET_DEFAULTS
    assert "--node-lease-duration-seconds=40" in components.kwok(layout, PORTS, [], slow)
    assert "--node-monitor-grace-period=50s" in components.kube_controller_manager(layout, PORTS, _NoPki(), slow)
    # kwok renews a Lease every quarter of its duration; in either pace a Node
    # turns Unknown only after four renewals in a row went missing.
    for heartbeat in (kwok.FAST, slow, kwok.heartbeat_for(5000)):
        assert heartbeat.grace_seconds / heartbeat.renewal_seconds >= 4, heartbeat


def test_a_large_cluster_beats_as_slowly_as_two_cores_need_and_no_slower():
    assert kwok.heartbeat_for(200) == kwok.heartbeat_for(1000) == kwok.KUBELET_DEFAULTS
    big = kwok.heartbeat_for(5000)
    assert 5000 / big.renewal_seconds <= kwok.MAX_RENEWALS_PER_SECOND
    assert 5000 / (big.renewal_seconds - 1) > kwok.MAX_RENEWALS_PER_SECOND, "no longer than needed"
    assert big.grace_seconds - big.lease_seconds == 10, "the same margin as the defaults"


class _NoPki:
    sa_key = ca_cert = Path("/nowhere")


def test_kwok_gets_its_settings_then_our_node_stages_then_its_own_pod_stages():
    source = _module_source()
    files = kwok.stage_files(source)
    assert files[:2] == [kwok.CONFIGURATION, kwok.NODE_STAGES]
    assert [f.name for f in files[2:]] == ["pod-ready.yaml", "pod-complete.yaml", "pod-delete.yaml"]
    assert all(f.is_relative_to(source / "kustomize" / "stage" / "pod" / "fast") for f in files[2:])
    (settings,) = [d for d in yaml.safe_load_all(kwok.CONFIGURATION.read_text()) if d]
    assert (settings["apiVersion"], settings["kind"]) == ("config.kwok.x-k8s.io/v1alpha1", "KwokConfiguration")
    # kwok's default is 4 Leases at a time: thousands of Nodes could not be renewed in time.
    assert settings["options"]["nodeLeaseParallelism"] >= 64
    # kwok defaults nothing once given a KwokConfiguration: without a worker, the pods
    # of a Node handed back to kwok would never be played.
    assert settings["options"]["podsOnNodeSyncParallelism"] >= 1
    assert settings["options"]["enablePodsOnNodeSyncListPager"] is True
    docs = [d for f in files[1:] for d in yaml.safe_load_all(f.read_text()) if d]
    assert {d["kind"] for d in docs} == {"Stage"}
    assert {d["spec"]["resourceRef"]["kind"] for d in docs if d["metadata"]["name"].startswith("node-")} == {"Node"}


# Ours, and the kwok Stage each is derived from.
DERIVED = {
    "node-initialize": "kustomize/stage/node/fast/node-initialize.yaml",
    "node-heartbeat-with-lease": "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "node-not-ready": "kustomize/stage/node/chaos/node-not-ready.yaml",
}


def test_our_node_stages_differ_from_kwoks_only_in_the_status_they_write():
    """Same names, selectors, delays and weights as kwok's; only the statusTemplate
    differs, and only because kwok's still stamps every condition with the Node's
    creation time (the day it stops, ours can go)."""
    source = _module_source()
    ours = {d["metadata"]["name"]: d for d in yaml.safe_load_all(kwok.NODE_STAGES.read_text()) if d}
    assert set(ours) == set(DERIVED) | {"node-kubelet-not-ready"}
    for name, path in DERIVED.items():
        theirs = yaml.safe_load((source / path).read_text())
        assert theirs["metadata"]["name"] == name
        mine = ours[name]
        template, original = mine["spec"]["next"].pop("statusTemplate"), theirs["spec"]["next"].pop("statusTemplate")
        assert mine["spec"] == theirs["spec"], name
        assert "$lastTransitionTime := or .metadata.creationTimestamp $now" in original
        assert "lastTransitionTime: {{ $lastTransitionTime | Quote }}" in original
        assert "creationTimestamp" not in template
        # A statusTemplate with no patch type: a strategic merge patch of the status subresource.
        assert set(mine["spec"]["next"]) == set() and "patches" not in mine["spec"] and "steps" not in mine["spec"]


def test_a_node_its_kubelet_posted_not_ready_is_left_as_it_was_posted():
    """Our one Stage of our own: it matches what post_ready writes for NotReady (and not what kwok's chaos
    Stage writes), has no steps, and outweighs node-initialize, which matches the same Node (Ready is not
    True) and would post it Ready at once: kwok draws among matching Stages by weight, never a 0."""
    stages = {d["metadata"]["name"]: d for d in yaml.safe_load_all(kwok.NODE_STAGES.read_text()) if d}
    mine, initialize = stages["node-kubelet-not-ready"], stages["node-initialize"]
    assert mine["spec"]["next"] == {} and mine["spec"]["weight"] > 0 and not initialize["spec"].get("weight")
    expressions = {e["key"]: (e["operator"], e["values"]) for e in mine["spec"]["selector"]["matchExpressions"]}
    assert expressions['.status.conditions.[] | select( .type == "Ready" ) | .reason'] == \
        ("In", [kwok.KUBELET_NOT_READY])
    assert expressions['.status.conditions.[] | select( .type == "Ready" ) | .status'] == ("In", ["False"])


# -- the binary -----------------------------------------------------------------------------

def test_the_built_binary_takes_the_flags_the_launcher_gives_it(tmp_path):
    layout = Layout()
    if not os.access(layout.binary("kwok"), os.X_OK):
        pytest.skip("no kwok built in .bin/ (make controlplane-bins)")
    argv = components.kwok(layout, PORTS, [tmp_path / "stages.yaml"])
    assert flag_names(argv) >= {"--kubeconfig", "--manage-nodes-with-label-selector", "--config"}
    assert_binary_takes(layout.binary("kwok"), argv)


def _build(bin_dir: Path) -> subprocess.CompletedProcess:
    # Offline: the modules come from the cache, as for any rebuild.
    env = {**os.environ, "GOPROXY": "off"}
    return subprocess.run(["bash", str(BUILD_SH), "kwok", str(bin_dir)], env=env,
                          capture_output=True, text=True, timeout=900)


def test_build_sh_builds_records_and_does_not_rebuild(tmp_path):
    source = _module_source()
    bin_dir = tmp_path / "bin"
    first = _build(bin_dir)
    if first.returncode != 0 and "module lookup disabled" in first.stdout + first.stderr:
        pytest.skip("kwok's dependencies are not all in the Go module cache (make controlplane-bins)")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "built kwok" in first.stdout and "recorded in" in first.stdout

    build = kwok.read(bin_dir)
    assert build == kwok.Build(release="v0.8.0", module=f"{MODULE}@v0.8.0", source=source)
    version = subprocess.run([str(bin_dir / "kwok"), "--version"], capture_output=True, text=True, timeout=30)
    assert version.stdout.startswith("kwok version v0.8.0 ")

    built_at = (bin_dir / "kwok").stat().st_mtime_ns
    again = _build(bin_dir)
    assert again.returncode == 0 and "kwok is up to date (kwok)" in again.stdout
    assert (bin_dir / "kwok").stat().st_mtime_ns == built_at

    # No record, no telling which module it came from: built again, recorded again.
    (bin_dir / kwok.RECORD).unlink()
    third = _build(bin_dir)
    assert third.returncode == 0 and "built kwok" in third.stdout
    assert kwok.read(bin_dir) == build
