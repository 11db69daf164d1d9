"""The DecoratorController ``node`` takes Nodes over from node-detacher and node-fencing (the real Metacontroller).

The local stack runs only ``node``; a Node as the two old decorators left it
is made by hand: node-detacher's finalizer on it, and an Attachment owned by
the Node and claimed by node-detacher (which kept one for every Node). Metacontroller removes a decorator's finalizer only through
that decorator's finalize, so without the hand-over the Node could never be
deleted.
"""
from __future__ import annotations

import pytest

from devcluster import fleet
from devcluster.api import wait_for
from tests.e2e.conftest import ATTACHMENTS

pytestmark = pytest.mark.e2e

CLAIM = "metacontroller.k8s.io/decorator-controller"
OLD = "metacontroller.io/decoratorcontroller-node-detacher"
NEW = fleet.NODE_FINALIZER
JSON_PATCH = "application/json-patch+json"


def test_a_node_left_by_the_old_decorators_is_handed_over_and_can_be_deleted(make_world, api):
    world = make_world(count=1)
    (name,) = world.nodes
    path = f"/api/v1/nodes/{name}"
    wait_for(lambda: NEW in (world.node(name)["metadata"].get("finalizers") or []), "the node controller's finalizer",
             timeout=30)
    node = world.node(name)
    api.create(ATTACHMENTS, {
        "apiVersion": "nodewarden.io/v1alpha1", "kind": "Attachment",
        "metadata": {"name": name, "annotations": {CLAIM: "node-detacher"},
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name,
                                          "uid": node["metadata"]["uid"], "controller": True,
                                          "blockOwnerDeletion": True}]},
        "spec": {"nodeName": name, "instanceID": world.nodes[name], "awsTargets": [], "awsLoadBalancers": []}})
    api.patch(path, [{"op": "add", "path": "/metadata/finalizers/-", "value": OLD}], content_type=JSON_PATCH)
    assert OLD in world.node(name)["metadata"]["finalizers"]
    # Any change of the Node makes Metacontroller sync it.
    api.patch(path, {"metadata": {"annotations": {"e2e.nodewarden.io/poke": "1"}}})

    wait_for(lambda: OLD not in (world.node(name)["metadata"].get("finalizers") or []),
             "node-detacher's finalizer off the Node", timeout=30)
    # Claimed for ``node``, whose answer for a serving Node then drops it: Metacontroller deletes only
    # what its controller claims, so either way it was handed over.
    def handed_over() -> bool:
        found = world.attachment(name)
        return found is None or found["metadata"]["annotations"].get(CLAIM) == "node"

    wait_for(handed_over, "the Attachment claimed by node", timeout=30)
    assert NEW in world.node(name)["metadata"]["finalizers"]

    api.delete(path)
    wait_for(lambda: api.get_or_none(path) is None, "Node gone", timeout=60)
    wait_for(lambda: world.attachment(name) is None, "Attachment gone", timeout=30)
