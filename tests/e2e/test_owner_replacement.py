"""A fenced node is replaced by its owner, end to end on the local stack.

One wave, shared by every test of this file so the failures overlap in time:
a Node for each owner (a Karpenter NodeClaim, an EC2 Auto Scaling group in
moto, a Cluster API Machine, none), each selected by a NodeFencingPolicy of
its own with a 2 s duration, and two groups of two Nodes that fail together
(the guard's cases: an Auto Scaling group, a Karpenter NodePool). Every Node dies at once (out of kwok's selector), the node
lifecycle controller turns each Ready Unknown, nodewarden powers each
instance off in moto and recovers, and then asks the owner to replace the
node.

Karpenter's and Cluster API's controllers do not run locally (only their
CRDs, from their Go modules: devcluster/owners.py), and moto's Auto Scaling
launches no replacement for an unhealthy instance. So what is asserted is the
request as the owner's API records it: the NodeClaim deleted (held by
Karpenter's termination finalizer, as Karpenter would hold it while it
drains), the instance's HealthStatus Unhealthy in the group, the Machine's
conditions as a MachineHealthCheck sets them. The unattributed node stays
powered off, with the NodeUnattributed Event; in a group whose two Nodes
died together, the group's unhealthy share holds both replacements back.
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

import pytest

from devcluster import failover, owners
from devcluster.api import AdminApi, wait_for
from devcluster.owners import OwnedNode

pytestmark = pytest.mark.e2e

# Each wait's deadline: the power-off and recovery take a second or two after the duration, the request
# itself one more hook call; the slack is for a machine running other tests.
DEADLINE = 60
# The guard's groups of two: an Auto Scaling group, a Karpenter NodePool.
HELD = ("held-asg", "held-pool")
# An annotation written only to make Metacontroller sync a Node now.
TOUCHED = "e2e.nodewarden.io/touched"


@dataclass
class Wave:
    """The failed Nodes by scenario, and their policies."""

    api: AdminApi
    namespace: str
    nodes: dict[str, list[OwnedNode]] = field(default_factory=dict)
    policies: list[str] = field(default_factory=list)

    def one(self, scenario: str) -> OwnedNode:
        (owned,) = self.nodes[scenario]
        return owned

    def request(self, owned: OwnedNode) -> dict | None:
        return self.api.get_or_none(f"{failover.REQUESTS}/fence-{owned.node}")

    def _until(self, owned: OwnedNode, ctype: str, statuses: tuple[str, ...]) -> dict:
        """The node's FencingRequest once its ``ctype`` condition has one of ``statuses``; a timeout says what
        the request's status was."""
        seen = {}

        def check():
            seen["request"] = request = self.request(owned)
            return owners.condition(request, ctype).get("status") in statuses and request
        try:
            return wait_for(check, f"{owned.node}'s {ctype} {'|'.join(statuses)}", timeout=DEADLINE, interval=0.5)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the request's status: {(seen['request'] or {}).get('status')}") from None

    def recovered(self, owned: OwnedNode) -> dict:
        """Once fencing powered the instance off and recovered."""
        return self._until(owned, "Recovered", ("True",))

    def replacement(self, owned: OwnedNode) -> tuple[dict, dict]:
        """Once the replacement was decided: (the FencingRequest, its OwnerReplacement condition)."""
        request = self._until(owned, "OwnerReplacement", ("True", "False"))
        return request, owners.condition(request, "OwnerReplacement")

    def events(self, reason: str, owned: OwnedNode) -> list[dict]:
        """Events of ``reason`` about the node or its FencingRequest, in any namespace."""
        names = {owned.node, f"fence-{owned.node}"}
        return [e for e in self.api.get("/api/v1/events")["items"]
                if e.get("reason") == reason and e["involvedObject"].get("name") in names]


@pytest.fixture(scope="module")
def owner_crds(cluster):
    owners.install_crds(cluster)
    yield
    owners.remove_crds(cluster)


