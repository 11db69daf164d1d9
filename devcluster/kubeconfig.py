"""Kubeconfig files: one for the admin (client certificate), one per token user."""
from __future__ import annotations

import base64
from pathlib import Path

import yaml

CONTEXT = "devcluster"


def _b64(path: Path) -> str:
    return base64.b64encode(Path(path).read_bytes()).decode()


def _document(server: str, ca_cert: Path, user_name: str, user: dict) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": CONTEXT, "cluster": {"server": server, "certificate-authority-data": _b64(ca_cert)}}
        ],
        "users": [{"name": user_name, "user": user}],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": user_name}}],
        "current-context": CONTEXT,
    }


def _write(path: Path, document: dict) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    path.chmod(0o600)
    return path


def write_admin(path: Path, server: str, ca_cert: Path, client_cert: Path, client_key: Path) -> Path:
    user = {"client-certificate-data": _b64(client_cert), "client-key-data": _b64(client_key)}
    return _write(path, _document(server, ca_cert, "admin", user))


def write_token(path: Path, server: str, ca_cert: Path, user_name: str, token: str) -> Path:
    return _write(path, _document(server, ca_cert, user_name, {"token": token}))
