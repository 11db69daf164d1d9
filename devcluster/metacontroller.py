"""Which Metacontroller `make controlplane-bins` built, read from its record.

hack/controlplane/build.sh builds v4 when the module proxy serves it and
v1.5.20 otherwise, and writes `.bin/metacontroller.version` (key=value lines)
next to the binary: the release, the module it came from, where that module's
source is (for the CRDs), and why this one was chosen. The launcher picks the
command-line flags and the CRDs from it; the tests read it to know what runs.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .layout import RECORDS, parse_record

RECORD = RECORDS["metacontroller"]


class NoRecord(FileNotFoundError):
    pass


@dataclass(frozen=True)
class Build:
    release: str  # "v4.17.2", "v1.5.20"
    module: str = ""  # "github.com/metacontroller/metacontroller@<version>"
    source: Path | None = None  # the module's directory in the Go module cache
    gomod: Path | None = None  # the wrapper module it was built from
    reason: str = ""
    retry: str = ""  # "v4" after a fallback: the next build asks for v4 again

    @property
    def major(self) -> int:
        match = re.match(r"v?(\d+)\.", self.release)
        if not match:
            raise ValueError(f"not a Metacontroller release: {self.release!r}")
        return int(match.group(1))

    @property
    def legacy_flags(self) -> bool:
        """v1 takes --client-config-path, --debug-addr and klog's --v; later
        releases are controller-runtime managers (--kubeconfig, --metrics-address,
        --health-probe-bind-address, --zap-log-level)."""
        return self.major < 2

    @property
    def is_fallback(self) -> bool:
        return self.retry != ""

    @classmethod
    def parse(cls, text: str) -> "Build":
        fields = parse_record(text)
        if not fields.get("release"):
            raise ValueError(f"{RECORD} names no release")
        return cls(
            release=fields["release"],
            module=fields.get("module", ""),
            source=Path(fields["source"]) if fields.get("source") else None,
            gomod=Path(fields["gomod"]) if fields.get("gomod") else None,
            reason=fields.get("reason", ""),
            retry=fields.get("retry", ""),
        )

    def describe(self) -> str:
        return f"Metacontroller {self.release} ({self.reason})" if self.reason else f"Metacontroller {self.release}"


def read(bin_dir: Path) -> Build:
    path = Path(bin_dir) / RECORD
    try:
        return Build.parse(path.read_text())
    except FileNotFoundError:
        raise NoRecord(f"{path} is missing; run `make controlplane-bins`") from None
