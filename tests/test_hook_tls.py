"""Only Metacontroller may call the hooks: real HTTPS to the real gunicorn server.

The server runs as the image runs it (gunicorn.conf.py), with TLS on the hook
port, a bearer token and a client CA (what Metacontroller v4.16+ sends with
`authorization` and `clientTLS`), and the metrics port in plain HTTP.
Certificates come from throw-away CAs made here: the server's own, a
stranger's, and an expired client certificate.
"""
from __future__ import annotations

import datetime as dt
import os
import shutil

import pytest
import requests

from devcluster.pki import LOCAL_HOSTS
from hooks.credentials import Authority, dns_names
from tests.hook_server import HookServer, start_failure
from tests.support import hook_request

NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "uid": "u1"},
        "spec": {"providerID": "aws:///us-east-1a/i-0123456789abcdef0"}}
BODY = hook_request("node-detacher", NODE)
REFUSED_TLS = (requests.exceptions.SSLError, requests.exceptions.ConnectionError)


class MountedSecret:
    """Files the way the kubelet mounts a Secret: names link into ``..data``, swapped in one rename."""

    def __init__(self, root):
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self._version = 0

    def write(self, files: dict[str, bytes]) -> None:
        self._version += 1
        version = self.root / f"..v{self._version}"
        version.mkdir()
        for name, data in files.items():
            (version / name).write_bytes(data)
        link = self.root / "..data_tmp"
        link.symlink_to(version.name)
        os.replace(link, self.root / "..data")
        for name in files:
            if not (self.root / name).is_symlink():
                (self.root / name).symlink_to(f"..data/{name}")

    def path(self, name: str) -> str:
        return str(self.root / name)


def _credentials(tmp, authority: Authority, token: bytes = b"sesame") -> dict[str, bytes]:
    authority.issue(tmp / "tls.crt", tmp / "tls.key", "nodewarden-hooks", server=True, sans=dns_names(*LOCAL_HOSTS))
    return {"tls.crt": (tmp / "tls.crt").read_bytes(), "tls.key": (tmp / "tls.key").read_bytes(),
            "ca.crt": authority.pem(), "token": token}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The server's CA and secret, a stranger CA, and client certificates of every kind."""
    tmp = tmp_path_factory.mktemp("tls")
    ours, stranger = Authority.create("nodewarden-hooks-ca"), Authority.create("stranger-ca")
    secret = MountedSecret(tmp / "secret")
    secret.write(_credentials(tmp, ours))
    certs = {
        "metacontroller": ours.issue(tmp / "mc.crt", tmp / "mc.key", "metacontroller"),
        "other-name": ours.issue(tmp / "other.crt", tmp / "other.key", "someone-else"),
        "stranger": stranger.issue(tmp / "s.crt", tmp / "s.key", "metacontroller"),
        "expired": ours.issue(tmp / "e.crt", tmp / "e.key", "metacontroller",
                              not_after=dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=1)),
    }
    env = {"NODEWARDEN_TLS_CERT_FILE": secret.path("tls.crt"), "NODEWARDEN_TLS_KEY_FILE": secret.path("tls.key"),
           "NODEWARDEN_TLS_CLIENT_CA_FILE": secret.path("ca.crt"), "NODEWARDEN_TLS_CLIENT_NAMES": "metacontroller",
           "NODEWARDEN_AUTH_TOKEN_FILES": f"{secret.path('token')},{secret.path('previous')}",
           "NODEWARDEN_REQUIRE_AUTH": "true"}
    return {"tmp": tmp, "ours": ours, "stranger": stranger, "secret": secret, "certs": certs, "env": env,
            "ca": secret.path("ca.crt")}


@pytest.fixture(scope="module")
def server(world):
    with HookServer(world["tmp"] / "server", env=world["env"]) as running:
        yield running


def _post(server, world, *, token=None, cert=None, body=BODY, verify=None, scheme="Bearer"):
    headers = {"Authorization": f"{scheme} {token}"} if token is not None else {}
    return requests.post(server.url("/node-detacher/sync"), json=body, headers=headers, timeout=10,
                         cert=world["certs"][cert] if cert else None, verify=verify or world["ca"])


def _served(server) -> float:
    """Hook calls that reached a controller (every code)."""
    return server.metric("nodewarden_hook_duration_seconds_count", controller="node-detacher", hook="sync")


def test_the_right_token_is_served(server, world):
    reply = _post(server, world, token="sesame")
    assert reply.status_code == 200, reply.text
    assert set(reply.json()) <= {"labels", "annotations", "status", "attachments", "resyncAfterSeconds", "finalized"}


@pytest.mark.parametrize("token,scheme,reason", [(None, "Bearer", "missing"), ("open-up", "Bearer", "invalid"),
                                                 ("sesame", "Basic", "scheme"), ("", "Bearer", "scheme")])
def test_no_or_a_wrong_token_is_401_and_reaches_no_controller(server, world, token, scheme, reason):
    served, refused = _served(server), server.metric("nodewarden_hook_auth_refused_total", reason=reason)
    reply = _post(server, world, token=token, scheme=scheme)
    assert reply.status_code == 401, reply.text
    assert reply.headers["WWW-Authenticate"].startswith("Bearer")
    assert "error" in reply.json() and "sesame" not in reply.text
    assert _served(server) == served, "a refused request never reaches a controller"
    assert server.metric("nodewarden_hook_auth_refused_total", reason=reason) == refused + 1


