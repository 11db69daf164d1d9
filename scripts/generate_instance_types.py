#!/usr/bin/env python3
"""Write hooks/aws/instance_types.json: the instance type facts a provisioning round uses until EC2 has answered.

The facts come from moto's copy of DescribeInstanceTypes
(moto/ec2/resources/instance_types.json.gz: every type as AWS described it)
in the moto version requirements/test.txt pins, the one the tests and the
local stack answer with: of each type, what hooks.aws.instances.type_facts
keeps, one row a type under the names of its fields.

    scripts/generate_instance_types.py [--source instance_types.json.gz --version 5.2.5] [--output PATH]

Without --source, the installed moto's file, which must be the pinned version.
"""
from __future__ import annotations

import argparse
import gzip
import importlib.metadata
import importlib.util
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hooks.aws.instances import type_facts  # noqa: E402 - the repository's hooks, from any working directory

OUTPUT = ROOT / "hooks" / "aws" / "instance_types.json"
REQUIREMENTS = ROOT / "requirements" / "test.txt"
MOTO_FILE = ("ec2", "resources", "instance_types.json.gz")
_PINNED = re.compile(r"^moto(?:\[[^\]]*\])?==(?P<version>\S+)", re.M)


class SourceError(ValueError):
    pass


def pinned_version(requirements: Path = REQUIREMENTS) -> str:
    found = _PINNED.search(requirements.read_text())
    if found is None:
        raise SourceError(f"{requirements} pins no moto version")
    return found["version"]


def installed_source(pinned: str) -> Path:
    """The installed moto's DescribeInstanceTypes file; refused unless moto is the pinned version."""
    installed = importlib.metadata.version("moto")
    if installed != pinned:
        raise SourceError(f"moto {installed} is installed, {REQUIREMENTS.name} pins {pinned}: install the pinned "
                          "one or give --source and --version")
    spec = importlib.util.find_spec("moto")
    return Path(spec.origin).parent.joinpath(*MOTO_FILE)


def table_from(described: dict, version: str) -> dict:
    """The bundled table: {"source", "fields", "types": {type: [its facts, in the order of fields]}}, sorted."""
    if not isinstance(described, dict) or not described:
        raise SourceError("the source describes no instance types")
    fields: list[str] | None = None
    types = {}
    for name in sorted(described):
        entry = described[name]
        if not isinstance(entry, dict) or entry.get("InstanceType") != name:
            raise SourceError(f"{name}: not a DescribeInstanceTypes entry of that type")
        facts = type_facts(entry)
        fields = fields or list(facts)
        types[name] = [facts[field] for field in fields]
    return {"source": f"moto=={version} moto/{'/'.join(MOTO_FILE)}", "fields": fields, "types": types}


def dumps(table: dict) -> str:
    """JSON with one instance type a line: small, and a change of one type is a change of one line."""
    rows = ",\n".join(f"  {json.dumps(name)}: {json.dumps(row, separators=(',', ':'))}"
                      for name, row in table["types"].items())
    return (f'{{\n "source": {json.dumps(table["source"])},\n "fields": {json.dumps(table["fields"])},\n'
            f' "types": {{\n{rows}\n }}\n}}\n')


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, help="a moto instance_types.json.gz, instead of the installed one's")
    parser.add_argument("--version", help="the moto version --source is from (default: the pinned one)")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    version = args.version or pinned_version()
    source = args.source or installed_source(version)
    with gzip.open(source, "rt", encoding="utf-8") as answered:
        table = table_from(json.load(answered), version)
    args.output.write_text(dumps(table))
    print(f"{args.output}: {len(table['types'])} instance types from {table['source']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
