"""The real WSGI app: routes, every error path, metrics, and no 500 for any body."""
from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hooks import runtime
from hooks.app import create_app
from hooks.config import load_settings
from worlds.envelope import controller_object, hook_request
from worlds.fake_kube import FakeKube

NODE = {"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "n1", "uid": "u1", "labels": {}, "annotations": {}},
        "spec": {"providerID": "aws:///us-east-1a/i-0123456789abcdef0"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
ATT = {"apiVersion": "nodewarden.io/v1alpha1", "kind": "Attachment",
       "metadata": {"name": "n1", "namespace": "nodewarden-system"},
       "spec": {"nodeName": "n1", "instanceID": "i-0123456789abcdef0", "awsTargets": [], "awsLoadBalancers": [],
                "discoveredAt": "2999-01-01T00:00:00Z"}}
# As Metacontroller sends it for node-detacher's sync hook (version v2, as metacontroller/ declares).
BODY = hook_request("node-detacher", NODE, children=[ATT])


@pytest.fixture(scope="module")
def client():
    env = {"NODEWARDEN_CLUSTER_NAME": "c", "NODEWARDEN_MAX_BODY_BYTES": "65536", "AWS_REGION": "us-east-1",
           # Nothing listens here: any AWS call fails fast instead of reaching the internet.
           "AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x"}
    ctx = runtime.Context(load_settings(env), events_inline=True)
    ctx._kube = FakeKube(unavailable=True)
    app = create_app(ctx)
    return app.test_client()


def test_sync_answers_with_a_decorator_response(client):
    r = client.post("/node-detacher/sync", json=BODY, headers={"X-Request-Id": "abc123"})
    assert r.status_code == 200
    assert r.headers["X-Request-Id"] == "abc123"
    body = r.get_json()
    assert body["attachments"] == [], "a serving node's left-over Attachment is dropped"
    assert set(body) <= {"labels", "annotations", "status", "attachments", "resyncAfterSeconds", "finalized"}


def test_health_readiness_and_metrics(client):
    assert client.get("/healthz").status_code == 200
    assert "node-detacher" in client.get("/readyz").get_json()["controllers"]
    client.post("/node-detacher/sync", json=BODY)
    text = client.get("/metrics").get_data(as_text=True)
    assert 'nodewarden_hook_duration_seconds_count{code="200",controller="node-detacher",hook="sync"}' in text
    bounds = sorted({float(m) for m in re.findall(
        r'nodewarden_hook_duration_seconds_bucket\{[^}]*le="([0-9.e+-]+)"', text)})
    # A percentile read off the buckets (bench/scale.py) is only as close as neighbouring bounds.
    assert bounds[0] <= 0.001 and bounds[-1] >= 10
    assert max(b / a for a, b in zip(bounds, bounds[1:])) <= 1.7


@pytest.mark.parametrize("path", ["/nope/sync", "/node-detacher/customize", "/node-detacher/delete"])
def test_unknown_controller_or_hook_is_404(client, path):
    r = client.post(path, json=BODY)
    assert r.status_code == 404 and "error" in r.get_json()


def test_wrong_content_type_is_415(client):
    r = client.post("/node-detacher/sync", data=json.dumps(BODY), content_type="text/plain")
    assert r.status_code == 415 and "application/json" in r.get_json()["error"]


def test_malformed_json_is_400(client):
    r = client.post("/node-detacher/sync", data="{not json", content_type="application/json")
    assert r.status_code == 400 and r.get_json()["error"].startswith("malformed JSON")


def test_missing_field_is_400_naming_it(client):
    for controller in ({}, controller_object("node-detacher", "v1"), controller_object("node-detacher", "v2")):
        r = client.post("/node-detacher/sync", json={"controller": controller, "attachments": {}})
        assert r.status_code == 400 and r.get_json()["field"] == "object", r.get_json()


def test_a_body_in_a_shape_no_metacontroller_sends_is_400_naming_the_field(client):
    """A decorator body with "parent" (the composite name) is refused in both versions, naming "object"."""
    for version in ("v1", "v2"):
        body = {"controller": controller_object("node-detacher", version), "parent": NODE, "children": {},
                "related": {}, "finalizing": False}
        r = client.post("/node-detacher/sync", json=body)
        assert r.status_code == 400 and r.get_json()["field"] == "object", r.get_json()
        ok = hook_request("node-detacher", NODE, children=[ATT], version=version)
        assert set(ok) == {"controller", "object", "attachments", "related", "finalizing"}
        assert client.post("/node-detacher/sync", json=ok).status_code == 200


def test_mistyped_field_is_400_naming_it(client):
    bad = json.loads(json.dumps(BODY))
    bad["object"]["spec"]["taints"] = "ToBeDeletedByClusterAutoscaler"
    r = client.post("/node-detacher/sync", json=bad)
    assert r.status_code == 400 and r.get_json()["field"] == "object.spec.taints"


def test_body_over_the_limit_is_413(client):
    r = client.post("/node-detacher/sync", data=b"{" + b" " * 70000 + b"}", content_type="application/json")
    assert r.status_code == 413 and "error" in r.get_json()


def test_wrong_method_is_json_405(client):
    r = client.get("/node-detacher/sync")
    assert r.status_code == 405 and "error" in r.get_json()


def test_aws_unreachable_is_still_200_with_the_error_recorded():
    env = {"NODEWARDEN_CLUSTER_NAME": "c", "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
           "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x"}
    ctx = runtime.Context(load_settings(env), events_inline=True)
    ctx._kube = FakeKube()
    client = create_app(ctx).test_client()
    cordoned = json.loads(json.dumps(BODY))
    cordoned["attachments"] = {}
    cordoned["object"]["spec"]["unschedulable"] = True
    cordoned["object"]["metadata"]["labels"] = {"node.kubernetes.io/exclude-from-external-load-balancers": "x"}
    cordoned["object"]["metadata"]["annotations"] = {"nodewarden.io/detaching-since": "2026-01-01T00:00:00Z",
                                                     "node-detacher.variant.run/detaching": "true"}
    ctx._kube.add_object(cordoned["object"])  # the API server has the node as the body says
    r = client.post("/node-detacher/sync", json=cordoned)
    assert r.status_code == 200
    body = r.get_json()
    assert "discovery failed" in body["annotations"]["nodewarden.io/detach-error"]
    assert body["resyncAfterSeconds"] >= 5


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, prefix + (i,))


CORDONED = json.loads(json.dumps(BODY))
CORDONED["object"]["spec"]["unschedulable"] = True
CORDONED["object"]["spec"]["taints"] = [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]
PATHS = [p for p in _paths(CORDONED) if p]


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(PATHS), value=json_values)
def test_no_mutated_request_yields_a_500(client, path, value):
    body = json.loads(json.dumps(CORDONED))
    target = body
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    r = client.post("/node-detacher/sync", json=body)
    assert r.status_code in (200, 400), r.get_data(as_text=True)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.binary(max_size=200) | json_values.map(lambda v: json.dumps(v).encode()))
