"""kwok plays the kubelet of the local stack's Nodes: Ready, a renewed Lease,
pods that run. Taken out of its selector a Node dies as a silent kubelet's does
(the node lifecycle controller turns Ready Unknown); kwok writes only the
conditions it knows, so other writers' conditions, labels and spec stay.
"""
from __future__ import annotations

import ipaddress
import time
import uuid

import pytest

from devcluster import fleet, kwok
from devcluster.api import STRATEGIC, wait_for
from devcluster.failover import epoch

pytestmark = pytest.mark.e2e

NODES = "/api/v1/nodes"
# A condition no controller here owns, as node-fencing's and node-detacher's are to kwok.
MARKER = {"type": "E2EMarker", "status": "True", "reason": "Test", "message": "kwok must leave it",
          "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}
TAINT = {"key": "e2e.nodewarden.io/kept", "value": "yes", "effect": "NoSchedule"}


def _node(api, cloud, prefix: str, **spec) -> str:
    (instance,) = fleet.launch_instances(cloud, 1)
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    manifest = fleet.node_manifest(name, instance)
    manifest["spec"].update(spec)
    api.create(NODES, manifest)
    return name


def _condition(node: dict, ctype: str) -> dict:
    return next((c for c in node["status"].get("conditions") or [] if c["type"] == ctype), {})


def _renewal(api, name: str) -> str:
    return api.get(f"{kwok.LEASES}/{name}")["spec"]["renewTime"]


def test_a_node_is_ready_through_kwok_and_dies_when_taken_out_of_its_selector(api, cloud):
    name = _node(api, cloud, "kwok", unschedulable=True, taints=[TAINT])
    try:
        node = kwok.wait_ready(api, name)
        assert kwok.ready(node)["reason"] == "KubeletReady"
        assert node["status"]["phase"] == "Running"
        lease = api.get(f"{kwok.LEASES}/{name}")
        assert lease["spec"]["leaseDurationSeconds"] == kwok.FAST.lease_seconds
        assert lease["spec"]["holderIdentity"] != name, "kwok holds it under its own identity"
        assert lease["metadata"]["ownerReferences"][0]["uid"] == node["metadata"]["uid"]

        # Another writer's condition and another label: kwok goes on renewing.
        api.patch(f"{NODES}/{name}/status", {"status": {"conditions": [MARKER]}}, content_type=STRATEGIC)
        api.patch(f"{NODES}/{name}", {"metadata": {"labels": {"e2e.nodewarden.io/other": "changed"}}})
        before = _renewal(api, name)
        wait_for(lambda: _renewal(api, name) != before, "a renewal after the label change",
                 timeout=kwok.FAST.lease_seconds, interval=0.2)

        # Out of kwok's selector: no renewal any more, and Unknown after the grace period.
        kwok.release(api, name)
        released = time.time()
        unknown = kwok.wait_unknown(api, name)
        took = epoch(unknown["lastTransitionTime"]) - released
        # The last renewal may have come up to one renewal interval before the release.
        assert took >= kwok.FAST.grace_seconds - kwok.FAST.renewal_seconds - 1, took
        node = api.get(f"{NODES}/{name}")
        assert unknown["reason"] == "NodeStatusUnknown"
        assert _condition(node, "E2EMarker") == MARKER

        # Back in kwok's hands: Ready again, since now; the rest as it was.
        kwok.manage(api, name)
        node = kwok.wait_ready(api, name)
        back = kwok.ready(node)
        assert epoch(back["lastTransitionTime"]) >= epoch(unknown["lastTransitionTime"]), \
            "Ready since before the node died, not since it came back"
        assert _condition(node, "E2EMarker") == MARKER
        assert node["spec"]["unschedulable"] is True
        assert TAINT in node["spec"]["taints"]
        assert node["metadata"]["labels"]["e2e.nodewarden.io/other"] == "changed"
    finally:
        api.delete(f"{NODES}/{name}")


def test_kwok_runs_the_pods_bound_to_its_nodes(api, cloud, namespace):
    name = _node(api, cloud, "kwok-pods")
    pods = f"/api/v1/namespaces/{namespace}/pods"
    try:
        kwok.wait_ready(api, name)
        api.create(pods, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "app"},
                          "spec": {"nodeName": name,
                                   "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}})
        def running():
            pod = api.get(f"{pods}/app")
            return pod["status"].get("phase") == "Running" and pod
        pod = wait_for(running, "the pod Running", timeout=30)
        assert _condition(pod, "Ready")["status"] == "True"
        assert ipaddress.ip_address(pod["status"]["podIP"]) in ipaddress.ip_network(kwok.POD_CIDR)
        assert pod["status"]["hostIP"] == kwok.NODE_IP

        # Deleted with the default 30 s grace period, gone as soon as kwok sees it.
        api.delete(f"{pods}/app")
        wait_for(lambda: api.get_or_none(f"{pods}/app") is None, "the pod gone", timeout=10)
    finally:
        api.delete(f"{NODES}/{name}")


def test_a_node_its_kubelet_posts_not_ready_stays_so_until_it_posts_ready(api, cloud):
    name = _node(api, cloud, "kwok-kubelet")
    try:
        kwok.wait_ready(api, name)
        time.sleep(1.5)  # so that the transition's second differs from the Node's creation
        kwok.post_ready(api, name, False)
        time.sleep(3)  # kwok's node-initialize, were it drawn, would have posted Ready=True by now
        ready = kwok.ready(api.get(f"{NODES}/{name}"))
        assert (ready["status"], ready["reason"]) == ("False", kwok.KUBELET_NOT_READY)
        # The kubelet is alive all along: its Lease is still renewed.
        before = _renewal(api, name)
        wait_for(lambda: _renewal(api, name) != before, "a renewal", timeout=kwok.FAST.lease_seconds, interval=0.2)
        assert kwok.ready(api.get(f"{NODES}/{name}"))["status"] == "False"

        kwok.post_ready(api, name, True)
        back = kwok.ready(api.get(f"{NODES}/{name}"))
        assert back["status"] == "True" and back["lastTransitionTime"] >= ready["lastTransitionTime"]
    finally:
        api.delete(f"{NODES}/{name}")


def test_the_not_ready_label_makes_a_live_node_report_not_ready(api, cloud):
    name = _node(api, cloud, "kwok-notready")
    try:
        kwok.wait_ready(api, name)
        api.patch(f"{NODES}/{name}/status", {"status": {"conditions": [MARKER]}}, content_type=STRATEGIC)
        time.sleep(1.5)  # so that now and the Node's creation differ in their seconds
        api.patch(f"{NODES}/{name}", {"metadata": {"labels": {kwok.NOT_READY_LABEL: "true"}}})

        def not_ready():
            node = api.get(f"{NODES}/{name}")
            return kwok.ready(node).get("status") == "False" and node
        node = wait_for(not_ready, "Ready=False", timeout=30)
        ready = kwok.ready(node)
        assert ready["reason"] == "nodeFailed"
        assert ready["lastTransitionTime"] > node["metadata"]["creationTimestamp"], "NotReady since its creation"
        assert _condition(node, "E2EMarker") == MARKER
        # Said once: kwok does not patch the same NotReady again and again.
        time.sleep(3)
        assert kwok.ready(api.get(f"{NODES}/{name}")) == ready
        # The kubelet is alive all along: its Lease is still renewed.
        before = _renewal(api, name)
        wait_for(lambda: _renewal(api, name) != before, "a renewal", timeout=kwok.FAST.lease_seconds, interval=0.2)

        api.patch(f"{NODES}/{name}", {"metadata": {"labels": {kwok.NOT_READY_LABEL: None}}})
        node = kwok.wait_ready(api, name)
        assert kwok.ready(node)["lastTransitionTime"] >= ready["lastTransitionTime"]
        assert _condition(node, "E2EMarker") == MARKER
    finally:
        api.delete(f"{NODES}/{name}")