@pytest.fixture(scope="module")
def wave(cluster, api, cloud, owner_crds):
    """Every scenario's Nodes made and Ready, each single Node's policy, then every Node killed together.

    The guard's groups get their policies once every Node is Unknown (as
    test_fencing.py's storm test does), so a group's two are fenced together:
    a Node fenced while the other still beat would rightly be replaced alone. Nodes
    that died before their policy came are synced again only at
    NODEWARDEN_NODE_RESYNC_SECONDS; a write to each makes Metacontroller sync
    it at once."""
    namespace = f"e2e-owners-{uuid.uuid4().hex[:6]}"
    api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    wave = Wave(api, namespace)
    suffix = uuid.uuid4().hex[:6]

    def labels(scenario: str) -> dict:
        return {failover.SCENARIO_LABEL: f"{scenario}-{suffix}"}

    def police(scenario: str) -> None:
        name = f"{scenario}-{suffix}"
        # The guard's groups: fencing both is allowed (the policy's maxUnhealthy), replacing both is not.
        api.create(failover.POLICIES, owners.policy(name, name, duration="2s",
                                                    max_unhealthy=len(wave.nodes[scenario]),
                                                    replacement={"mode": "Owner", "maxUnhealthy": "40%",
                                                                 "maxReplacing": 1}))
        wave.policies.append(name)

    try:
        wave.nodes["nodeclaim"] = [owners.nodeclaim_node(api, cloud, f"e2e-nc-{suffix}", f"e2e-pool-{suffix}",
                                                         labels("nodeclaim"))]
        wave.nodes["asg"] = owners.asg_nodes(api, cloud, f"e2e-asg-{suffix}", 1, labels("asg"))
        wave.nodes["capi"] = [owners.capi_machine_node(api, cloud, namespace, f"e2e-capi-{suffix}",
                                                       labels("capi"))]
        wave.nodes["unattributed"] = [owners.unattributed_node(api, cloud, f"e2e-none-{suffix}",
                                                               labels("unattributed"))]
        wave.nodes["held-asg"] = owners.asg_nodes(api, cloud, f"e2e-held-{suffix}", 2, labels("held-asg"))
        wave.nodes["held-pool"] = [owners.nodeclaim_node(api, cloud, f"e2e-held-nc{i}-{suffix}",
                                                         f"e2e-held-pool-{suffix}", labels("held-pool"))
                                   for i in range(2)]
        everything = [o for group in wave.nodes.values() for o in group]
        owners.wait_ready(api, everything)
        for scenario in ("nodeclaim", "asg", "capi", "unattributed"):
            police(scenario)
        failover.kill(api, [o.node for o in everything])
        for scenario in HELD:
            police(scenario)

        def fencing_requested() -> bool:
            """Each held Node written until it has its FencingRequest: node-fencing reads the policies
            through a cache of NODEWARDEN_FENCING_POLICY_CACHE_SECONDS (2 s), so the first sync may not
            see the policy yet."""
            waiting = [o for scenario in HELD for o in wave.nodes[scenario] if wave.request(o) is None]
            for owned in waiting:
                api.patch(f"/api/v1/nodes/{owned.node}", {"metadata": {"annotations": {TOUCHED: str(time.time())}}})
            return not waiting
        wait_for(fencing_requested, "the held groups' FencingRequests", timeout=30, interval=1)
        yield wave
    finally:
        for name in wave.policies:
            api.delete(f"{failover.POLICIES}/{name}")
        for group in wave.nodes.values():
            for owned in group:
                owners.delete(api, cloud, owned)
        api.delete(f"/api/v1/namespaces/{namespace}")


def test_the_owners_crds_are_served_from_their_projects_modules(api, owner_crds):
    for crds in owners.OWNER_CRDS:
        for name in crds.files:
            crd = api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
            assert conditions.get("Established") == "True" and conditions.get("NonStructuralSchema") != "True", name
            assert "conversion" not in crd["spec"] or crd["spec"]["conversion"]["strategy"] == "None", name


