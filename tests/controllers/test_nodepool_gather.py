"""The NodePool controller's gather of a provisioning round: a failed read is the round's error, never a crash."""
from __future__ import annotations

from hooks.contract import COMPOSITE, HookRequest
from hooks.controllers import nodepool
from tests.fixtures.make_machines import pool_obj
from tests.support.provisioning import NOW, raw_pod
from worlds.fake_kube import FakeKube


def test_a_failed_read_of_the_pending_pods_volumes_is_the_rounds_error(make_ctx):
    kube = FakeKube()
    kube.add_pod(raw_pod("db-0", volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}}]))
    kube.refused.add(("list", "PersistentVolumeClaim"))
    ctx = make_ctx({"NODEWARDEN_CLUSTER_NAME": ""}, now=NOW, kube=kube)
    request = HookRequest(COMPOSITE, "v2", parent=pool_obj(None), verified=True)
    observed = nodepool.gather(request, ctx, NOW)
    assert "provisioning" not in observed
    assert observed["provisioningError"].startswith("API server: ") and "refused" in observed["provisioningError"]
