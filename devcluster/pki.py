"""Keys and certificates for a local control plane, made with `cryptography`.

One CA signs the API server's serving certificate and the admin client
certificate; a separate RSA key signs ServiceAccount tokens. The hook server
gets its own CA (``hook_credentials``): its serving certificate, a client
certificate for Metacontroller and a bearer token. Everything is throw-away:
a new cluster gets new keys.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from hooks.credentials import Authority, dns_names, key_pem, new_token, write_private


@dataclass(frozen=True)
class Pki:
    """Paths of every file the control plane needs."""

    dir: Path

    @property
    def ca_cert(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.dir / "ca.key"

    @property
    def serving_cert(self) -> Path:
        return self.dir / "apiserver.crt"

    @property
    def serving_key(self) -> Path:
        return self.dir / "apiserver.key"

    @property
    def admin_cert(self) -> Path:
        return self.dir / "admin.crt"

    @property
    def admin_key(self) -> Path:
        return self.dir / "admin.key"

    @property
    def sa_key(self) -> Path:
        return self.dir / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.dir / "sa.pub"


def generate(directory: Path) -> Pki:
    """Create a fresh CA, serving and admin certificates, and the SA signing key."""
    pki = Pki(Path(directory))
    pki.dir.mkdir(parents=True, exist_ok=True)

    authority = Authority.create("nodewarden-devcluster-ca")
    write_private(pki.ca_key, key_pem(authority.key))
    authority.write_cert(pki.ca_cert)
    authority.issue(pki.serving_cert, pki.serving_key, "kube-apiserver", server=True,
                    sans=dns_names("localhost", "kubernetes", "kubernetes.default.svc", "127.0.0.1"))
    # system:masters is the group the API server always authorizes fully.
    authority.issue(pki.admin_cert, pki.admin_key, "devcluster-admin", org="system:masters")

    # ServiceAccount tokens are signed with RS256 by default.
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    write_private(pki.sa_key, key_pem(sa_key))
    pki.sa_pub.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pki


LOCAL_HOSTS = ("localhost", "127.0.0.1")


@dataclass(frozen=True)
class HookCredentials:
    """What the hook server and Metacontroller need for authenticated HTTPS hooks."""

    dir: Path
    client_name: str = "metacontroller"

    ca_cert = property(lambda self: self.dir / "ca.crt")
    serving_cert = property(lambda self: self.dir / "tls.crt")
    serving_key = property(lambda self: self.dir / "tls.key")
    client_cert = property(lambda self: self.dir / "client.crt")
    client_key = property(lambda self: self.dir / "client.key")
    token = property(lambda self: self.dir / "token")

    def server_env(self) -> dict[str, str]:
        """The hook server's settings that turn TLS and both proofs on."""
        return {"NODEWARDEN_TLS_CERT_FILE": str(self.serving_cert), "NODEWARDEN_TLS_KEY_FILE": str(self.serving_key),
                "NODEWARDEN_TLS_CLIENT_CA_FILE": str(self.ca_cert),
                "NODEWARDEN_TLS_CLIENT_NAMES": self.client_name,
                "NODEWARDEN_AUTH_TOKEN_FILES": str(self.token), "NODEWARDEN_REQUIRE_AUTH": "true"}


def hook_credentials(directory: Path, hosts=LOCAL_HOSTS) -> HookCredentials:
    """What ``nodewarden credentials`` makes for a cluster, as files for a local hook server, plus a
    client certificate for Metacontroller from the same CA."""
    creds = HookCredentials(Path(directory))
    creds.dir.mkdir(parents=True, exist_ok=True)
    authority = Authority.create("nodewarden-hooks-ca")
    authority.write_cert(creds.ca_cert)
    authority.issue(creds.serving_cert, creds.serving_key, "nodewarden-hooks", server=True, sans=dns_names(*hosts))
    authority.issue(creds.client_cert, creds.client_key, creds.client_name)
    write_private(creds.token, new_token().encode())
    return creds
