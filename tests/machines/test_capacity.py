"""A Machine's capacity and allocatable from its instance type: Karpenter's figures for AWS with its defaults.

The expected figures are worked out here from the formula, independently of
hooks/machines/capacity.py: memory less 64 MiB on Graviton, less 7.5 % of
it rounded up; ENI-limited pods on the default card; kube-reserved CPU of
60m for the first core, 10m for the second, 5m for each of the next two
and 2.5m for each further one (the total's fraction dropped); kube-reserved
memory 255 MiB + 11 MiB a pod; eviction at 100 MiB of memory and 10 % of
the 20 GiB root volume; 1 GiB of the volume kube-reserved.
"""
from __future__ import annotations

import math
from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st
from lightkube.utils.quantity import parse_quantity

from hooks.machines import capacity

MIB, GIB = 2**20, 2**30


def facts(vcpus, mib, enis=3, per_eni=10, arch="x86_64", **more):
    return {"vcpus": vcpus, "memoryMiB": mib, "maxENIs": enis, "ipv4PerENI": per_eni, "gpus": 0,
            "gpuManufacturer": "", "architectures": [arch], **more}


def test_m5_large():
    cap, alloc = capacity.resources(facts(2, 8192))
    # 8192 MiB less ceil(614.4) = 615; 3 ENIs x 9 addresses + 2 = 29 pods.
    assert cap == {"cpu": "2", "memory": "7577Mi", "pods": "29", "ephemeral-storage": "20Gi"}
    # CPU 60m + 10m; memory 7577 - (255 + 11 x 29) - 100; storage 20Gi - 1Gi - 2Gi.
    assert alloc == {"cpu": "1930m", "memory": "6903Mi", "pods": "29", "ephemeral-storage": "17Gi"}


def test_a_large_type_has_its_eni_limited_pods_uncapped():
    cap, alloc = capacity.resources(facts(96, 393216, enis=15, per_eni=50))  # m5.24xlarge
    assert cap["pods"] == str(15 * 49 + 2) == "737"
    assert alloc["cpu"] == f"{96000 - (60 + 10 + 5 + 5 + 230)}m"
    assert cap["memory"] == f"{393216 - 29492}Mi"  # ceil(29491.2)
    assert alloc["memory"] == f"{393216 - 29492 - (255 + 11 * 737) - 100}Mi"


def test_a_graviton_loses_its_cma_first():
    cap, alloc = capacity.resources(facts(2, 8192, arch="arm64"))  # m6g.large
    assert cap["memory"] == f"{8128 - 610}Mi"  # 8192 - 64 = 8128, ceil(609.6) = 610
    assert alloc["memory"] == f"{8128 - 610 - 574 - 100}Mi"


def test_a_small_type_and_odd_core_counts():
    cap, alloc = capacity.resources(facts(2, 512, enis=3, per_eni=2))  # t3.nano
    assert cap["pods"] == "5" and cap["memory"] == f"{512 - 39}Mi"
    assert alloc["memory"] == f"{512 - 39 - (255 + 55) - 100}Mi"
    assert capacity.resources(facts(1, 2048))[1]["cpu"] == "940m"
    assert capacity.resources(facts(3, 4096))[1]["cpu"] == f"{3000 - 75}m"
    assert capacity.resources(facts(5, 4096))[1]["cpu"] == f"{5000 - 82}m"  # 2.5m for the fifth core, dropped to 2


def test_unknown_network_means_the_kubelets_default_pods():
    cap, alloc = capacity.resources(facts(2, 8192, enis=None, per_eni=None))
    assert cap["pods"] == alloc["pods"] == "110"
    assert alloc["memory"] == f"{7577 - (255 + 11 * 110) - 100}Mi"


def test_no_enis_means_no_pods():
    assert capacity.resources(facts(2, 8192, enis=0))[0]["pods"] == "0"


def test_unknown_or_bad_types_have_no_figures():
    assert capacity.resources(None) == ({}, {})
    assert capacity.resources({"vcpus": 2}) == ({}, {})
    assert capacity.resources(facts(0, 8192)) == ({}, {})
    assert capacity.resources(facts("2", 8192)) == ({}, {})


def test_gpus_by_their_vendor():
    cap, alloc = capacity.resources(facts(4, 16384, gpus=1, gpuManufacturer="NVIDIA"))
    assert cap["nvidia.com/gpu"] == alloc["nvidia.com/gpu"] == "1"
    cap, _ = capacity.resources(facts(4, 16384, gpus=2, gpuManufacturer="AMD"))
    assert cap["amd.com/gpu"] == "2" and "nvidia.com/gpu" not in cap


def _reserved_cpu(vcpus: int) -> int:
    per_core = [Fraction(60), Fraction(10), Fraction(5), Fraction(5)] + [Fraction(5, 2)] * max(0, vcpus - 4)
    return math.floor(sum(per_core[:vcpus]))


@given(vcpus=st.integers(1, 448), mib=st.integers(512, 24 * 1024 * 1024), enis=st.integers(1, 15),
       per_eni=st.integers(2, 50), arch=st.sampled_from(["x86_64", "arm64"]))
def test_every_type_by_the_formula(vcpus, mib, enis, per_eni, arch):
    cap, alloc = capacity.resources(facts(vcpus, mib, enis, per_eni, arch))
    usable = mib - (64 if arch == "arm64" else 0)
    memory = usable - math.ceil(Fraction(usable) * Fraction(75, 1000))
    pods = enis * (per_eni - 1) + 2
    assert parse_quantity(cap["cpu"]) == vcpus
    assert parse_quantity(cap["memory"]) == memory * MIB
    assert int(cap["pods"]) == int(alloc["pods"]) == pods
    assert parse_quantity(cap["ephemeral-storage"]) == 20 * GIB
    assert parse_quantity(alloc["cpu"]) * 1000 == vcpus * 1000 - _reserved_cpu(vcpus)
    assert parse_quantity(alloc["memory"]) == max(0, memory - 255 - 11 * pods - 100) * MIB
    assert parse_quantity(alloc["ephemeral-storage"]) == 20 * GIB - GIB - 2 * GIB
