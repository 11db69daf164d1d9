"""A real local Kubernetes control plane with Metacontroller, moto and the hooks.

Built binaries come from hack/controlplane/ (`make controlplane-bins`);
`make up` runs `python -m devcluster up`, and tests/e2e uses `Cluster`.
"""
from .cluster import Cluster, MissingBinaries
from .layout import Layout

__all__ = ["Cluster", "Layout", "MissingBinaries"]
