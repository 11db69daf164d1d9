"""The request contract: hook bodies read the same in both versions, bad ones name their field, and answers
carry only what Metacontroller's strict v2 parsing allows (hooks/contract.py)."""
from __future__ import annotations

import pytest

from hooks.contract import (COMPOSITE, DECORATOR, RequestError, composite_response, decorator_response,
                            parse_request, shape_response)


NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
ATT = {"apiVersion": "nodewarden.io/v1alpha1", "kind": "Attachment", "metadata": {"name": "n1", "namespace": "ns"}}
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p1", "namespace": "ns"}}
CM = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c1", "namespace": "ns"}}
CM_ELSEWHERE = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c1", "namespace": "other"}}


def _controller(**versions):
    """A controller object declaring a version per hook (sync="v2", finalize="v1", ...)."""
    return {"metadata": {"name": "c"}, "spec": {"hooks": {h: {"version": v} for h, v in versions.items()}}}


def test_decorator_v1_and_v2_requests_read_the_same():
    """Both versions name a decorator's object "object" and its children "attachments"; only the inner keys differ."""
    v1 = parse_request({"controller": _controller(sync="v1"), "object": NODE,
                        "attachments": {"Attachment.nodewarden.io/v1alpha1": {"ns/n1": ATT}}}, DECORATOR)
    v2 = parse_request({"controller": _controller(sync="v2"), "object": NODE,
                        "attachments": {"Attachment.nodewarden.io/v1alpha1": {"ns/n1": ATT}}}, DECORATOR)
    assert (v1.version, v2.version) == ("v1", "v2")
    assert v1.parent == v2.parent == NODE
    assert v1.children.get("Attachment", "n1", "ns") == v2.children.get("Attachment", "n1", "ns") == ATT


@pytest.mark.parametrize("kind,names", [(DECORATOR, ("object", "attachments")), (COMPOSITE, ("parent", "children"))])
def test_v1_and_v2_keys_both_index_by_the_objects_own_metadata(kind, names):
    """A namespaced parent: v1 keys its same-namespace children by name, related ones relative to it;
    v2 keys everything namespace/name. Either way the objects are found by their metadata."""
    keys = {"v1": {"child": "p1", "related": ["c1"]}, "v2": {"child": "ns/p1", "related": ["ns/c1", "other/c1"]}}
    parent_name, children_name = names
    for version in ("v1", "v2"):
        related = dict(zip(keys[version]["related"], (CM, CM_ELSEWHERE)))
        body = {"controller": _controller(sync=version), parent_name: POD,
                children_name: {"Pod.v1": {keys[version]["child"]: POD}}, "related": {"ConfigMap.v1": related}}
        request = parse_request(body, kind, "sync")
        assert request.version == version
        assert request.children.get("Pod", "p1", "ns") == POD
        assert request.children.get("Pod", "p1", "other") is None
        assert request.related.get("ConfigMap", "c1", "ns") == CM
        if version == "v2":
            assert request.related.get("ConfigMap", "c1", "other") == CM_ELSEWHERE


@pytest.mark.parametrize("kind", [DECORATOR, COMPOSITE])
def test_the_version_is_the_one_the_controller_declares_for_the_hook(kind):
    parent = "object" if kind == DECORATOR else "parent"
    controller = _controller(sync="v2", finalize="v1")
    assert parse_request({"controller": controller, parent: NODE}, kind, "sync").version == "v2"
    assert parse_request({"controller": controller, parent: NODE, "finalizing": True}, kind, "finalize").version == "v1"
    for undeclared in ({}, {"metadata": {"name": "c"}}, _controller(finalize="v2"), _controller(sync="v9")):
        assert parse_request({"controller": undeclared, parent: NODE}, kind, "sync").version == "v1"
    assert parse_request({parent: NODE}, kind, "sync").version == "v1"


@pytest.mark.parametrize("controller", [None, {}, _controller(sync="v1"), _controller(sync="v2")])
def test_a_decorator_body_with_parent_and_no_object_names_object(controller):
    """No Metacontroller sends a decorator request with "parent": refused in either version, naming the field."""
    body = {"parent": NODE, "children": {}}
    if controller is not None:
        body["controller"] = controller
    with pytest.raises(RequestError) as err:
        parse_request(body, DECORATOR, "sync")
    assert err.value.field == "object"
    assert "'parent'" in err.value.problem and "composite" in err.value.problem  # says who uses 'parent'


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_a_composite_body_with_object_and_no_parent_names_parent(version):
    with pytest.raises(RequestError) as err:
        parse_request({"controller": _controller(sync=version), "object": NODE}, COMPOSITE, "sync")
    assert err.value.field == "parent" and "'object'" in err.value.problem


V2 = {"controller": _controller(sync="v2")}


@pytest.mark.parametrize("body,kind,field", [
    ({}, DECORATOR, "object"),
    ({}, COMPOSITE, "parent"),
    (V2, DECORATOR, "object"),
    (V2, COMPOSITE, "parent"),
    ({"object": []}, DECORATOR, "object"),
    ({**V2, "object": []}, DECORATOR, "object"),
    ({**V2, "object": {"metadata": {}}}, DECORATOR, "object.metadata.name"),
    ({"object": {"metadata": {"name": "x", "labels": {"a": 1}}}}, DECORATOR, "object.metadata.labels.a"),
    ({**V2, "object": NODE, "finalizing": "yes"}, DECORATOR, "finalizing"),
    ({**V2, "object": NODE, "attachments": {"nokey": {}}}, DECORATOR, "attachments"),
    ({"object": NODE, "attachments": {"nokey": {}}}, DECORATOR, "attachments"),
    ({"parent": NODE, "related": {"Pod.v1": {"x": []}}}, COMPOSITE, "related.Pod.v1.x"),
    ({"controller": [], "parent": NODE}, COMPOSITE, "controller"),
])
def test_bad_requests_name_the_field(body, kind, field):
    with pytest.raises(RequestError) as err:
        parse_request(body, kind)
    assert err.value.field == field


def test_responses_carry_only_what_strict_v2_parsing_allows():
    assert set(decorator_response(resync_after=3, finalized=True)) <= {
        "labels", "annotations", "status", "attachments", "resyncAfterSeconds", "finalized"}
    with pytest.raises(ValueError):
        shape_response(COMPOSITE, {"status": {}, "labels": {}})
    with pytest.raises(ValueError):
        composite_response(status=None)
    assert shape_response(COMPOSITE, composite_response(status={"phase": "x"})) == {"status": {"phase": "x"}, "children": []}
