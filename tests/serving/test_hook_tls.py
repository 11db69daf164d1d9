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
import socket
import ssl
import threading
import time

import pytest
import requests

from devcluster.pki import LOCAL_HOSTS
from hooks import serving
from hooks.credentials import Authority, dns_names
from tests.support.hook_server import HookServer, start_failure
from worlds.envelope import hook_request

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


# Stalled connections: a peer with no token and no certificate opens more connections than the worker has
# threads and stalls each, somewhere before its request could be refused. Metacontroller's call is answered
# all the same, and the server closes each stalled connection by its deadline: one for the handshake and
# the head together, so a byte dripped now and then (each read within any per-read timeout) does not
# keep it open either.
FEW_THREADS = 2
STALLS = FEW_THREADS + 2
CLIENT_TIMEOUT = 2  # NODEWARDEN_CLIENT_TIMEOUT_SECONDS of these servers
KEEPALIVE = 3  # and gunicorn's keepalive: how long a connection with no byte of a request is kept
FEW_THREADS_ENV = {"NODEWARDEN_THREADS": str(FEW_THREADS), "NODEWARDEN_CLIENT_TIMEOUT_SECONDS": str(CLIENT_TIMEOUT),
                   "GUNICORN_CMD_ARGS": f"--keep-alive {KEEPALIVE}"}
HEAD = b"POST /node-detacher/sync HTTP/1.1\r\nHost: nodewarden\r\nContent-Type: application/json\r\n"


@pytest.fixture(scope="module")
def few_threads(world):
    with HookServer(world["tmp"] / "few-threads", env={**world["env"], **FEW_THREADS_ENV}) as running:
        yield running


@pytest.fixture(scope="module")
def few_threads_plain(world):
    """The same without TLS: a bearer token over plain HTTP."""
    env = {"NODEWARDEN_AUTH_TOKEN_FILES": world["secret"].path("token"), "NODEWARDEN_REQUIRE_AUTH": "true",
           **FEW_THREADS_ENV}
    with HookServer(world["tmp"] / "few-threads-plain", env=env) as running:
        yield running


class Stall:
    """One connection that stalls; ``closed`` is set once the server has closed it."""

    def __init__(self, server, world, kind: str, tls: bool):
        self.kind, self.closed = kind, threading.Event()
        self.sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        if kind == "client-hello-byte":
            self.sock.sendall(b"\x16")  # the first byte of a TLS handshake record
        elif kind != "nothing":
            if tls:
                self.sock = ssl.create_default_context(cafile=world["ca"]).wrap_socket(
                    self.sock, server_hostname="localhost")
            if kind == "handshake-then-nothing":
                pass  # a client's spare connection: idle, like a kept-alive one
            elif kind == "headers-never-end":
                self.sock.sendall(HEAD)
            elif kind == "kept-alive-then-drip":
                self.sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: nodewarden\r\n\r\n")
                assert b"200 OK" in self.sock.recv(65536)
            elif kind == "body-never-comes":
                self.sock.sendall(HEAD + b"Content-Length: 1000000\r\n\r\n{")
        threading.Thread(target=self._drip if "drip" in kind else self._watch, daemon=True).start()

    def _drip(self) -> None:
        """One byte of a head every half of the client timeout, until the server closes the connection."""
        try:
            for byte in (HEAD * 100):
                self.sock.sendall(bytes([byte]))
                time.sleep(CLIENT_TIMEOUT / 4)
        except OSError:
            self.closed.set()

    def _watch(self) -> None:
        try:
            while self.sock.recv(65536):
                pass  # an answer (the 401 of a refused call) before the close
        except OSError:
            pass
        self.closed.set()

    def close(self) -> None:
        self.sock.close()


def _stalled(server, world, kind: str, tls: bool = True) -> list[Stall]:
    return [Stall(server, world, kind, tls) for _ in range(STALLS)]


