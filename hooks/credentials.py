"""Credentials for authenticated hooks: a one-shot generator of the Secrets the kustomize base uses.

    nodewarden credentials [all|token|tls] [--namespace NS] [--service NAME]
                           [--previous-token FILE] [--trust-also CA.pem] | kubectl apply -f -

- ``nodewarden-hook-token`` (key ``token``): the bearer token Metacontroller
  sends (its controllers' ``authorization.secretRef``) and the hook server
  accepts. ``--previous-token`` keeps the old token accepted as ``previous``
  while Metacontroller still sends it (rotation, docs/safety.md).
- ``nodewarden-hook-tls`` (``tls.crt``, ``tls.key``, ``ca.crt``): the hook
  server's certificate for ``<service>.<namespace>.svc`` from a CA made for
  it alone; ``ca.crt`` is what Metacontroller verifies the server with (its
  ``caBundle.secretRef``). ``--trust-also`` appends an old CA to ``ca.crt``
  so a certificate rotation never leaves Metacontroller unable to verify.

The certificates are made with ``cryptography``, imported only here: the hook
server itself never needs it. The local stack makes its certificates with the
same functions (devcluster/pki.py).
"""
from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path

TOKEN_SECRET = "nodewarden-hook-token"
TLS_SECRET = "nodewarden-hook-tls"
CA_VALIDITY = dt.timedelta(days=10 * 365)
CERT_VALIDITY = dt.timedelta(days=365)


def _x509():
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    return x509, hashes, serialization, ec, ExtendedKeyUsageOID, NameOID


def name(common_name: str, org: str | None = None):
    x509, *_, NameOID = _x509()
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def dns_names(*names: str) -> list:
    """Subject alternative names: DNS names, and IP addresses where a name is one."""
    x509 = _x509()[0]
    sans = []
    for entry in names:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(entry)))
        except ValueError:
            sans.append(x509.DNSName(entry))
    return sans


def issue(subject, public_key, issuer_name, issuer_key, *, ca=False, usages=(), sans=(), validity=CERT_VALIDITY,
          not_after: dt.datetime | None = None):
    """A signed certificate; ``not_after`` in the past makes an expired one (for tests)."""
    x509, hashes, *_ = _x509()
    now = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=5)
    not_after = not_after or now + validity
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer_name).public_key(public_key)
               .serial_number(x509.random_serial_number())
               .not_valid_before(min(now, not_after - dt.timedelta(hours=1))).not_valid_after(not_after)
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
            key_encipherment=False, data_encipherment=False, key_agreement=False, encipher_only=False,
            decipher_only=False), critical=True)
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def key_pem(key) -> bytes:
    serialization = _x509()[2]
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def cert_pem(cert) -> bytes:
    return cert.public_bytes(_x509()[2].Encoding.PEM)


def write_private(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    path.chmod(0o600)
    return path


@dataclass(frozen=True)
class Authority:
    """A CA that issues serving and client certificates."""

    name: object
    key: object
    cert: object

    @classmethod
    def create(cls, common_name: str) -> "Authority":
        ec = _x509()[3]
        key = ec.generate_private_key(ec.SECP256R1())
        subject = name(common_name)
        return cls(subject, key, issue(subject, key.public_key(), subject, key, ca=True, validity=CA_VALIDITY))

    def pem(self) -> bytes:
        return cert_pem(self.cert)

    def write_cert(self, path: Path) -> Path:
        path.write_bytes(self.pem())
        return path

    def pair(self, common_name: str, *, server: bool = False, org: str | None = None, sans=(),
             not_after: dt.datetime | None = None) -> tuple[bytes, bytes]:
        """(certificate PEM, key PEM) of a serving (``server``) or client certificate."""
        _, _, _, ec, usage, _ = _x509()
        key = ec.generate_private_key(ec.SECP256R1())
        cert = issue(name(common_name, org), key.public_key(), self.name, self.key,
                     usages=[usage.SERVER_AUTH if server else usage.CLIENT_AUTH], sans=list(sans),
                     not_after=not_after)
        return cert_pem(cert), key_pem(key)

    def issue(self, cert_path: Path, key_path: Path, common_name: str, **kwargs) -> tuple[Path, Path]:
        """``pair`` written to two files."""
        cert, key = self.pair(common_name, **kwargs)
        cert_path.write_bytes(cert)
        write_private(key_path, key)
        return cert_path, key_path


def new_token() -> str:
    return secrets.token_urlsafe(32)


def service_names(service: str, namespace: str) -> tuple[str, ...]:
    """Every name Metacontroller may use for the hook Service (the base's URLs use the .svc one)."""
    return (f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local", f"{service}.{namespace}")


def tls_files(hosts, trust_also: bytes = b"") -> dict[str, bytes]:
    """A new CA and a serving certificate for ``hosts``: the keys of a kubernetes.io/tls Secret plus ca.crt."""
    authority = Authority.create("nodewarden-hooks-ca")
    cert, key = authority.pair("nodewarden-hooks", server=True, sans=dns_names(*hosts))
    bundle = authority.pem() + (b"\n" + trust_also.strip() + b"\n" if trust_also.strip() else b"")
    return {"tls.crt": cert, "tls.key": key, "ca.crt": bundle}


def secret_manifest(secret_name: str, namespace: str, data: dict[str, bytes], secret_type: str = "Opaque") -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "type": secret_type,
            "metadata": {"name": secret_name, "namespace": namespace,
                         "labels": {"app.kubernetes.io/name": "nodewarden", "app.kubernetes.io/part-of": "nodewarden"}},
            "stringData": {k: v.decode() for k, v in data.items()}}


def token_secret(namespace: str, token: str, previous: str = "") -> dict:
    data = {"token": token.encode()}
    if previous.strip():
        data["previous"] = previous.strip().encode()
    return secret_manifest(TOKEN_SECRET, namespace, data)


def tls_secret(namespace: str, files: dict[str, bytes]) -> dict:
    return secret_manifest(TLS_SECRET, namespace, files, "kubernetes.io/tls")


def generate(args) -> int:
    import yaml

    docs = []
    if args.what in ("all", "token"):
        previous = Path(args.previous_token).read_text() if args.previous_token else ""
        docs.append(token_secret(args.namespace, new_token(), previous))
    if args.what in ("all", "tls"):
        trust_also = Path(args.trust_also).read_bytes() if args.trust_also else b""
        docs.append(tls_secret(args.namespace, tls_files(service_names(args.service, args.namespace), trust_also)))
    sys.stdout.write(yaml.safe_dump_all(docs, sort_keys=False))
    return 0


def add_parser(sub) -> None:
    cp = sub.add_parser("credentials", help="print the Secrets that let only Metacontroller call the hooks",
                        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cp.add_argument("what", nargs="?", choices=["all", "token", "tls"], default="all")
    cp.add_argument("--namespace", default="nodewarden-system")
    cp.add_argument("--service", default="nodewarden", help="the hook server's Service (its certificate's name)")
    cp.add_argument("--previous-token", metavar="FILE", help="keep this token accepted as 'previous'")
    cp.add_argument("--trust-also", metavar="CA.pem", help="append this CA to ca.crt (certificate rotation)")
    cp.set_defaults(func=generate)
