"""Test helpers shared by several test modules (the fake API server is tests/fake_kube.py)."""
from __future__ import annotations

import copy
import subprocess
from pathlib import Path

# One builder for hook request bodies, shared with the fixture generators: the shapes Metacontroller sends.
from tests.fixtures.envelope import controller_object, hook_request  # noqa: F401

from hooks.machines import names


def apply_decorator_response(obj: dict, response: dict) -> dict:
    """What Metacontroller does with a decorator response to the parent (labels,
    annotations merged, null removes; status replaced when not null)."""
    obj = copy.deepcopy(obj)
    meta = obj.setdefault("metadata", {})
    for key in ("labels", "annotations"):
        current = dict(meta.get(key) or {})
        for k, v in (response.get(key) or {}).items():
            if v is None:
                current.pop(k, None)
            else:
                current[k] = v
        meta[key] = current
    if response.get("status") is not None:
        obj["status"] = response["status"]
    return obj


def default_user_data(cluster: str = "devcluster", machine: str = "pool-abc12", pool: str = "pool", *,
                      labels: str | None = None, taints: str | None = None) -> str:
    """The Machines' default user-data template, rendered by hand as a Machine would
    (what the devcluster kubelet stand-in reads)."""
    node_labels = labels or f"{names.MACHINE_LABEL}={machine},{names.POOL_LABEL}={pool}"
    register_with_taints = taints or f"{names.UNREGISTERED_TAINT}=true:{names.UNREGISTERED_EFFECT}"
    kubelet_args = f"--node-labels={node_labels} --register-with-taints={register_with_taints}"
    return ("#!/bin/bash\n"
            "set -euo pipefail\n"
            f"# Joins {cluster} as machine {machine} of node pool {pool}.\n"
            f"/etc/eks/bootstrap.sh '{cluster}' --kubelet-extra-args '{kubelet_args}'\n")


def go_env(name: str) -> str:
    return subprocess.run(["go", "env", name], capture_output=True, text=True, check=True).stdout.strip()


def flag_names(argv: list[str]) -> set[str]:
    """The --flags of a command line (its first word is the binary)."""
    return {a.split("=", 1)[0] for a in argv[1:] if a.startswith("--")}


def binary_help(binary: Path) -> str:
    """The flags a Go binary knows: `-h` lists them (and exits 0 or 2)."""
    result = subprocess.run([str(binary), "-h"], capture_output=True, text=True, timeout=30)
    return result.stdout + result.stderr


def assert_binary_takes(binary: Path, argv: list[str]) -> None:
    """Every --flag of ``argv`` is one ``binary -h`` lists (Go's flag package: `  -name`;
    pflag/cobra: `  --name`, or `-n, --name`)."""
    known = binary_help(binary)
    for name in flag_names(argv):
        bare = name.lstrip("-")
        forms = (f"  -{bare} ", f"  -{bare}\n", f"  --{bare} ", f", --{bare} ")
        assert any(form in known for form in forms), f"{binary} has no flag {name}"
