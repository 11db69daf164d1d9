"""Render and apply manifests: Metacontroller's CRDs and our dev overlay.

Hook URLs: the dev overlay keeps the in-cluster Service URL that the base
writes (`https://nodewarden.nodewarden-system.svc/<controller>/<hook>`), and
`point_hooks_at` rewrites the scheme and host of every webhook URL of every
DecoratorController/CompositeController to the local hook server (and the
host of the `endpointConfigs` entry that names the Service with them).
`drop_unknown_fields` removes what the running Metacontroller's CRDs do not
declare (v1.5.20 has neither `version` on hooks nor `endpointConfigs`). Doing it
after `kustomize build` keeps it generic: kustomize replacements fail on a
controller that lacks one of the listed hook fields, and they cannot iterate
over the keys of `spec.hooks`, while controllers differ in the hooks they use.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Iterable, NamedTuple
from urllib.parse import urlsplit, urlunsplit

import yaml

from .layout import Layout
from .metacontroller import Build

CONTROLLER_KINDS = ("DecoratorController", "CompositeController")
GO_ENV = {"GOTOOLCHAIN": "local", "GOSUMDB": "off", "GONOSUMDB": "*", "GOFLAGS": "-mod=readonly"}


def kustomize_build(layout: Layout, overlay: Path | None = None) -> list[dict]:
    out = subprocess.run(
        [str(layout.binary("kustomize")), "build", str(overlay or layout.dev_overlay)],
        check=True, capture_output=True, text=True,
    ).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def _webhooks(obj: dict) -> Iterable[dict]:
    for hook in ((obj.get("spec") or {}).get("hooks") or {}).values():
        webhook = (hook or {}).get("webhook")
        if isinstance(webhook, dict):
            yield webhook


def point_hooks_at(docs: list[dict], base_url: str) -> list[dict]:
    """Send every controller's webhooks to ``base_url``, keeping each path; an ``endpointConfigs``
    entry for the host the URLs named follows them (Metacontroller matches entries by URL host)."""
    base = urlsplit(base_url)
    for obj in docs:
        if obj.get("kind") not in CONTROLLER_KINDS:
            continue
        hosts = set()
        for webhook in _webhooks(obj):
            if webhook.get("url"):
                url = urlsplit(webhook["url"])
                hosts |= {url.netloc, url.hostname}
                webhook["url"] = urlunsplit((base.scheme, base.netloc, url.path, url.query, ""))
            elif webhook.get("service"):
                # A Service reference with a path: same endpoint, local address.
                path = webhook.pop("path", "") or ""
                webhook.pop("service")
                webhook["url"] = urlunsplit((base.scheme, base.netloc, path, "", ""))
        for entry in (obj.get("spec") or {}).get("endpointConfigs") or []:
            if entry.get("host") in hosts:
                entry["host"] = base.netloc
    return docs


def controller_schemas(crd_docs: list[dict]) -> dict[str, dict]:
    """The openAPIV3Schema of each Metacontroller controller kind, from its CRD."""
    schemas = {}
    for crd in crd_docs:
        kind = crd.get("spec", {}).get("names", {}).get("kind")
        if kind in CONTROLLER_KINDS:
            for version in crd["spec"].get("versions", []):
                schema = version.get("schema", {}).get("openAPIV3Schema")
                if schema:
                    schemas[kind] = schema
    return schemas


def unknown_fields(value, schema: dict, path: str = "") -> list[str]:
    """Paths in ``value`` that ``schema`` does not declare (what the API server would refuse or prune)."""
    if not isinstance(schema, dict) or schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    if isinstance(value, dict):
        if "properties" in schema:
            found = []
            for key, item in value.items():
                if key in schema["properties"]:
                    found += unknown_fields(item, schema["properties"][key], f"{path}.{key}")
                else:
                    found.append(f"{path}.{key}")
            return found
        if isinstance(schema.get("additionalProperties"), dict):
            return [p for key, item in value.items()
                    for p in unknown_fields(item, schema["additionalProperties"], f"{path}.{key}")]
        return []
    if isinstance(value, list):
        return [p for i, item in enumerate(value) for p in unknown_fields(item, schema.get("items", {}), f"{path}[{i}]")]
    return []


def drop_unknown_fields(docs: list[dict], crd_docs: list[dict]) -> list[str]:
    """Remove from every controller the fields the running Metacontroller's CRDs lack; say which."""
    schemas = controller_schemas(crd_docs)
    dropped = []
    for obj in docs:
        schema = schemas.get(obj.get("kind"))
        if schema is None:
            continue
        for path in sorted(unknown_fields(obj, schema)):
            if _remove(obj, path):
                dropped.append(f"{obj['kind']}/{obj['metadata']['name']} {path.lstrip('.')}")
    return dropped


def _remove(obj: dict, path: str) -> bool:
    """Delete the field at a ``.a.b[0].c`` path."""
    parts = [p for p in path.replace("[", ".[").split(".") if p]
    node = obj
    for part in parts[:-1]:
        node = node[int(part[1:-1])] if part.startswith("[") else node[part]
    return node.pop(parts[-1], None) is not None


def to_yaml(docs: Iterable[dict]) -> str:
    return yaml.safe_dump_all(list(docs), sort_keys=False)


