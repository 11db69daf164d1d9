"""The launcher's manifest rewriting (pure; needs no control plane)."""
from __future__ import annotations

from devcluster import manifests


def _controller(kind: str, name: str, hooks: dict) -> dict:
    return {"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": kind,
            "metadata": {"name": name}, "spec": {"hooks": hooks}}


def test_every_hook_of_every_controller_points_at_the_local_server():
    docs = [
        _controller("DecoratorController", "a", {
            "sync": {"version": "v2", "webhook": {"url": "http://nodewarden.nodewarden-system/a/sync", "timeout": "10s"}},
            "finalize": {"webhook": {"url": "http://nodewarden.nodewarden-system:80/a/finalize"}},
        }),
        _controller("CompositeController", "b", {
            "customize": {"webhook": {"service": {"name": "nodewarden", "namespace": "x"}, "path": "/b/customize"}},
        }),
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
         "data": {"url": "http://nodewarden.nodewarden-system/keep"}},
    ]
    manifests.point_hooks_at(docs, "http://127.0.0.1:18080")
    a, b, other = docs
    assert a["spec"]["hooks"]["sync"]["webhook"] == {"url": "http://127.0.0.1:18080/a/sync", "timeout": "10s"}
    assert a["spec"]["hooks"]["finalize"]["webhook"]["url"] == "http://127.0.0.1:18080/a/finalize"
    assert b["spec"]["hooks"]["customize"]["webhook"] == {"url": "http://127.0.0.1:18080/b/customize"}
    assert other["data"]["url"] == "http://nodewarden.nodewarden-system/keep"


def _crd(hook_properties: dict) -> dict:
    return {"kind": "CustomResourceDefinition", "spec": {
        "names": {"kind": "DecoratorController"},
        "versions": [{"schema": {"openAPIV3Schema": {"properties": {"spec": {"properties": {
            "hooks": {"properties": {"sync": {"properties": hook_properties}}}}}}}}}],
    }}


def test_hook_fields_the_running_metacontroller_lacks_are_dropped_and_named():
    known = manifests.hook_fields_known([_crd({"webhook": {}})])
    docs = [_controller("DecoratorController", "a", {"sync": {"version": "v2", "webhook": {"url": "u"}}})]
    dropped = manifests.drop_unknown_hook_fields(docs, known)
    assert dropped == ["DecoratorController/a spec.hooks.sync.version"]
    assert docs[0]["spec"]["hooks"]["sync"] == {"webhook": {"url": "u"}}


def test_nothing_is_dropped_when_metacontroller_knows_the_field():
    known = manifests.hook_fields_known([_crd({"webhook": {}, "version": {}})])
    docs = [_controller("DecoratorController", "a", {"sync": {"version": "v2", "webhook": {"url": "u"}}})]
    assert manifests.drop_unknown_hook_fields(docs, known) == []
    assert docs[0]["spec"]["hooks"]["sync"]["version"] == "v2"
