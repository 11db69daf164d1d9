"""The control-plane binaries the tests build or run: Go's settings, and the flags a binary takes."""
from __future__ import annotations

import subprocess
from pathlib import Path


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