def test_a_refused_body_is_never_read(server, world):
    """Malformed JSON without credentials: 401, not the 400 that reading it would give."""
    reply = requests.post(server.url("/node-detacher/sync"), data=b"{not json", timeout=10, verify=world["ca"],
                          headers={"Content-Type": "application/json"})
    assert reply.status_code == 401
    reply = requests.post(server.url("/no-such-controller/sync"), json={}, timeout=10, verify=world["ca"])
    assert reply.status_code == 401, "no route is told to a caller that has not proven who it is"


def test_a_client_certificate_from_our_ca_is_served(server, world):
    reply = _post(server, world, cert="metacontroller")
    assert reply.status_code == 200, reply.text


def test_a_client_certificate_naming_someone_else_is_401(server, world):
    served = _served(server)
    reply = _post(server, world, cert="other-name")
    assert reply.status_code == 401 and _served(server) == served
    assert server.metric("nodewarden_hook_auth_refused_total", reason="client-name") >= 1


@pytest.mark.parametrize("cert", ["stranger", "expired"])
def test_a_certificate_from_another_ca_or_expired_fails_the_handshake(server, world, cert):
    served, refused = _served(server), server.metric("nodewarden_hook_auth_refused_total", reason="tls")
    with pytest.raises(REFUSED_TLS):
        _post(server, world, cert=cert, token="sesame")  # a good token does not rescue a bad certificate
    assert _served(server) == served
    assert server.metric("nodewarden_hook_auth_refused_total", reason="tls") == refused + 1


def test_plain_http_to_the_hook_port_is_refused(server):
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.post(server.url("/node-detacher/sync", scheme="http"), json=BODY, timeout=10)


def test_health_and_metrics_stay_open_in_plain_http_on_their_port(server):
    assert requests.get(f"{server.metrics_url}/healthz", timeout=5).status_code == 200
    ready = requests.get(f"{server.metrics_url}/readyz", timeout=5).json()
    assert ready["auth"] == "bearer-token+client-certificate"
    assert requests.get(f"{server.metrics_url}/metrics", timeout=5).status_code == 200
    assert requests.post(f"{server.metrics_url}/node-detacher/sync", json=BODY, timeout=5).status_code == 404


def test_the_server_checks_the_client_sees_our_certificate(server, world):
    """A client that trusts only another CA (as a Metacontroller with the wrong caBundle) gets no answer."""
    stranger_ca = world["tmp"] / "stranger-ca.crt"
    world["stranger"].write_cert(stranger_ca)
    with pytest.raises(requests.exceptions.SSLError):
        _post(server, world, token="sesame", verify=str(stranger_ca))


def test_token_and_certificate_rotation_without_a_restart(world, tmp_path):
    """New files in the mounted Secret are used by the next request or connection; the pid stays."""
    secret = MountedSecret(tmp_path / "secret")
    secret.write(_credentials(tmp_path, world["ours"], token=b"first\n"))
    env = {**world["env"], "NODEWARDEN_TLS_CERT_FILE": secret.path("tls.crt"),
           "NODEWARDEN_TLS_KEY_FILE": secret.path("tls.key"), "NODEWARDEN_TLS_CLIENT_CA_FILE": secret.path("ca.crt"),
           "NODEWARDEN_AUTH_TOKEN_FILES": f"{secret.path('token')},{secret.path('previous')}"}
    ca = tmp_path / "ca-first.crt"
    shutil.copy(secret.path("ca.crt"), ca)
    post = dict(world=world, verify=str(ca))
    with HookServer(tmp_path / "server", env=env) as server:
        pid = server.proc.pid
        assert _post(server, token="first", **post).status_code == 200

        # Rotation window: the new token, and the old one as "previous".
        files = {**_credentials(tmp_path, world["ours"], token=b"second"), "previous": b"first"}
        secret.write(files)
        assert _post(server, token="second", **post).status_code == 200
        assert _post(server, token="first", **post).status_code == 200
        secret.write({k: v for k, v in files.items() if k != "previous"})
        assert _post(server, token="first", **post).status_code == 401
        assert _post(server, token="second", **post).status_code == 200

        # A new serving certificate from a new CA: new connections get it.
        successor = Authority.create("nodewarden-hooks-ca-2")
        secret.write(_credentials(tmp_path, successor, token=b"second"))
        new_ca = tmp_path / "ca-second.crt"
        successor.write_cert(new_ca)
        with pytest.raises(requests.exceptions.SSLError):
            _post(server, token="second", **post)
        assert _post(server, world=world, token="second", verify=str(new_ca)).status_code == 200

        # Half a rotation (the key of another certificate): the last good certificate is still served.
        broken = _credentials(tmp_path, successor, token=b"second")
        broken["tls.key"] = _credentials(tmp_path, successor)["tls.key"]
        secret.write(broken)
        assert _post(server, world=world, token="second", verify=str(new_ca)).status_code == 200
        assert "cannot be loaded" in server.log()
        assert server.proc.pid == pid and server.proc.poll() is None


def test_no_token_file_readable_refuses_everything(world, tmp_path):
    env = {**world["env"], "NODEWARDEN_AUTH_TOKEN_FILES": str(tmp_path / "absent")}
    with HookServer(tmp_path / "server", env=env) as server:
        reply = _post(server, world, token="")
        assert reply.status_code == 401
        reply = _post(server, world, token="anything")
        assert reply.status_code == 401 and "no bearer token" in reply.json()["error"]


def test_required_auth_with_nothing_configured_does_not_start(tmp_path):
    failed = start_failure({"NODEWARDEN_REQUIRE_AUTH": "true"}, tmp_path)
    assert failed.returncode != 0
    assert "NODEWARDEN_REQUIRE_AUTH" in failed.stdout + failed.stderr
