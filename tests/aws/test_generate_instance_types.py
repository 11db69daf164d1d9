"""scripts/generate_instance_types.py: the bundled instance type facts from a DescribeInstanceTypes copy (built
here), and the bundled table as the hooks load it."""
from __future__ import annotations

import gzip
import importlib.util
import json
import pathlib

import pytest

from hooks.aws import instance_catalog
from hooks.aws.instances import type_facts

ROOT = pathlib.Path(__file__).parents[2]
_spec = importlib.util.spec_from_file_location("generate_instance_types",
                                               ROOT / "scripts" / "generate_instance_types.py")
generate_instance_types = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(generate_instance_types)

GRAVITON = {"InstanceType": "m6g.large", "CurrentGeneration": True, "VCpuInfo": {"DefaultVCpus": 2},
            "MemoryInfo": {"SizeInMiB": 8192}, "ProcessorInfo": {"SupportedArchitectures": ["arm64"]},
            "SupportedUsageClasses": ["on-demand", "spot"],
            "NetworkInfo": {"MaximumNetworkInterfaces": 3, "Ipv4AddressesPerInterface": 10}}
# Four network cards, the pods' addresses on the default one only; eight GPUs.
P4D = {"InstanceType": "p4d.24xlarge", "CurrentGeneration": True, "VCpuInfo": {"DefaultVCpus": 96},
       "MemoryInfo": {"SizeInMiB": 1179648}, "ProcessorInfo": {"SupportedArchitectures": ["x86_64"]},
       "SupportedUsageClasses": ["on-demand"],
       "GpuInfo": {"Gpus": [{"Name": "A100", "Manufacturer": "NVIDIA", "Count": 8}]},
       "NetworkInfo": {"MaximumNetworkInterfaces": 60, "Ipv4AddressesPerInterface": 50, "DefaultNetworkCardIndex": 0,
                       "NetworkCards": [{"NetworkCardIndex": i, "MaximumNetworkInterfaces": 15} for i in range(4)]}}


def _source(tmp_path, described) -> pathlib.Path:
    path = tmp_path / "instance_types.json.gz"
    with gzip.open(path, "wt", encoding="utf-8") as out:
        json.dump(described, out)
    return path


def test_each_type_is_its_type_facts_in_the_order_of_the_fields(tmp_path):
    output = tmp_path / "instance_types.json"
    source = _source(tmp_path, {"p4d.24xlarge": P4D, "m6g.large": GRAVITON})
    assert generate_instance_types.main(["--source", str(source), "--version", "9.9.9", "--output", str(output)]) == 0
    table = json.loads(output.read_text())
    assert table["source"] == "moto==9.9.9 moto/ec2/resources/instance_types.json.gz"
    assert table["fields"] == list(type_facts(GRAVITON))
    assert list(table["types"]) == ["m6g.large", "p4d.24xlarge"]
    for name, described in (("m6g.large", GRAVITON), ("p4d.24xlarge", P4D)):
        assert dict(zip(table["fields"], table["types"][name])) == type_facts(described)
    assert dict(zip(table["fields"], table["types"]["p4d.24xlarge"]))["maxENIs"] == 15, "the default card's"
    lines = output.read_text().splitlines()
    assert [line.split(":")[0].strip() for line in lines[lines.index(' "types": {') + 1:-2]] == \
        ['"m6g.large"', '"p4d.24xlarge"'], "one line a type"


def test_the_hooks_read_the_table_the_script_writes(tmp_path, monkeypatch):
    output = tmp_path / "instance_types.json"
    generate_instance_types.main(["--source", str(_source(tmp_path, {"m6g.large": GRAVITON})), "--version", "9.9.9",
                                  "--output", str(output)])
    monkeypatch.setattr(instance_catalog, "BUNDLED_TYPES", output)
    instance_catalog.bundled_type_facts.cache_clear()
    try:
        assert instance_catalog.bundled_type_facts() == {"m6g.large": type_facts(GRAVITON)}
    finally:
        instance_catalog.bundled_type_facts.cache_clear()


@pytest.mark.parametrize("described, error", [
    ({}, "describes no instance types"),
    ([GRAVITON], "describes no instance types"),
    ({"m6g.large": P4D}, "m6g.large: not a DescribeInstanceTypes entry of that type"),
])
def test_a_source_without_usable_types_is_refused(described, error):
    with pytest.raises(generate_instance_types.SourceError, match=error):
        generate_instance_types.table_from(described, "9.9.9")


def test_only_the_pinned_moto_is_read(tmp_path, monkeypatch):
    requirements = tmp_path / "test.txt"
    requirements.write_text("boto3==1.0\nmoto[server]==5.2.5 \\\n    --hash=sha256:00\n")
    assert generate_instance_types.pinned_version(requirements) == "5.2.5"
    monkeypatch.setattr(generate_instance_types.importlib.metadata, "version", lambda name: "5.3.0")
    with pytest.raises(generate_instance_types.SourceError, match="moto 5.3.0 is installed, test.txt pins 5.2.5"):
        generate_instance_types.installed_source("5.2.5")


def test_the_bundled_table_is_the_pinned_moto_s():
    table = json.loads(instance_catalog.BUNDLED_TYPES.read_text())
    assert table["source"].startswith(f"moto=={generate_instance_types.pinned_version()} ")
    assert table["fields"] == list(type_facts({})), "type_facts changed: run scripts/generate_instance_types.py"
