"""Labels and annotations the hooks write on a Node themselves (hooks/kube/nodes.py)."""
from __future__ import annotations

import json

import pytest

from hooks.kube import nodes, taints
from hooks.plan import Change
from worlds.fake_kube import FakeKube


def _kube(**metadata) -> FakeKube:
    kube = FakeKube()
    kube.add_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "uid": "uid-1", **metadata},
                   "spec": {}})
    return kube


def _seen(kube: FakeKube) -> dict:
    meta = kube.nodes["n1"]["metadata"]
    return {key: meta.get(key) for key in ("uid", "resourceVersion", "labels", "annotations")}


def test_a_write_on_the_node_the_call_read_needs_no_read_of_its_own():
    kube = _kube(labels={"a": "1"})
    assert nodes.write_metadata(kube, "n1", "uid-1", labels={"x": "y"}, annotations={"k": "v"}, seen=_seen(kube))
    assert [c[0] for c in kube.calls] == ["json_patch"]
    meta = kube.nodes["n1"]["metadata"]
    assert meta["labels"] == {"a": "1", "x": "y"} and meta["annotations"] == {"k": "v"}


def test_a_key_written_none_is_taken_off_where_the_node_has_it():
    kube = _kube(annotations={"gone": "1", "kept": "2"})
    assert nodes.write_metadata(kube, "n1", "uid-1", annotations={"gone": None, "never-there": None, "new": "3"},
                                seen=_seen(kube))
    assert kube.nodes["n1"]["metadata"]["annotations"] == {"kept": "2", "new": "3"}
    assert not nodes.write_metadata(kube, "n1", "uid-1", annotations={"gone": None}), "nothing to take off: no write"


def test_a_node_written_since_the_call_read_it_is_read_again_and_keeps_that_write():
    kube = _kube(labels={"a": "1"})
    seen = _seen(kube)
    taints.add(kube, "n1", "node.kubernetes.io/unschedulable", "NoSchedule")  # the controller manager, meanwhile
    kube.calls.clear()
    assert nodes.write_metadata(kube, "n1", "uid-1", labels={"x": "y"}, seen=seen)
    assert [c[0] for c in kube.calls] == ["json_patch", "get", "json_patch"]
    assert kube.nodes["n1"]["metadata"]["labels"] == {"a": "1", "x": "y"}
    assert kube.taints("n1") == [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]


def test_a_namesake_is_never_written_whatever_the_call_saw():
    kube = _kube()
    seen = {**_seen(kube), "uid": "uid-old"}  # even were its resourceVersion the one the call read
    with pytest.raises(taints.NodeReplaced):
        nodes.write_metadata(kube, "n1", "uid-old", labels={"x": "y"}, seen=seen)
    assert "labels" not in kube.nodes["n1"]["metadata"]


def test_a_recorded_list_is_merged_with_what_the_node_holds_now():
    kube = _kube(annotations={"list": '["b"]', "other": "kept"})
    changes = [(Change(("annotations", "list"), union=("a",)), None), (Change(("annotations", "list"), union=("c",)), None)]
    assert nodes.record(kube, "n1", changes, "uid-1")
    annotations = kube.nodes["n1"]["metadata"]["annotations"]
    assert json.loads(annotations["list"]) == ["a", "b", "c"] and annotations["other"] == "kept"
    assert not nodes.record(kube, "n1", changes, "uid-1"), "nothing new: no write"
