"""The DecoratorController ``node`` takes Nodes over from node-detacher and node-fencing (the real Metacontroller).

The local stack runs only ``node``; a Node as the two old decorators left it
is made by hand: node-detacher's finalizer on it, and its Attachment claimed
by node-detacher. Metacontroller removes a decorator's finalizer only through
that decorator's finalize, so without the hand-over the Node could never be
deleted.
"""
from __future__ import annotations

import pytest

from devcluster.api import wait_for
from tests.e2e.conftest import ATTACHMENTS

pytestmark = pytest.mark.e2e

CLAIM = "metacontroller.k8s.io/decorator-controller"
OLD = "metacontroller.io/decoratorcontroller-node-detacher"
NEW = "metacontroller.io/decoratorcontroller-node"
JSON_PATCH = "application/json-patch+json"


def test_a_node_left_by_the_old_decorators_is_handed_over_and_can_be_deleted(make_world, api):
    world = make_world(count=1)
    (name,) = world.nodes
    path = f"/api/v1/nodes/{name}"
    wait_for(lambda: NEW in (world.node(name)["metadata"].get("finalizers") or []), "the node controller's finalizer",
             timeout=30)
    api.patch(f"{ATTACHMENTS}/{name}", {"metadata": {"annotations": {CLAIM: "node-detacher"}}})
    api.patch(path, [{"op": "add", "path": "/metadata/finalizers/-", "value": OLD}], content_type=JSON_PATCH)
    assert OLD in world.node(name)["metadata"]["finalizers"]
    # Any change of the Node makes Metacontroller sync it.
    api.patch(path, {"metadata": {"annotations": {"e2e.nodewarden.io/poke": "1"}}})

    wait_for(lambda: OLD not in (world.node(name)["metadata"].get("finalizers") or []),
             "node-detacher's finalizer off the Node", timeout=30)
    assert world.attachment(name)["metadata"]["annotations"][CLAIM] == "node"
    assert NEW in world.node(name)["metadata"]["finalizers"]

    api.delete(path)
    wait_for(lambda: api.get_or_none(path) is None, "Node gone", timeout=60)
    wait_for(lambda: world.attachment(name) is None, "Attachment gone with it", timeout=30)
