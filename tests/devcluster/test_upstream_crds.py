"""Other projects' CRDs for the local stack: pinned in hack/crds/go.mod, read from their Go modules.

CAPA's (cluster-gc), Karpenter's and Cluster API's (the owners fencing asks
to replace a node) as each project publishes them, with no conversion
webhook: none runs on the local stack. The API server's side (the CRDs
Established, objects accepted, the CRDs removed after) is
tests/e2e/test_owner_replacement.py's.
"""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from devcluster import manifests
from devcluster.layout import REPO, Layout

GO_MOD = REPO / "hack" / "crds" / "go.mod"
PINNED = {"sigs.k8s.io/cluster-api-provider-aws/v2": "v2.13.0", "sigs.k8s.io/karpenter": "v1.14.0",
          "sigs.k8s.io/cluster-api": "v1.14.2"}


def _needs_go() -> None:
    """The modules come through `go mod download`: without Go the test cannot run (CI has it: it builds the
    control plane with it)."""
    if shutil.which("go") is None:
        if os.environ.get("NODEWARDEN_E2E") == "required":
            pytest.fail("Go is not on PATH")
        pytest.skip("Go is not on PATH")


@pytest.fixture(scope="module")
def crds() -> dict[str, dict]:
    _needs_go()
    return {crd["metadata"]["name"]: crd for crd in manifests.upstream_crds(Layout(), *manifests.UPSTREAM_CRDS)}


def test_go_mod_pins_each_module_and_go_sum_holds_its_hashes():
    required = {}
    for line in GO_MOD.read_text().splitlines():
        words = line.split()
        if len(words) == 2 and words[0] in PINNED:
            required[words[0]] = words[1]
    assert required == PINNED
    assert {module for module, _, _ in manifests.UPSTREAM_CRDS} == set(PINNED)
    go_sum = (REPO / "hack" / "crds" / "go.sum").read_text()
    for module, version in PINNED.items():
        assert f"{module} {version} h1:" in go_sum and f"{module} {version}/go.mod h1:" in go_sum, module


def test_every_named_crd_loads_with_its_served_and_stored_versions(crds):
    named = {**manifests.CAPA_CRD_FILES, **manifests.KARPENTER_CRD_FILES, **manifests.CAPI_CRD_FILES}
    assert set(crds) == set(named)
    for name, crd in crds.items():
        assert crd["kind"] == "CustomResourceDefinition" and crd["apiVersion"] == "apiextensions.k8s.io/v1", name
        versions = crd["spec"]["versions"]
        assert sum(1 for v in versions if v.get("storage")) == 1, name
        assert all(v["schema"]["openAPIV3Schema"]["type"] == "object" for v in versions), name
    stored = {name: next(v["name"] for v in crd["spec"]["versions"] if v.get("storage")) for name, crd in crds.items()}
    # The versions hooks/owner_names.py reads and writes: Karpenter's v1, Cluster API's v1beta2.
    assert stored["nodeclaims.karpenter.sh"] == stored["nodepools.karpenter.sh"] == "v1"
    assert {stored[n] for n in manifests.CAPI_CRD_FILES} == {"v1beta2"}


def test_no_crd_asks_for_a_conversion_webhook(crds):
    assert all("conversion" not in crd["spec"] for crd in crds.values())


def test_the_owner_fields_fencing_reads_and_writes_are_in_the_schemas(crds):
    """What tests/e2e/test_owner_replacement.py and the replacement phase rely on, as the projects define it."""
    def schema(name: str, version: str) -> dict:
        crd = crds[name]
        return next(v for v in crd["spec"]["versions"] if v["name"] == version)["schema"]["openAPIV3Schema"]

    def versioned(name: str, version: str) -> dict:
        return next(v for v in crds[name]["spec"]["versions"] if v["name"] == version)

    claim = schema("nodeclaims.karpenter.sh", "v1")["properties"]
    assert {"providerID", "nodeName"} <= set(claim["status"]["properties"])
    assert versioned("nodeclaims.karpenter.sh", "v1").get("subresources", {}).get("status") == {}
    machine = schema("machines.cluster.x-k8s.io", "v1beta2")["properties"]
    assert "providerID" in machine["spec"]["properties"]
    assert "nodeRef" in machine["status"]["properties"] and "conditions" in machine["status"]["properties"]
    assert versioned("machines.cluster.x-k8s.io", "v1beta2").get("subresources", {}).get("status") == {}


def test_a_module_not_pinned_is_refused_with_its_name():
    _needs_go()
    result = subprocess.run([str(REPO / manifests.MODULE_DIR), "sigs.k8s.io/not-pinned"],
                            capture_output=True, text=True)
    assert result.returncode == 1 and "no version of sigs.k8s.io/not-pinned" in result.stderr
    with pytest.raises(RuntimeError, match="sigs.k8s.io/not-pinned"):
        manifests.upstream_module_dir(Layout(), "sigs.k8s.io/not-pinned")
