"""Resources: parsing quantities, arithmetic, fits."""
from __future__ import annotations

import pytest

from hooks.contract import RequestError
from hooks.provisioning import resources
from hooks.provisioning.resources import Resources


def test_parse_rounds_up_to_whole_millicores_and_bytes():
    parsed = resources.parse({"cpu": "0.0001", "memory": "1.5Ki", "ephemeral-storage": "1G", "pods": "3",
                              "nvidia.com/gpu": "1", "hugepages-2Mi": "0"})
    assert parsed == Resources(cpu=1, memory=1536, ephemeral_storage=10 ** 9, pods=3,
                               extended=(("nvidia.com/gpu", 1),))


@pytest.mark.parametrize("value", ["abc", "1Qi", "-1", "1e400", "9" * 80, True, None, [1]])
def test_a_bad_quantity_names_its_field(value):
    with pytest.raises(RequestError) as caught:
        resources.parse({"cpu": "1", "memory": value}, "spec.containers[0].resources.requests")
    assert caught.value.field == "spec.containers[0].resources.requests.memory"


def test_not_a_mapping():
    with pytest.raises(RequestError):
        resources.parse(["cpu"], "x")
    assert resources.parse(None) == resources.ZERO


def test_numbers_are_read_as_quantities():
    assert resources.parse({"cpu": 2, "memory": 1024}) == Resources(cpu=2000, memory=1024)


def test_arithmetic_and_fits():
    a = Resources(cpu=500, memory=100, pods=1, extended=(("nvidia.com/gpu", 1),))
    b = Resources(cpu=1500, memory=300, pods=2)
    assert a + b == Resources(cpu=2000, memory=400, pods=3, extended=(("nvidia.com/gpu", 1),))
    assert (a + b) - a == b
    assert not a.fits(b + b)  # no GPU there
    assert b.fits(b) and not (b + Resources(cpu=1)).fits(b)
    assert a.maximum(b) == Resources(cpu=1500, memory=300, pods=2, extended=(("nvidia.com/gpu", 1),))
    assert a.times(3) == Resources(cpu=1500, memory=300, pods=3, extended=(("nvidia.com/gpu", 3),))


def test_copies_in():
    room = Resources(cpu=2000, memory=1000, pods=110)
    assert Resources(cpu=300, memory=100, pods=1).copies_in(room) == 6
    assert Resources(cpu=300, memory=400, pods=1).copies_in(room) == 2
    assert Resources(extended=(("nvidia.com/gpu", 1),)).copies_in(room) == 0
    assert Resources(cpu=3000).copies_in(room - Resources(cpu=2500)) == 0


def test_to_quantities_reads_back():
    amounts = Resources(cpu=1500, memory=8 << 30, ephemeral_storage=123, pods=29, extended=(("amd.com/gpu", 2),))
    quantities = amounts.to_quantities()
    assert quantities == {"cpu": "1500m", "memory": "8Gi", "ephemeral-storage": "123", "pods": "29",
                          "amd.com/gpu": "2"}
    assert resources.parse(quantities) == amounts
    assert Resources(cpu=4000).to_quantities() == {"cpu": "4", "memory": "0"}


def test_a_quantity_read_again_reads_the_same_and_a_bad_one_is_refused_every_time():
    assert resources.quantity("1500m", "x", milli=True) == resources.quantity("1500m", "x", milli=True) == 1500
    assert resources.quantity("1500m", "x") == 2  # whole units: the milli reading is not reused
    for _ in range(2):
        with pytest.raises(RequestError):
            resources.quantity("12 cores", "x")



def test_extended_resources_a_node_does_not_report_stand_at_another_figure():
    node = Resources(cpu=3920, memory=100, pods=29)
    machine = Resources(cpu=4000, memory=200, pods=29, extended=(("nvidia.com/gpu", 1), ("vpc.amazonaws.com/efa", 1)))
    assert node.with_extended_of(machine) == Resources(cpu=3920, memory=100, pods=29, extended=machine.extended)
    reported = Resources(cpu=3920, extended=(("nvidia.com/gpu", 4),))
    assert reported.with_extended_of(machine).extended == (("nvidia.com/gpu", 4), ("vpc.amazonaws.com/efa", 1))
    assert node.with_extended_of(Resources(cpu=1)) is node
