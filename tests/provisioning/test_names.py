"""The labels an instance type gives its Nodes."""
from __future__ import annotations

from hooks import provisioning_names as names
from hooks.aws.instances import type_facts


def test_instance_labels_from_described_type():
    facts = type_facts({"InstanceType": "m6g.2xlarge", "VCpuInfo": {"DefaultVCpus": 8},
                        "MemoryInfo": {"SizeInMiB": 32768}, "ProcessorInfo": {"SupportedArchitectures": ["arm64"]}})
    assert names.instance_labels("m6g.2xlarge", facts) == {
        names.INSTANCE_TYPE: "m6g.2xlarge", names.OS: "linux", names.ARCH: "arm64",
        names.INSTANCE_FAMILY: "m6g", names.INSTANCE_SIZE: "2xlarge", names.INSTANCE_CPU: "8",
        names.INSTANCE_MEMORY: "32768", names.INSTANCE_GPU_COUNT: "0"}


def test_x86_is_amd64_and_gpus_are_counted():
    facts = {"vcpus": 4, "memoryMiB": 16384, "gpus": 1, "architectures": ["i386", "x86_64"]}
    labels = names.instance_labels("g4dn.xlarge", facts)
    assert labels[names.ARCH] == "amd64"
    assert labels[names.INSTANCE_GPU_COUNT] == "1"


def test_family_and_size_split_on_the_first_dot():
    labels = names.instance_labels("u-6tb1.metal", {"vcpus": 448, "memoryMiB": 6291456, "gpus": 0,
                                                     "architectures": ["x86_64"]})
    assert (labels[names.INSTANCE_FAMILY], labels[names.INSTANCE_SIZE]) == ("u-6tb1", "metal")


def test_missing_facts_leave_their_labels_out():
    labels = names.instance_labels("x1", {"vcpus": None, "architectures": ["sparc"]})
    assert labels == {names.INSTANCE_TYPE: "x1", names.OS: "linux", names.INSTANCE_FAMILY: "x1"}


def test_every_type_label_is_well_known():
    assert set(names.INSTANCE_TYPE_KEYS) <= set(names.WELL_KNOWN)
    assert {names.ZONE, names.CAPACITY_TYPE} <= set(names.WELL_KNOWN)