@pytest.mark.parametrize("kind,counted", [
    ("nothing", "stalled"), ("client-hello-byte", "stalled"), ("headers-never-end", "stalled"),
    ("header-drip", "stalled"), ("kept-alive-then-drip", "stalled"), ("body-never-comes", "missing"),
    ("handshake-then-nothing", None)])
def test_stalled_tls_connections_keep_metacontroller_out_of_no_call(few_threads, world, kind, counted):
    before = {reason: few_threads.metric("nodewarden_hook_auth_refused_total", reason=reason)
              for reason in ("stalled", "missing")}
    stalls = _stalled(few_threads, world, kind)
    try:
        # Metacontroller's hook timeout is 10 s: the call must be answered within it, stalls or not.
        assert _post(few_threads, world, token="sesame").status_code == 200
        for stall in stalls:
            assert stall.closed.wait(KEEPALIVE + 20), f"the server closes a connection stalled at {kind}"
    finally:
        for stall in stalls:
            stall.close()
    for reason, count in before.items():
        expected = count + (STALLS if reason == counted else 0)
        assert few_threads.metric("nodewarden_hook_auth_refused_total", reason=reason) == expected, reason


@pytest.mark.parametrize("kind", ["nothing", "headers-never-end", "header-drip", "kept-alive-then-drip",
                                  "body-never-comes"])
def test_stalled_plain_http_connections_keep_no_call_out(few_threads_plain, world, kind):
    stalls = _stalled(few_threads_plain, world, kind, tls=False)
    try:
        reply = requests.post(few_threads_plain.url("/node-detacher/sync", scheme="http"), json=BODY, timeout=10,
                              headers={"Authorization": "Bearer sesame"})
        assert reply.status_code == 200
        for stall in stalls:
            assert stall.closed.wait(KEEPALIVE + 20), f"the server closes a connection stalled at {kind}"
    finally:
        for stall in stalls:
            stall.close()


def test_a_head_larger_than_any_metacontrollers_is_refused_with_431(few_threads, world):
    before = few_threads.metric("nodewarden_hook_auth_refused_total", reason="head-too-large")
    with socket.create_connection(("127.0.0.1", few_threads.port), timeout=10) as raw:
        with ssl.create_default_context(cafile=world["ca"]).wrap_socket(raw, server_hostname="localhost") as conn:
            conn.sendall(HEAD + b"X-Filler: " + b"x" * (serving.MAX_HEAD_BYTES + 1024))
            answer = b""
            while chunk := conn.recv(65536):
                answer += chunk
    assert answer.startswith(b"HTTP/1.1 431 ")
    assert few_threads.metric("nodewarden_hook_auth_refused_total", reason="head-too-large") == before + 1


def test_metacontrollers_calls_share_one_kept_alive_connection(server, world):
    """One connection serves call after call, as Go's client keeps it when the server lets it."""
    with requests.Session() as session:
        for _ in range(3):
            reply = session.post(server.url("/node-detacher/sync"), json=BODY, timeout=10, verify=world["ca"],
                                 headers={"Authorization": "Bearer sesame"})
            assert reply.status_code == 200 and reply.headers.get("Connection", "keep-alive") == "keep-alive"
        pools = session.get_adapter(server.url("/")).poolmanager.pools
        assert [pools[key].num_connections for key in pools.keys()] == [1]


def test_a_refused_call_says_it_closes_its_connection_and_the_next_call_goes_on_another(server, world):
    """A refused call's body is not read, so its connection closes after the answer; the answer says so
    (``Connection: close``), so a client sends its next request on a new connection instead of one the
    server is closing: refused then accepted, on one client, both answered."""
    with requests.Session() as session:
        for token, code in (("wrong", 401), ("wrong", 401), ("sesame", 200), ("wrong", 401), ("sesame", 200)):
            reply = session.post(server.url("/node-detacher/sync"), json=BODY, timeout=10, verify=world["ca"],
                                 headers={"Authorization": f"Bearer {token}"})
            assert reply.status_code == code, reply.text
            if code == 401:
                assert reply.headers.get("Connection") == "close"
