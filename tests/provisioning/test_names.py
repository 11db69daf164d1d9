"""The labels an instance type gives its Nodes."""
from __future__ import annotations

from hooks import provisioning_names as names
from hooks.aws.instances import type_facts


def test_instance_labels_from_described_type():
    facts = type_facts({"InstanceType": "m6g.2xlarge", "VCpuInfo": {"DefaultVCpus": 8},
                        "MemoryInfo": {"SizeInMiB": 32768}, "ProcessorInfo": {"SupportedArchitectures": ["arm64"]}})
    assert names.instance_labels("m6g.2xlarge", facts) == {
        names.INSTANCE_TYPE_LABEL: "m6g.2xlarge", names.OS_LABEL: "linux", names.ARCH_LABEL: "arm64",
        names.INSTANCE_FAMILY_LABEL: "m6g", names.INSTANCE_SIZE_LABEL: "2xlarge", names.INSTANCE_CPU_LABEL: "8",
        names.INSTANCE_MEMORY_LABEL: "32768", names.INSTANCE_GPU_COUNT_LABEL: "0"}


def test_x86_is_amd64_and_gpus_are_counted():
    facts = {"vcpus": 4, "memoryMiB": 16384, "gpus": 1, "architectures": ["i386", "x86_64"]}
    labels = names.instance_labels("g4dn.xlarge", facts)
    assert labels[names.ARCH_LABEL] == "amd64"
    assert labels[names.INSTANCE_GPU_COUNT_LABEL] == "1"


def test_family_and_size_split_on_the_first_dot():
    labels = names.instance_labels("u-6tb1.metal", {"vcpus": 448, "memoryMiB": 6291456, "gpus": 0,
                                                     "architectures": ["x86_64"]})
    assert (labels[names.INSTANCE_FAMILY_LABEL], labels[names.INSTANCE_SIZE_LABEL]) == ("u-6tb1", "metal")


def test_missing_facts_leave_their_labels_out():
    labels = names.instance_labels("x1", {"vcpus": None, "architectures": ["sparc"]})
    assert labels == {names.INSTANCE_TYPE_LABEL: "x1", names.OS_LABEL: "linux", names.INSTANCE_FAMILY_LABEL: "x1"}


def test_every_type_label_is_well_known():
    assert set(names.INSTANCE_TYPE_LABELS) <= set(names.WELL_KNOWN)
    assert {names.ZONE_LABEL, names.CAPACITY_TYPE_LABEL} <= set(names.WELL_KNOWN)
