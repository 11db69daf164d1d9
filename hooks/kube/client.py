"""A lazily connected lightkube client that fails clearly when no API is reachable."""
from __future__ import annotations

import threading
from typing import Any, Iterable, Iterator

import httpx2 as httpx
from lightkube import Client
from lightkube.config.kubeconfig import KubeConfig
from lightkube.core.exceptions import ApiError, ConfigError
from lightkube.types import PatchType

from hooks.kube import decoding

decoding.install()  # before any thread of this process decodes a typed resource

FIELD_MANAGER = "nodewarden"
# What `kubectl get` asks for: the server-side printed columns instead of the objects.
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


class KubeUnavailable(RuntimeError):
    """No Kubernetes API configured or reachable; the action is retried later."""


def is_not_found(exc: BaseException) -> bool:
    return isinstance(exc, ApiError) and exc.status.code == 404


def is_missing(exc: BaseException) -> bool:
    """No such object, or no such resource type: an API server without the CRD answers a plain-text 404, which
    lightkube raises as httpx's HTTP error, not an ApiError."""
    return is_not_found(exc) or (isinstance(exc, httpx.HTTPStatusError) and exc.response is not None
                                 and exc.response.status_code == 404)


class Kube:
    """Thin wrapper: one client per process, created on first use."""

    def __init__(self, client: Client | None = None, timeout: float = 3.0):
        self._client = client
        self._timeout = timeout
        self._lock = threading.Lock()

    @property
    def client(self) -> Client:
        with self._lock:
            if self._client is None:
                try:
                    config = KubeConfig.from_env()
                except (ConfigError, OSError, ValueError) as exc:
                    raise KubeUnavailable(f"no Kubernetes configuration: {exc}") from exc
                self._client = Client(
                    config, timeout=httpx.Timeout(self._timeout), field_manager=FIELD_MANAGER
                )
            return self._client

    def call(self, fn_name: str, *args: Any, **kwargs: Any) -> Any:
        """Run a client method, turning transport failures into KubeUnavailable."""
        try:
            return getattr(self.client, fn_name)(*args, **kwargs)
        except httpx.TransportError as exc:
            raise KubeUnavailable(f"Kubernetes API unreachable: {exc}") from exc

    # Generic verbs on lightkube resource classes -------------------------
    def get(self, res, name: str, namespace: str | None = None):
        return self.call("get", res, name, namespace=namespace)

    def list(self, res, namespace: str | None = None, labels=None, fields=None) -> list:
        return list(self.call("list", res, namespace=namespace, labels=labels, fields=fields))

    def merge_patch(self, res, name: str, patch: dict, namespace: str | None = None):
        return self.call("patch", res, name, patch, namespace=namespace, patch_type=PatchType.MERGE)

    def json_patch(self, res, name: str, ops: Iterable[dict], namespace: str | None = None):
        return self.call("patch", res, name, list(ops), namespace=namespace, patch_type=PatchType.JSON)

    def delete(self, res, name: str, namespace: str | None = None, grace_period: int | None = None):
        return self.call("delete", res, name, namespace=namespace, grace_period=grace_period)

    def delete_with_options(self, res, name: str, options: dict, namespace: str | None = None):
        """DELETE with a DeleteOptions body, for ``preconditions`` (lightkube's delete sends none).

        A force delete names the pod's uid, so a StatefulSet's replacement,
        which has the same name, can never be the pod that goes.
        """
        generic = self.client._client  # lightkube's request builder; its public delete has no body
        request = generic.prepare_request("delete", res=res, name=name, namespace=namespace)
        request.data = {"apiVersion": "v1", "kind": "DeleteOptions", **options}
        try:
            response = generic.send(generic.build_adapter_request(request))
        except httpx.TransportError as exc:
            raise KubeUnavailable(f"Kubernetes API unreachable: {exc}") from exc
        generic.raise_for_status(response)

    def table(self, res, labels: str = "", page_size: int = 500) -> Iterator[dict]:
        """The rows of a list as the API server prints it (``kubectl get``), a page at a time.

        A Table without the objects (``includeObject=None``) carries a few
        short cells per object instead of the object: for Nodes about 150
        bytes each, where the full Node is 13 KB and its metadata alone 2 KB.
        Each row comes back as ``{column name: cell}``. lightkube has no
        Table support, so the request is built here, as in
        ``delete_with_options``.
        """
        generic = self.client._client
        params = {"labelSelector": labels or None, "limit": page_size, "includeObject": "None"}
        while True:
            request = generic.prepare_request("list", res=res, params=params, headers={"Accept": TABLE})
            try:
                response = generic.send(generic.build_adapter_request(request))
            except httpx.TransportError as exc:
                raise KubeUnavailable(f"Kubernetes API unreachable: {exc}") from exc
            generic.raise_for_status(response)
            page = response.json()
            if not isinstance(page, dict) or page.get("kind") != "Table":
                raise ValueError(f"asked for a Table, the API server answered {type(page).__name__} "
                                 f"{page.get('kind') if isinstance(page, dict) else ''}".rstrip())
            columns = [c.get("name") for c in page.get("columnDefinitions") or []]
            for row in page.get("rows") or []:
                yield dict(zip(columns, row.get("cells") or []))
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return
            params = {**params, "continue": token}

    def create(self, obj, name: str | None = None, namespace: str | None = None):
        return self.call("create", obj, name, namespace=namespace)
