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


def test_the_endpoint_config_of_the_service_follows_the_urls():
    """Metacontroller matches endpointConfigs by URL host: the entry for the Service moves with the URLs."""
    docs = [_controller("DecoratorController", "a", {
        "sync": {"webhook": {"url": "https://nodewarden.nodewarden-system.svc/a/sync"}}})]
    docs[0]["spec"]["endpointConfigs"] = [{"host": "nodewarden.nodewarden-system.svc", "authorization": {}},
                                          {"host": "elsewhere.example", "authorization": {}}]
    manifests.point_hooks_at(docs, "https://127.0.0.1:18443")
    assert [e["host"] for e in docs[0]["spec"]["endpointConfigs"]] == ["127.0.0.1:18443", "elsewhere.example"]


def _crd(hook_properties: dict, spec_properties: dict | None = None) -> dict:
    return {"kind": "CustomResourceDefinition", "spec": {
        "names": {"kind": "DecoratorController"},
        "versions": [{"schema": {"openAPIV3Schema": {"properties": {
            "apiVersion": {}, "kind": {}, "metadata": {"type": "object"},
            "spec": {"properties": {
                **(spec_properties or {}),
                "hooks": {"properties": {"sync": {"properties": hook_properties}}}}}}}}}],
    }}


def test_fields_the_running_metacontroller_lacks_are_dropped_and_named():
    docs = [_controller("DecoratorController", "a", {"sync": {"version": "v2", "webhook": {"url": "u"}}})]
    docs[0]["spec"]["endpointConfigs"] = [{"host": "h"}]
    dropped = manifests.drop_unknown_fields(docs, [_crd({"webhook": {}})])
    assert dropped == ["DecoratorController/a spec.endpointConfigs", "DecoratorController/a spec.hooks.sync.version"]
    assert docs[0]["spec"] == {"hooks": {"sync": {"webhook": {"url": "u"}}}}


def test_nothing_is_dropped_when_metacontroller_knows_the_fields():
    endpoint = {"endpointConfigs": {"type": "array", "items": {"properties": {"host": {}, "authorization": {
        "properties": {"type": {}, "secretRef": {"properties": {"name": {}, "namespace": {}, "key": {}}}}}}}}}
    docs = [_controller("DecoratorController", "a", {"sync": {"version": "v2", "webhook": {"url": "u"}}})]
    docs[0]["spec"]["endpointConfigs"] = [{"host": "h", "authorization": {"type": "Bearer", "secretRef": {
        "name": "s", "namespace": "n", "key": "token"}}}]
    assert manifests.drop_unknown_fields(docs, [_crd({"webhook": {}, "version": {}}, endpoint)]) == []
    assert docs[0]["spec"]["hooks"]["sync"]["version"] == "v2" and docs[0]["spec"]["endpointConfigs"]
    docs[0]["spec"]["endpointConfigs"][0]["authorization"]["secretRef"]["keys"] = "typo"
    assert manifests.drop_unknown_fields(docs, [_crd({"webhook": {}, "version": {}}, endpoint)]) == [
        "DecoratorController/a spec.endpointConfigs[0].authorization.secretRef.keys"]


def test_the_stack_authenticates_hooks_exactly_when_the_controllers_keep_their_endpoint_configs(tmp_path):
    """What the launcher does with the base's endpointConfigs (kept on v4, dropped on v1.5.20)."""
    import dataclasses

    import pytest

    from devcluster.cluster import Cluster
    from devcluster.components import Ports
    from devcluster.layout import Layout
    from devcluster.metacontroller import Build

    layout = Layout(workdir=tmp_path)
    if not layout.binary("kustomize").exists():
        pytest.skip("kustomize not built yet (make controlplane-bins)")
    ports = Ports(**{name: 40000 + i for i, name in enumerate(f.name for f in dataclasses.fields(Ports))})
    for release, keep in (("v4.17.2", True), ("v1.5.20", False)):
        cluster = Cluster(layout)
        cluster.ports, cluster.metacontroller = ports, Build(release=release)
        docs = manifests.kustomize_build(layout)
        if not keep:
            for doc in docs:
                (doc.get("spec") or {}).pop("endpointConfigs", None)
        secrets = cluster._hook_auth(docs)
        manifests.point_hooks_at(docs, cluster.hook_server.url)
        controllers = [d for d in docs if d["kind"] in manifests.CONTROLLER_KINDS]
        if not keep:
            assert secrets == [] and cluster.hook_server.url.startswith("http://")
            assert "Authorization" not in cluster.hook_server.session().headers
            continue
        assert cluster.hook_server.url == f"https://127.0.0.1:{ports.hooks}"
        made = {(s["metadata"]["namespace"], s["metadata"]["name"]): s["stringData"] for s in secrets}
        for c in controllers:
            [entry] = c["spec"]["endpointConfigs"]
            assert entry["host"] == f"127.0.0.1:{ports.hooks}"
            token_ref, ca_ref = entry["authorization"]["secretRef"], entry["caBundle"]["secretRef"]
            token = made[(token_ref["namespace"], token_ref["name"])][token_ref["key"]]
            assert made[(ca_ref["namespace"], ca_ref["name"])][ca_ref["key"]] == \
                cluster.hook_credentials.ca_cert.read_text()
        session = cluster.hook_server.session()
        assert session.headers["Authorization"] == f"Bearer {token}"
        assert session.verify == str(cluster.hook_credentials.ca_cert)
        assert cluster.hook_credentials.server_env()["NODEWARDEN_AUTH_TOKEN_FILES"] == \
            str(cluster.hook_credentials.token)