def module_source_dir(layout: Layout, source: Path | None, module: str, record: Path) -> Path:
    """The source of the module a binary was built from (``module@version``, as ``record``
    names it), in the Go module cache."""
    if source and source.is_dir():
        return source
    if not module:
        raise FileNotFoundError(f"{record} names no module")
    # The module cache was cleaned since the build: fetch that version again.
    env = {**os.environ, **GO_ENV}
    downloaded = json.loads(subprocess.run(
        ["go", "mod", "download", "-json", module],
        cwd=layout.bin_dir, env=env, capture_output=True, text=True,
    ).stdout or "{}")
    if not downloaded.get("Dir"):
        raise FileNotFoundError(f"cannot download {module}: {downloaded.get('Error', 'no answer')}")
    return Path(downloaded["Dir"])


def metacontroller_crds(layout: Layout, build: Build) -> list[dict]:
    """The CRDs of the Metacontroller release that was built, from its own module."""
    source = module_source_dir(layout, build.source, build.module, layout.metacontroller_record)
    production = source / "manifests" / "production"
    files = sorted(p for p in production.glob("*crds*.yaml") if "v1beta1" not in p.name)
    if not files:
        raise FileNotFoundError(f"no Metacontroller CRDs under {production}")
    docs: list[dict] = []
    for path in files:
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


# Other projects' CRDs, read from their Go modules as each project publishes
# them (hack/crds/go.mod pins the releases); none of their controllers runs
# here. The launcher installs CAPA's (AWSCluster, AWSManagedControlPlane: what
# cluster-gc acts on). Karpenter's and Cluster API's (the owners fencing asks
# to replace a node) are installed by what needs them (devcluster/owners.py),
# and removed after: their NodePool and Machine share plural names with
# nodewarden's, and `kubectl get nodepools,machines` would name theirs.
CAPA_CRD_FILES = {
    "awsclusters.infrastructure.cluster.x-k8s.io": "infrastructure.cluster.x-k8s.io_awsclusters.yaml",
    "awsmanagedcontrolplanes.controlplane.cluster.x-k8s.io": "controlplane.cluster.x-k8s.io_awsmanagedcontrolplanes.yaml",
}
KARPENTER_CRD_FILES = {
    "nodeclaims.karpenter.sh": "karpenter.sh_nodeclaims.yaml",
    "nodepools.karpenter.sh": "karpenter.sh_nodepools.yaml",
}
CAPI_CRD_FILES = {
    "machines.cluster.x-k8s.io": "cluster.x-k8s.io_machines.yaml",
    "machinesets.cluster.x-k8s.io": "cluster.x-k8s.io_machinesets.yaml",
    "machinedeployments.cluster.x-k8s.io": "cluster.x-k8s.io_machinedeployments.yaml",
}


class UpstreamCrds(NamedTuple):
    module: str  # the Go module, pinned in hack/crds/go.mod
    directory: str  # where its CRDs are in the module
    files: dict[str, str]  # CRD name -> its file there


CAPA_CRDS = UpstreamCrds("sigs.k8s.io/cluster-api-provider-aws/v2", "config/crd/bases", CAPA_CRD_FILES)
KARPENTER_CRDS = UpstreamCrds("sigs.k8s.io/karpenter", "pkg/apis/crds", KARPENTER_CRD_FILES)
CAPI_CRDS = UpstreamCrds("sigs.k8s.io/cluster-api", "core/config/crd/bases", CAPI_CRD_FILES)
UPSTREAM_CRDS = (CAPA_CRDS, KARPENTER_CRDS, CAPI_CRDS)
MODULE_DIR = Path("hack") / "crds" / "module-dir.sh"


def upstream_module_dir(layout: Layout, module: str) -> Path:
    """Where ``module``'s pinned release is in the Go module cache (downloaded through the module proxy
    when absent)."""
    result = subprocess.run([str(layout.repo / MODULE_DIR), module], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{module} from the Go module proxy: {result.stderr.strip()}")
    return Path(result.stdout.strip())


def upstream_crds(layout: Layout, *sets: UpstreamCrds) -> list[dict]:
    """The CRDs of ``sets`` as their projects publish them, less any conversion webhook.

    Cluster API serves v1beta1 and v1beta2 of its kinds and converts between
    them in its own webhook, which its release manifests add to the CRDs; no
    webhook runs here, so the API server keeps the default conversion (None:
    the apiVersion alone changes), and the stack's clients use each kind's
    stored version.
    """
    docs: list[dict] = []
    for module, directory, files in sets:
        crd_dir = upstream_module_dir(layout, module) / directory
        for name, file in files.items():
            crd = yaml.safe_load((crd_dir / file).read_text())
            if crd["metadata"]["name"] != name:
                raise ValueError(f"{crd_dir / file} defines {crd['metadata']['name']}, not {name}")
            crd["spec"].pop("conversion", None)
            docs.append(crd)
    return docs


CONTROLLER_KINDS = ("DecoratorController", "CompositeController")


def split_controllers(docs: list[dict]) -> tuple[list[dict], list[dict]]:
    """(everything else, the Metacontroller controllers): controllers go last, once the kinds they watch exist."""
    rest = [d for d in docs if d.get("kind") not in CONTROLLER_KINDS]
    return rest, [d for d in docs if d.get("kind") in CONTROLLER_KINDS]
