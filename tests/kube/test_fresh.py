"""What the hooks re-read from the API server: only the kinds they know, at plain versions (hooks/kube/fresh.py)."""
from __future__ import annotations

import pytest


def test_fresh_reads_only_known_kinds_at_plain_versions():
    from hooks.kube import fresh

    class NoCalls:
        def get(self, *a, **k):
            raise AssertionError("must not be read")

    for body in ({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "x", "uid": "u"}},
                 {"kind": ["AWSCluster"], "metadata": {"name": "x", "uid": "u"}},
                 {"kind": "AWSCluster", "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2/../../secrets",
                  "metadata": {"name": "x", "uid": "u"}},
                 {"kind": "AWSCluster", "apiVersion": "other.group.io/v1", "metadata": {"name": "x", "uid": "u"}},
                 {"kind": "Node", "apiVersion": "v1", "metadata": {"name": "x"}}):
        with pytest.raises(fresh.Unverified):
            fresh.same_object(NoCalls(), body)