def test_a_nodeclaims_node_is_replaced_by_deleting_the_nodeclaim(wave, cloud):
    owned = wave.one("nodeclaim")
    wave.recovered(owned)
    assert owners.instance_state(cloud, owned.instance_id) == "stopped"
    request, decided = wave.replacement(owned)
    assert (decided["status"], decided["reason"]) == ("True", "NodeClaimDeleted"), decided
    replacement = request["status"]["replacement"]
    assert replacement["owner"]["kind"] == "NodeClaim" and replacement["owner"]["name"] == owned.owner
    assert replacement["owner"]["uid"] == owned.uid and replacement.get("requestedTime")
    # Karpenter's finalizer holds it, as Karpenter would while it terminates the instance.
    claim = owners.nodeclaim(wave.api, owned.owner)
    assert claim is not None and claim["metadata"].get("deletionTimestamp"), claim
    assert claim["metadata"]["uid"] == owned.uid
    assert wave.events("OwnerReplacementRequested", owned)


def test_an_auto_scaling_groups_instance_is_marked_unhealthy(wave, cloud):
    owned = wave.one("asg")
    wave.recovered(owned)
    request, decided = wave.replacement(owned)
    assert (decided["status"], decided["reason"]) == ("True", "InstanceMarkedUnhealthy"), decided
    owner = request["status"]["replacement"]["owner"]
    assert (owner["kind"], owner["name"]) == ("AutoScalingGroup", owned.owner)
    assert owners.group_health(cloud, owned.owner) == {owned.instance_id: "Unhealthy"}
    assert owners.instance_state(cloud, owned.instance_id) == "stopped"


def test_a_cluster_api_machine_carries_the_remediation_conditions(wave, cloud):
    owned = wave.one("capi")
    wave.recovered(owned)
    request, decided = wave.replacement(owned)
    assert (decided["status"], decided["reason"]) == ("True", "RemediationRequested"), decided
    owner = request["status"]["replacement"]["owner"]
    assert (owner["kind"], owner["name"], owner["namespace"]) == ("ClusterAPIMachine", owned.owner, owned.namespace)
    machine = owners.capi_machine(wave.api, owned.namespace, owned.owner)
    assert machine["metadata"]["uid"] == owned.uid
    # What a MachineHealthCheck writes (Cluster API v1.14.2, v1beta2 conditions): the Machine's owner, its
    # MachineSet, deletes a Machine whose OwnerRemediated is False.
    for ctype in ("HealthCheckSucceeded", "OwnerRemediated"):
        cond = owners.condition(machine, ctype)
        assert cond.get("status") == "False" and cond.get("reason") and cond.get("lastTransitionTime"), (ctype, cond)
    assert owners.condition(machine, "OwnerRemediated")["message"] == "Waiting for remediation"
    assert owners.condition(machine, "Ready").get("status") == "True", "the rest of its status is left as it was"


def test_an_unattributed_node_stays_powered_off_with_an_event(wave, cloud):
    owned = wave.one("unattributed")
    wave.recovered(owned)
    _, decided = wave.replacement(owned)
    assert (decided["status"], decided["reason"]) == ("False", "Unattributed"), decided
    assert owners.instance_state(cloud, owned.instance_id) == "stopped"
    assert wave.events("NodeUnattributed", owned)


@pytest.mark.parametrize("scenario", [
    "held-asg",
    "held-pool"])
def test_a_group_with_too_many_unhealthy_members_is_held(wave, cloud, scenario):
    """Both Nodes of a group of two died: 2 unhealthy > max(1, 40 % of 2), so neither is replaced."""
    group = wave.nodes[scenario]
    decided = {}
    for owned in group:
        wave.recovered(owned)
        request, condition = wave.replacement(owned)
        decided[owned.node] = (condition["status"], condition["reason"], request["status"]["replacement"])
    assert {n: d[:2] for n, d in decided.items()} == {o.node: ("False", "GroupUnhealthy") for o in group}, decided
    assert all(d[2].get("heldReason") for d in decided.values()), decided
    if scenario == "held-asg":
        assert set(owners.group_health(cloud, group[0].owner).values()) == {"Healthy"}
    else:
        assert all(not owners.nodeclaim(wave.api, o.owner)["metadata"].get("deletionTimestamp") for o in group)
    assert any(wave.events("OwnerReplacementHeld", owned) for owned in group)
