"""The door before the hooks (hooks/auth.py): settings, token files and the app's 401, without sockets.

tests/serving/test_hook_tls.py runs the same door behind real TLS in gunicorn.
"""
from __future__ import annotations

import pytest

from hooks import auth, runtime
from hooks.app import create_app
from hooks.config import ConfigError, load_settings
from worlds.envelope import hook_request
from worlds.fake_kube import FakeKube

NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "uid": "u1"}}


@pytest.mark.parametrize("env,names", [
    ({"NODEWARDEN_TLS_CERT_FILE": "c"}, "NODEWARDEN_TLS_KEY_FILE"),
    ({"NODEWARDEN_TLS_CLIENT_CA_FILE": "ca"}, "NODEWARDEN_TLS_CLIENT_CA_FILE"),
    ({"NODEWARDEN_TLS_CERT_FILE": "c", "NODEWARDEN_TLS_KEY_FILE": "k", "NODEWARDEN_TLS_CLIENT_NAMES": "mc"},
     "NODEWARDEN_TLS_CLIENT_NAMES"),
    ({"NODEWARDEN_REQUIRE_AUTH": "true"}, "NODEWARDEN_REQUIRE_AUTH"),
    ({"NODEWARDEN_REQUIRE_AUTH": "maybe"}, "NODEWARDEN_REQUIRE_AUTH"),
])
def test_an_inconsistent_auth_setting_stops_the_server_naming_it(env, names):
    with pytest.raises(ConfigError) as err:
        load_settings(env)
    assert names in str(err.value)


def test_required_auth_is_satisfied_by_either_proof():
    assert load_settings({"NODEWARDEN_REQUIRE_AUTH": "true", "NODEWARDEN_AUTH_TOKEN_FILES": "/t"}).require_auth
    assert load_settings({"NODEWARDEN_REQUIRE_AUTH": "true", "NODEWARDEN_TLS_CERT_FILE": "c",
                          "NODEWARDEN_TLS_KEY_FILE": "k", "NODEWARDEN_TLS_CLIENT_CA_FILE": "ca"}).require_auth


def test_token_files_are_read_again_only_when_they_change(tmp_path):
    current, previous = tmp_path / "token", tmp_path / "previous"
    current.write_text("  new-token \n")
    files = auth.TokenFiles([str(current), str(previous)])
    assert files.tokens() == (b"new-token",)  # whitespace dropped as Metacontroller drops it; absent file skipped
    previous.write_text("old-token")
    assert files.tokens() == (b"new-token", b"old-token")
    current.write_text("")
    assert files.tokens() == (b"old-token",)


def test_certificate_names_are_the_common_name_and_dns_or_uri_sans():
    cert = {"subject": ((("organizationName", "x"),), (("commonName", "metacontroller"),)),
            "subjectAltName": (("DNS", "mc.metacontroller.svc"), ("IP Address", "10.0.0.1"),
                               ("URI", "spiffe://cluster/ns/metacontroller/sa/metacontroller"))}
    assert auth._cert_names(cert) == {"metacontroller", "mc.metacontroller.svc",
                                      "spiffe://cluster/ns/metacontroller/sa/metacontroller"}


@pytest.fixture
def client(tmp_path):
    token = tmp_path / "token"
    token.write_text("sesame")
    ctx = runtime.Context(load_settings({"NODEWARDEN_CLUSTER_NAME": "c", "AWS_REGION": "us-east-1",
                                         "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
                                         "NODEWARDEN_AUTH_TOKEN_FILES": str(token)}), events_inline=True)
    ctx._kube = FakeKube(unavailable=True)
    return create_app(ctx).test_client()


def test_every_hook_route_needs_the_token_and_health_does_not(client):
    body = hook_request("node-detacher", NODE)
    for path in ("/node-detacher/sync", "/node-detacher/finalize", "/fencing-request/customize", "/nope/sync"):
        reply = client.post(path, json=body)
        assert reply.status_code == 401 and reply.headers["WWW-Authenticate"].startswith("Bearer"), path
    assert client.post("/node-detacher/sync", json=body, headers={"Authorization": "bearer sesame"}).status_code == 200
    for path in ("/healthz", "/readyz", "/metrics"):
        assert client.get(path).status_code == 200, path
    assert client.get("/readyz").get_json()["auth"] == "bearer-token"


def test_auth_off_is_said_in_readyz():
    app = create_app(runtime.Context(load_settings({"NODEWARDEN_CLUSTER_NAME": "c"})))
    assert app.test_client().get("/readyz").get_json()["auth"] == "off"
