"""Where things are: the repo, the built binaries, and a cluster's working directory."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Every binary the launcher runs; hack/controlplane/build.sh makes them.
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
            "kubectl", "kustomize", "kwok", "metacontroller", "prometheus")
# What build.sh records next to a binary whose module the launcher reads
# (key=value lines: release, module, source = its directory in the Go module cache);
# hack/prometheus/install.sh records which Debian package Prometheus came from.
RECORDS = {"kwok": "kwok.version", "metacontroller": "metacontroller.version",
           "prometheus": "prometheus.version"}


def parse_record(text: str) -> dict[str, str]:
    """A record's key=value lines."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            fields[key.strip()] = value.strip()
    return fields


@dataclass(frozen=True)
class Layout:
    repo: Path = REPO
    bin_dir: Path = REPO / ".bin"
    workdir: Path = REPO / ".local"

    @property
    def logs(self) -> Path:
        return self.workdir / "logs"

    @property
    def pki_dir(self) -> Path:
        return self.workdir / "pki"

    @property
    def etcd_data(self) -> Path:
        return self.workdir / "etcd"

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig users and tests pass to kubectl."""
        return self.workdir / "kubeconfig"

    @property
    def hooks_kubeconfig(self) -> Path:
        """The hook server's kubeconfig: the nodewarden ServiceAccount's token."""
        return self.workdir / "hooks.kubeconfig"

    @property
    def prometheus_dir(self) -> Path:
        """The local Prometheus' configuration, rules and data."""
        return self.workdir / "prometheus"

    @property
    def pid_file(self) -> Path:
        return self.workdir / "devcluster.pid"

    @property
    def state_file(self) -> Path:
        return self.workdir / "devcluster.json"

    @property
    def env_file(self) -> Path:
        return self.workdir / "env.sh"

    @property
    def dev_overlay(self) -> Path:
        return self.repo / "kustomize" / "overlays" / "dev"

    @property
    def metacontroller_record(self) -> Path:
        """What build.sh says about the Metacontroller it built (devcluster/metacontroller.py)."""
        return self.record("metacontroller")

    def record(self, binary: str) -> Path:
        return self.bin_dir / RECORDS[binary]

    def binary(self, name: str) -> Path:
        return self.bin_dir / name

    def missing_binaries(self) -> list[str]:
        missing = [b for b in BINARIES if not os.access(self.binary(b), os.X_OK)]
        # A binary from before its record existed: which release is it, from which module?
        missing += [RECORDS[b] for b in RECORDS if b not in missing and not self.record(b).exists()]
        return missing
