"""A node's owners as the API server holds them: Karpenter NodeClaims and Cluster API Machines."""
from __future__ import annotations

import copy

from hooks.owner_names import CAPI_DEPLOYMENT_LABEL, KARPENTER_NODEPOOL_LABEL

CAPI_NAMESPACE = "capi-system"


def nodeclaim(name: str, uid: str, provider_id: str, node: str, pool: str = "general") -> dict:
    """A karpenter.sh/v1 NodeClaim registered as ``node`` for the instance of ``provider_id``."""
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name, "uid": uid, "labels": {KARPENTER_NODEPOOL_LABEL: pool}},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                     "requirements": []},
            "status": {"providerID": provider_id, "nodeName": node}}


def capi_machine(name: str, uid: str, node: str | None = "n1", *, owner: dict | None = None, deployment: str = "",
                 status: dict | None = None, namespace: str = CAPI_NAMESPACE, **metadata) -> dict:
    """A cluster.x-k8s.io/v1beta2 Machine holding ``node`` (none when None), controlled by ``owner``
    ({kind, name, uid}) and labelled for the MachineDeployment ``deployment`` when given."""
    meta = {"name": name, "namespace": namespace, "uid": uid, "generation": 3, "resourceVersion": "7", **metadata}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": owner["kind"],
                                    "name": owner["name"], "uid": owner["uid"], "controller": True,
                                    "blockOwnerDeletion": True}]
    if deployment:
        meta["labels"] = {CAPI_DEPLOYMENT_LABEL: deployment}
    st = copy.deepcopy(status) if status is not None else {"phase": "Running"}
    if node:
        st["nodeRef"] = {"name": node}
    return {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "metadata": meta,
            "spec": {"clusterName": "c1", "bootstrap": {"dataSecretName": "b"}, "providerID": f"aws:///z/i-{uid}",
                     "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "AWSMachine",
                                           "name": name}},
            "status": st}
