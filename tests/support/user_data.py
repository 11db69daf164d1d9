"""User data as a Machine renders it, for the tests of the devcluster kubelet stand-in."""
from __future__ import annotations

from hooks.machines import names


def default_user_data(cluster: str = "devcluster", machine: str = "pool-abc12", pool: str = "pool", *,
                      labels: str | None = None, taints: str | None = None) -> str:
    """The Machines' default user-data template, rendered by hand as a Machine would
    (what the devcluster kubelet stand-in reads)."""
    node_labels = labels or f"{names.MACHINE_LABEL}={machine},{names.POOL_LABEL}={pool}"
    register_with_taints = taints or f"{names.UNREGISTERED_TAINT}=true:{names.UNREGISTERED_EFFECT}"
    kubelet_args = f"--node-labels={node_labels} --register-with-taints={register_with_taints}"
    return ("#!/bin/bash\n"
            "set -euo pipefail\n"
            f"# Joins {cluster} as machine {machine} of node pool {pool}.\n"
            f"/etc/eks/bootstrap.sh '{cluster}' --kubelet-extra-args '{kubelet_args}'\n")