def test_no_arbitrary_body_yields_a_500(client, body):
    r = client.post("/node-detacher/sync", data=body, content_type="application/json")
    assert r.status_code in (200, 400)
    assert "Traceback" not in r.get_data(as_text=True)


def test_no_reachable_kubernetes_api_still_answers_and_reports(tmp_path, monkeypatch):
    """The real client against a port nothing listens on: Events and evictions fail, the hook answers."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "dead",
        "clusters": [{"name": "dead", "cluster": {"server": "http://127.0.0.1:9"}}],
        "users": [{"name": "u", "user": {"token": "x"}}],
        "contexts": [{"name": "dead", "context": {"cluster": "dead", "user": "u"}}]}))
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    ctx = runtime.Context(load_settings({"NODEWARDEN_CLUSTER_NAME": "c", "AWS_REGION": "us-east-1"}))
    app = create_app(ctx).test_client()
    detached = json.loads(json.dumps(BODY))
    detached["object"]["spec"]["unschedulable"] = True
    detached["object"]["metadata"]["labels"] = {"node.kubernetes.io/exclude-from-external-load-balancers": "nodewarden"}
    detached["object"]["metadata"]["annotations"] = {
        "node-detacher.variant.run/detaching": "true", "nodewarden.io/detaching-since": "2026-01-01T00:00:00Z",
        "nodewarden.io/deregistered": "[]", "nodewarden.io/detached-at": "2026-01-01T00:00:10Z"}
    r = app.post("/node-detacher/sync", json=detached)  # shutdown step: must list pods through the API
    assert r.status_code == 200
    body = r.get_json()
    error = body["annotations"]["nodewarden.io/detach-error"]
    assert "listing pods failed" in error or "not verified with the API server" in error
    assert body["resyncAfterSeconds"] >= 5


def test_metrics_and_hooks_answer_only_on_their_own_ports():
    """With a metrics port, a NetworkPolicy can admit Prometheus there without admitting it to the hooks."""
    ctx = runtime.Context(load_settings({"NODEWARDEN_CLUSTER_NAME": "c", "NODEWARDEN_METRICS_PORT": "9090"}))
    ctx._kube = FakeKube(unavailable=True)
    app = create_app(ctx).test_client()
    hooks_port, metrics_port = "http://localhost:8080", "http://localhost:9090"
    assert app.get("/metrics", base_url=metrics_port).status_code == 200
    assert app.get("/metrics", base_url=hooks_port).status_code == 404
    assert app.post("/node-detacher/sync", json=BODY, base_url=metrics_port).status_code == 404
    assert app.post("/node-detacher/sync", json=BODY, base_url=hooks_port).status_code == 200
    for port in (hooks_port, metrics_port):
        assert app.get("/healthz", base_url=port).status_code == 200


def test_a_body_nested_too_deeply_is_refused_not_a_500(client):
    deep = "[" * 30_000 + "]" * 30_000  # under this client's 64 KiB limit
    r = client.post("/node-detacher/sync", data=deep, content_type="application/json")
    assert r.status_code == 400
    nested = json.loads(json.dumps(BODY))
    inner: dict = {}
    for _ in range(5000):
        inner = {"a": inner}
    nested["object"]["status"]["extra"] = inner
    r = client.post("/node-detacher/sync", data=_dump_deep(nested),
                    content_type="application/json")
    assert r.status_code in (200, 400), r.get_data(as_text=True)


def _dump_deep(obj) -> str:
    import sys

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20000)
    try:
        return json.dumps(obj)
    finally:
        sys.setrecursionlimit(limit)


@pytest.mark.parametrize("constant", ["Infinity", "-Infinity", "NaN"])
def test_non_json_numbers_are_refused_before_any_hook(client, constant):
    text = json.dumps(BODY).replace('"spec": {', f'"spec": {{"retries": {constant}, ', 1)
    r = client.post("/node-detacher/sync", data=text, content_type="application/json")
    assert r.status_code == 400 and "not JSON" in r.get_json()["error"]
