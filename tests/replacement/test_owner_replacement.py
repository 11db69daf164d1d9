"""Replacement by the node's owner: the rules (owners, guard, spec) and the fencing-request phase, on
observed fixtures (what gather would have read), decided by the pure decide()."""
from __future__ import annotations

import copy
import datetime as dt
import json
import pathlib

import pytest

from hooks import owner_names
from hooks.contract import RequestError
from hooks.plan import PRECONDITION, Action, Outcome
from hooks.fencing.request_phases import replacement
from hooks.replacement import guard, owners, spec
from tests.fixtures import make_fencing as mf
from tests.fixtures.writer import decide_case

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
PROVIDER_ID = f"aws:///us-east-1a/{mf.INSTANCE}"
NOW = dt.datetime(2026, 11, 21, 12, 0, 0, tzinfo=dt.timezone.utc)


# --------------------------------------------------------------------------- objects


def dead_node(labels=None, annotations=None, ready_status="Unknown", since=120):
    return mf.node(conditions=[mf.ready(ready_status, since)], labels=labels, annotations=annotations,
                   taints=[mf.OOS_TAINT])


def nodeclaim(name="default-abcde", pool="default", provider=PROVIDER_ID, node_name=mf.NODE, deleting=False,
              uid=None):
    meta = {"name": name, "uid": uid or f"uid-{name}", "labels": {owner_names.KARPENTER_NODEPOOL_LABEL: pool}}
    if deleting:
        meta["deletionTimestamp"] = mf.at(5)
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": meta,
            "status": {"providerID": provider, "nodeName": node_name}}


def capi_machine(name="workers-abc", ns="capi", node_name=mf.NODE, provider=PROVIDER_ID, machineset="workers-ms",
                 node_ready="False", remediated=None, deleting=False):
    conditions = [{"type": "NodeReady", "status": node_ready, "reason": "x", "lastTransitionTime": mf.at(100)}]
    if remediated is not None:
        conditions.append({"type": "OwnerRemediated", "status": remediated, "reason": "WaitingForRemediation",
                           "lastTransitionTime": mf.at(10)})
    meta = {"name": name, "namespace": ns, "uid": f"uid-{name}",
            "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet",
                                 "name": machineset, "uid": "uid-ms", "controller": True}]}
    if deleting:
        meta["deletionTimestamp"] = mf.at(5)
    return {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "metadata": meta,
            "spec": {"providerID": provider} if provider else {},
            "status": {"nodeRef": {"name": node_name}, "conditions": conditions}}


def asg_member(instance=mf.INSTANCE, group="workers-asg", state="InService", health="Healthy"):
    return {"instanceId": instance, "group": group, "lifecycleState": state, "health": health}


def asg_group(members, name="workers-asg"):
    return {"name": name, "min": 1, "max": 10, "desired": len(members),
            "instances": [{k: m[k] for k in ("instanceId", "lifecycleState", "health")} for m in members]}


KARPENTER = {owner_names.KARPENTER_NODEPOOL_LABEL: "default"}
CAPI = {owner_names.CAPI_MACHINE_ANNOTATION: "workers-abc", owner_names.CAPI_CLUSTER_NAMESPACE_ANNOTATION: "capi"}
ASG_TAGS = {**mf.CLUSTER_TAG, owner_names.ASG_NAME_TAG: "workers-asg"}


# --------------------------------------------------------------------------- owners


def owner_cases():
    return sorted(FIXTURES.glob("owners-*.json"))


@pytest.mark.parametrize("path", owner_cases(), ids=[p.stem for p in owner_cases()])
def test_owner_attribution_fixtures(path):
    case = json.loads(path.read_text())
    assert case["description"]
    found = owners.attribute(case["node"], case["proofs"])
    assert (found.to_dict() if found else None) == case["expected"]


def test_a_forged_nodepool_label_with_no_nodeclaim_is_unattributed():
    node = dead_node(labels=KARPENTER)
    assert owners.to_read(node, {}) == {"nodeClaims": PROVIDER_ID}
    assert owners.attribute(node, {"nodeClaims": []}) is None


def test_a_nodeclaim_with_another_provider_id_is_not_the_owner():
    node = dead_node(labels=KARPENTER)
    other = nodeclaim(provider="aws:///us-east-1a/i-0fffffffffffffff0")
    assert owners.attribute(node, {"nodeClaims": [other]}) is None
    assert owners.attribute(node, {"nodeClaims": [nodeclaim(node_name="someone-else")]}) is None


def test_two_nodeclaims_claiming_one_node_cannot_tell_which_owns_it():
    node = dead_node(labels=KARPENTER)
    with pytest.raises(owners.Unreadable, match=r"\(a, b\) name this node"):
        owners.attribute(node, {"nodeClaims": [nodeclaim("a"), nodeclaim("b")]})
    assert owners.attribute(node, {"nodeClaims": [nodeclaim("a"), nodeclaim("b", node_name="elsewhere")]}).name == "a"


def test_instance_tags_that_could_not_be_read_are_not_no_owner():
    with pytest.raises(owners.Unreadable, match="Throttling"):
        owners.attribute(dead_node(), {"instanceError": "Throttling: Rate exceeded"})
    machine = {"metadata": {"name": "m-1", "uid": "uid-m-1"},
               "status": {"nodeName": mf.NODE, "nodeUID": mf.NODE_UID, "instanceID": mf.INSTANCE}}
    proven = owners.attribute(dead_node(labels={"nodewarden.io/machine": "m-1"}),
                              {"machine": machine, "instanceError": "Throttling: Rate exceeded"})
    assert proven.kind == owner_names.OWNER_MACHINE, "an owner proven without the tags needs none"


@pytest.mark.parametrize("proofs, named", [
    ({"nodeClaims": [nodeclaim("a"), nodeclaim("b")]}, "(a, b)"),
    ({"instanceError": "RequestLimitExceeded: Request limit exceeded."}, "RequestLimitExceeded"),
], ids=["two nodeclaims", "tags unread"])
def test_what_cannot_be_told_waits_and_terminates_nothing(proofs, named):
    labels = KARPENTER if "nodeClaims" in proofs else None
    result = decide(request_of(dead_node(labels=labels), recovered_status(), unattributed="Terminate"),
                    observed_with(proofs))
    assert condition(result)["reason"] == "Error" and named in replacement_of(result)["lastError"]
    assert "ec2.terminate" not in kinds(result) and "outcome" not in replacement_of(result)
    assert not any(e["reason"] == "NodeUnattributed" for e in result["events"])


def test_a_capi_machine_whose_node_ref_names_another_node_is_not_the_owner():
    node = dead_node(annotations=CAPI)
    assert owners.attribute(node, {"capiMachine": capi_machine(node_name="ip-10-9-9-9.ec2.internal")}) is None
    assert owners.attribute(node, {"capiMachine": capi_machine(provider="aws:///us-east-1a/i-0aaaaaaaaaaaaaaa0")}) \
        is None
    found = owners.attribute(node, {"capiMachine": capi_machine(provider="")})
    assert found.kind == owner_names.OWNER_CAPI_MACHINE and found.group == "capi/MachineSet/workers-ms"


def test_an_asg_tag_is_only_a_hint():
    node = dead_node()
    assert owners.to_read(node, ASG_TAGS) == {"asg": mf.INSTANCE}
    assert owners.attribute(node, {"asgInstance": None}) is None
    assert owners.attribute(node, {"asgInstance": asg_member(instance="i-0fffffffffffffff0")}) is None
    assert owners.attribute(node, {"asgInstance": asg_member()}).group == "workers-asg"


def test_an_unreadable_proof_is_not_no_owner():
    with pytest.raises(owners.Unreadable):
        owners.attribute(dead_node(labels=KARPENTER), {"nodeClaimsError": "503 Service Unavailable"})


def test_a_nodewarden_machine_is_proven_by_its_status():
    node = dead_node(labels={"nodewarden.io/machine": "m-1"})
    machine = {"metadata": {"name": "m-1", "uid": "uid-m-1", "labels": {"nodewarden.io/nodepool": "pool"}},
               "status": {"nodeName": mf.NODE, "nodeUID": mf.NODE_UID, "instanceID": mf.INSTANCE}}
    assert owners.attribute(node, {"machine": machine}).group == "pool"
    stale = copy.deepcopy(machine)
    stale["status"]["nodeUID"] = "another-uid"
    assert owners.attribute(node, {"machine": stale}) is None


# --------------------------------------------------------------------------- guard and spec


def test_spec_defaults_and_errors():
    parsed = spec.parse_replacement({"spec": {"replacement": {}}})
    assert (parsed.mode, parsed.unattributed, parsed.reboot_timeout, parsed.max_unhealthy, parsed.max_replacing) == \
        ("Owner", "Keep", 300.0, "40%", 1)
    assert spec.parse_replacement({"spec": {}}).mode == "Owner"
    assert spec.parse_replacement({"spec": {}}, absent="None").declared is False
    for bad, field in (({"mode": "Sometimes"}, "mode"), ({"maxUnhealthy": "140%"}, "maxUnhealthy"),
                       ({"rebootTimeout": "0s"}, "rebootTimeout"), ({"maxReplacing": True}, "maxReplacing")):
        with pytest.raises(RequestError) as err:
            spec.parse_replacement({"spec": {"replacement": bad}}, "related.x")
        assert err.value.args and f"related.x.spec.replacement.{field}" in str(err.value)
    assert spec.parse_replacement({"spec": {"replacement": parsed.to_dict()}}) == parsed


@pytest.mark.parametrize("total,unhealthy,held", [(1, 1, False), (2, 1, False), (4, 1, False), (4, 2, True),
                                                  (5, 2, False), (5, 3, True), (10, 4, False), (10, 5, True)])
def test_group_share_allows_one_in_small_groups(total, unhealthy, held):
    verdict = guard.verdict(guard.GroupView("g", total, unhealthy, 0), spec.ReplacementSpec(), None)
    assert verdict == (owner_names.HELD_GROUP_UNHEALTHY if held else None)


def test_budget_and_storm():
    rs = spec.ReplacementSpec()
    assert guard.verdict(guard.GroupView("g", 10, 1, 1), rs, None) == owner_names.HELD_BUDGET
    assert guard.verdict(guard.GroupView("g", 10, 1, 1), spec.ReplacementSpec(max_replacing="20%"), None) is None
    assert guard.verdict(guard.GroupView("g", 10, 1, 0), spec.ReplacementSpec(max_replacing=0), None) == \
        owner_names.HELD_BUDGET
    assert guard.verdict(guard.GroupView("g", 10, 1, 0), rs, "holding") == owner_names.HELD_STORM_GUARD
    assert guard.verdict(None, rs, None) is None


def test_storm_hold_is_judged_as_node_fencing_judges_it():
    labels = dead_node()["metadata"]["labels"]
    assert guard.storm_hold([mf.policy(status=mf.counted())], labels, NOW, 90) is None
    assert "storm guard" in guard.storm_hold([mf.policy(status=mf.counted(holds=True))], labels, NOW, 90)
    assert "older than" in guard.storm_hold([mf.policy(status=mf.counted(age=300))], labels, NOW, 90)
    assert guard.storm_hold([mf.policy(status=mf.counted(names=()))], labels, NOW, 90) is None  # fenced node gone
    assert guard.storm_hold([], labels, NOW, 90)


def test_group_view_counts_self_unhealthy_and_others_in_flight():
    me = owners.attribute(dead_node(labels=KARPENTER), {"nodeClaims": [nodeclaim()]})
    claims = [nodeclaim(), nodeclaim("b", node_name="n-b"), nodeclaim("c", node_name="n-c", deleting=True),
              nodeclaim("d", node_name="n-d")]
    read = {"nodeClaims": claims, "readiness": {"total": 4, "notReady": [mf.NODE]}}
    other = mf.fencing_request("fence-n-d", node_name="n-d", uid="uid-other", status={"replacement": {
        "owner": {"kind": "NodeClaim", "name": "d", "group": "default"}, "requestedTime": mf.at(5)}})
    view = guard.group_view(me, read, [other], "uid-fr-1")
    assert view == guard.GroupView("default", 4, 2, 2)


# --------------------------------------------------------------------------- the phase


# A place in the group's budget claimed on an earlier call: this call may ask the owner.
CLAIMED = mf.at(2)


def recovered_status(action="Off", **replacement_status):
    phase = "Succeeded"
    conditions = [mf.succeeded_cond(200),
                  {"type": "Recovered", "status": "True", "reason": "Recovered", "message": "x",
                   "lastTransitionTime": mf.at(100)}]
    status = mf.fr_status(phase, started=300, completionTime=mf.at(100), conditions=conditions,
                          providerStatus=mf.provider(stopAttempts=1, lastStopTime=mf.at(210), instanceState="stopped",
                                                     poweredOffTime=mf.at(200), nodeUID=mf.NODE_UID,
                                                     **({"startAttempts": 1, "lastStartTime": mf.at(100)}
                                                        if action == "Reboot" else {})),
                          recovery={"strategy": "OutOfServiceTaint", "startTime": mf.at(200),
                                    "completionTime": mf.at(100), "outOfServiceTaint": "Applied"})
    if replacement_status:
        status["replacement"] = replacement_status
    return status


def request_of(node, status, action="Off", **rspec):
    fr = mf.fencing_request(status=status, spec={"action": action, "replacement": {**rspec}})
    return mf.fr_request(fr, node)


def observed_with(proofs, group=None, requests=(), policies=None, **extra):
    read = {"proofs": proofs, "policies": policies if policies is not None else [mf.policy(status=mf.counted())],
            "requests": list(requests)}
    if group is not None:
        read["group"] = group
    return {"replacement": read, "instance": {"state": "stopped", "tags": mf.CLUSTER_TAG}, **extra}


def decide(request, observed, env=None):
    return decide_case("fencing-request", {"request": request, "now": mf.NOW, "observed": observed,
                                           "env": env or {}})


def replacement_of(result):
    return result["response"]["status"].get("replacement") or {}


def condition(result):
    return next((c for c in result["response"]["status"].get("conditions", []) if c["type"] == "OwnerReplacement"),
                None)


def kinds(result):
    return [a["kind"] for a in result["actions"]]


def claim_group(*claims, not_ready=(mf.NODE,)):
    return {"nodeClaims": list(claims), "readiness": {"total": len(claims), "notReady": list(not_ready)}}


def test_nodeclaim_is_deleted_with_its_uid_and_proof_read_again():
    node = dead_node(labels=KARPENTER)
    result = decide(request_of(node, recovered_status(claimTime=CLAIMED)),
                    observed_with({"nodeClaims": [nodeclaim()]}, claim_group(nodeclaim(), nodeclaim("b", node_name="n-b"))))
    delete = next(a for a in result["actions"] if a["kind"] == "kube.delete-nodeclaim")
    assert delete["target"] == "default-abcde" and delete["params"] == {"uid": "uid-default-abcde"}
    assert delete["requires"] == [{"type": "NodeClaimOf", "name": "default-abcde", "uid": "uid-default-abcde",
                                   "provider_id": PROVIDER_ID, "node_name": mf.NODE},
                                  {"type": "PoweredOff", "instance_id": mf.INSTANCE, "region": "us-east-1"}]
    assert {r["path"][-1]: r.get("value") for r in delete["record"]}["outcome"] == "NodeClaimDeleted"
    assert delete["reports"]["reason"] == "OwnerReplacementRequested"
    assert replacement_of(result)["owner"]["kind"] == "NodeClaim"
    assert condition(result) is None  # said once the delete succeeded (its record), on the next call


def test_the_recorded_outcome_becomes_the_condition_and_the_metric_once():
    node = dead_node(labels=KARPENTER)
    status = recovered_status(outcome="NodeClaimDeleted", message="deleted", requestedTime=mf.at(5),
                              owner={"kind": "NodeClaim", "name": "default-abcde", "group": "default"})
    result = decide(request_of(node, status), {})
    assert condition(result)["status"] == "True" and condition(result)["reason"] == "NodeClaimDeleted"
    assert [(a["kind"], a["target"], a["params"]) for a in result["actions"]] == \
        [("metric.owner-replacement", "NodeClaim",
          {"outcome": "NodeClaimDeleted", "request": request_of(node, status)["parent"]["metadata"]["uid"]})]
    again = decide(request_of(node, result["response"]["status"]), {})
    assert again["actions"] == [] and condition(again) == condition(result)


def test_a_pool_of_two_with_one_fenced_is_allowed():
    node = dead_node(labels=KARPENTER)
    result = decide(request_of(node, recovered_status(claimTime=CLAIMED)),
                    observed_with({"nodeClaims": [nodeclaim()]}, claim_group(nodeclaim(), nodeclaim("b", node_name="n-b"))))
    assert "kube.delete-nodeclaim" in kinds(result)


def test_group_unhealthy_holds_with_an_event():
    node = dead_node(labels=KARPENTER)
    claims = [nodeclaim(), nodeclaim("b", node_name="n-b"), nodeclaim("c", node_name="n-c"), nodeclaim("d", node_name="n-d")]
    result = decide(request_of(node, recovered_status()),
                    observed_with({"nodeClaims": [nodeclaim()]}, claim_group(*claims, not_ready=(mf.NODE, "n-b"))))
    assert "kube.delete-nodeclaim" not in kinds(result)
    assert replacement_of(result)["heldReason"] == "GroupUnhealthy"
    assert condition(result)["reason"] == "GroupUnhealthy" and condition(result)["status"] == "False"
    assert any(e["reason"] == "OwnerReplacementHeld" and e.get("warning") for e in result["events"])


def test_budget_holds_while_another_request_replaces_in_the_group():
    node = dead_node(labels=KARPENTER)
    claims = [nodeclaim(), *(nodeclaim(n, node_name=f"n-{n}") for n in "bcdefghij")]
    other = mf.fencing_request("fence-n-b", node_name="n-b", uid="uid-other", status={"replacement": {
        "owner": {"kind": "NodeClaim", "name": "b", "group": "default"}, "requestedTime": mf.at(5)}})
    result = decide(request_of(node, recovered_status()),
                    observed_with({"nodeClaims": [nodeclaim()]}, claim_group(*claims), requests=[other]))
    assert replacement_of(result)["heldReason"] == "Budget" and not result["actions"]


def test_storm_guard_holds():
    node = dead_node(labels=KARPENTER)
    result = decide(request_of(node, recovered_status()),
                    observed_with({"nodeClaims": [nodeclaim()]}, claim_group(nodeclaim()),
                                  policies=[mf.policy(status=mf.counted(holds=True))]))
    assert replacement_of(result)["heldReason"] == "StormGuard" and not result["actions"]


def test_the_deadline_abandons_with_a_warning():
    node = dead_node(labels=KARPENTER)
    status = recovered_status(startTime=mf.at(1801), heldReason="StormGuard")
    result = decide(request_of(node, status), observed_with({"nodeClaims": [nodeclaim()]}))
    assert condition(result)["reason"] == "Abandoned" and replacement_of(result)["outcome"] == "Abandoned"
    assert any(e["reason"] == "OwnerReplacementAbandoned" and e.get("warning") for e in result["events"])
    assert kinds(result) == ["metric.owner-replacement"]


def test_an_owner_already_gone_counts_as_done():
    node = dead_node(labels=KARPENTER)
    status = recovered_status(startTime=mf.at(20), owner={"kind": "NodeClaim", "name": "default-abcde",
                                                          "group": "default"})
    result = decide(request_of(node, status), observed_with({"nodeClaims": []}))
    assert condition(result)["status"] == "True" and condition(result)["reason"] == "NodeClaimDeleted"
    assert "already gone" in condition(result)["message"]
    assert "kube.delete-nodeclaim" not in kinds(result)


def test_forged_label_is_unattributed_and_kept():
    node = dead_node(labels=KARPENTER)
    result = decide(request_of(node, recovered_status()), observed_with({"nodeClaims": []}))
    assert condition(result)["reason"] == "Unattributed" and condition(result)["status"] == "False"
    assert any(e["reason"] == "NodeUnattributed" for e in result["events"])
    assert "ec2.terminate" not in kinds(result)


def test_unattributed_terminate_rests_on_the_power_off_and_the_cluster_tag():
    node = dead_node()
    result = decide(request_of(node, recovered_status(), unattributed="Terminate"), observed_with({}))
    terminate = next(a for a in result["actions"] if a["kind"] == "ec2.terminate")
    assert terminate["target"] == mf.INSTANCE
    assert [r["type"] for r in terminate["requires"]] == ["PoweredOff", "ClusterInstance"]


def test_mode_none_never_asks_and_a_request_without_replacement_is_untouched():
    node = dead_node(labels=KARPENTER)
    result = decide(request_of(node, recovered_status(), mode="None"), {})
    assert condition(result)["reason"] == "Disabled" and result["actions"] == []
    bare = mf.fr_request(mf.fencing_request(status=recovered_status()), node)
    assert condition(decide(bare, {})) is None


def test_asg_instance_is_marked_unhealthy_in_its_group():
    node = dead_node()
    observed = observed_with({"asgInstance": asg_member()},
                             {"group": asg_group([asg_member(), asg_member("i-0bbbbbbbbbbbbbbb0")])})
    result = decide(request_of(node, recovered_status(claimTime=CLAIMED)), observed)
    action = next(a for a in result["actions"] if a["kind"] == "asg.set-unhealthy")
    assert action["params"] == {"group": "workers-asg", "region": "us-east-1"}
    assert action["requires"] == [{"type": "GroupMember", "instance_id": mf.INSTANCE, "group": "workers-asg",
                                   "region": "us-east-1"},
                                  {"type": "PoweredOff", "instance_id": mf.INSTANCE, "region": "us-east-1"}]


def test_an_asg_member_whose_node_is_not_ready_counts_as_unhealthy_though_the_group_says_healthy():
    """Two of a group of two dead: the other is still InService and Healthy to the group while it runs."""
    node = dead_node()
    other = "i-0bbbbbbbbbbbbbbb0"
    group = asg_group([asg_member(), asg_member(other)])
    held = decide(request_of(node, recovered_status(claimTime=CLAIMED)), observed_with(
        {"asgInstance": asg_member()}, {"group": group, "readiness": {"notReadyInstances": [mf.INSTANCE, other]}}))
    assert condition(held)["reason"] == "GroupUnhealthy" and not any(
        a["kind"] == "asg.set-unhealthy" for a in held["actions"])
    allowed = decide(request_of(node, recovered_status(claimTime=CLAIMED)), observed_with(
        {"asgInstance": asg_member()}, {"group": group, "readiness": {"notReadyInstances": [mf.INSTANCE]}}))
    assert any(a["kind"] == "asg.set-unhealthy" for a in allowed["actions"])


def test_capi_machine_is_remediated_through_its_owner():
    node = dead_node(annotations=CAPI)
    machines = [capi_machine(), capi_machine("workers-def", node_name="n-2", node_ready="True")]
    result = decide(request_of(node, recovered_status(claimTime=CLAIMED)),
                    observed_with({"capiMachine": capi_machine()}, {"machines": machines}))
    action = next(a for a in result["actions"] if a["kind"] == "kube.remediate-capi-machine")
    assert action["target"] == "capi/workers-abc" and action["params"]["uid"] == "uid-workers-abc"
    assert action["requires"][0]["type"] == "CapiMachineOf"


def test_a_nodewarden_machine_fenced_off_is_left_to_its_nodepool():
    node = dead_node(labels={"nodewarden.io/machine": "m-1"})
    machine = {"metadata": {"name": "m-1", "uid": "uid-m-1", "labels": {"nodewarden.io/nodepool": "pool"}},
               "status": {"nodeName": mf.NODE, "nodeUID": mf.NODE_UID, "instanceID": mf.INSTANCE}}
    result = decide(request_of(node, recovered_status()), observed_with({"machine": machine}))
    assert condition(result)["reason"] == "RepairedByNodePool" and condition(result)["status"] == "True"
    assert kinds(result) == ["metric.owner-replacement"]


# --------------------------------------------------------------------------- Reboot and Standby


def reboot_request(node, status, **rspec):
    return request_of(node, status, action="Reboot", rebootTimeout="5m", **rspec)


def test_reboot_back_ready_is_not_replaced_and_leaves_standby():
    ready = mf.node(conditions=[mf.ready("True", 30)], labels=KARPENTER, taints=[mf.OOS_TAINT])
    entered = recovered_status("Reboot", standby="Entered", standbyGroup="workers-asg")
    result = decide(reboot_request(ready, entered), {})
    exit_standby = next(a for a in result["actions"] if a["kind"] == "asg.exit-standby")
    assert exit_standby["params"]["group"] == "workers-asg"
    assert "kube.delete-nodeclaim" not in kinds(result)
    exited = copy.deepcopy(result["response"]["status"])
    exited["replacement"]["standby"] = "Exited"
    done = decide(reboot_request(ready, exited), {})
    assert condition(done)["reason"] == "NodeReadyAgain" and "asg.exit-standby" not in kinds(done)


def test_reboot_waits_for_its_bound_then_leaves_standby_then_replaces():
    """Running but not Ready after the reboot: out of Standby first (the group does not replace a running
    instance by itself), then replaced through the group once the guards allow."""
    node = dead_node()  # NotReady since the power-off
    waiting = decide(reboot_request(node, recovered_status("Reboot")), {})
    assert waiting["actions"] == [] and condition(waiting) is None
    late = recovered_status("Reboot", standby="Entered", standbyGroup="workers-asg")
    late["recovery"]["completionTime"] = mf.at(301)
    group = {"group": asg_group([asg_member(), asg_member("i-2")])}
    running = {**observed_with({"asgInstance": asg_member()}, **group), **mf.ec2("running")}
    first = decide(reboot_request(node, late), running)
    assert kinds(first) == ["asg.exit-standby"]
    late["replacement"].update(standby="Exited", claimTime=CLAIMED)
    second = decide(reboot_request(node, late), observed_with({"asgInstance": asg_member()}, **group))
    assert "asg.set-unhealthy" in kinds(second)


def _stopped_in_standby(**replacement_status):
    """A Reboot whose power-on failed: Failed, Recovered, the instance stopped in the Standby it entered."""
    status = recovered_status("Reboot", standby="Entered", standbyGroup="workers-asg", **replacement_status)
    status["phase"] = "Failed"
    status["errorReason"] = "PowerOnFailed"
    status["recovery"]["completionTime"] = mf.at(301)
    return status


def test_a_stopped_instance_leaves_standby_only_with_its_replacement_once_the_guards_allow():
    node = dead_node()
    in_standby = asg_member()
    in_standby["lifecycleState"] = "Standby"
    group = {"group": asg_group([in_standby, asg_member("i-2")])}
    storm = mf.policy(status=mf.counted(holds=True))
    held = decide(reboot_request(node, _stopped_in_standby()),
                  observed_with({"asgInstance": in_standby}, policies=[storm], **group))
    assert condition(held)["reason"] == owner_names.HELD_STORM_GUARD
    assert kinds(held) == [], "not back in service, where the group would replace it at once"
    claimed = decide(reboot_request(node, _stopped_in_standby(claimTime=CLAIMED)),
                     observed_with({"asgInstance": in_standby}, **group))
    (replace,) = [a for a in claimed["actions"] if a["kind"].startswith("asg.")]
    assert replace["kind"] == "asg.replace-from-standby" and replace["params"]["group"] == "workers-asg"
    recorded = {tuple(c["path"]): c["value"] for c in replace["record"]}
    assert recorded[("status", "replacement", "standby")] == "Exited"
    assert recorded[("status", "replacement", "outcome")] == owner_names.INSTANCE_MARKED_UNHEALTHY


def test_a_stopped_instance_held_until_the_timeout_is_left_in_standby_and_named():
    node = dead_node()
    status = _stopped_in_standby(startTime=mf.at(100000), heldReason=owner_names.HELD_STORM_GUARD)
    result = decide(reboot_request(node, status), observed_with({"asgInstance": asg_member()}))
    assert replacement_of(result)["outcome"] == owner_names.ABANDONED
    assert f"instance {mf.INSTANCE} is left in Standby in Auto Scaling group workers-asg" in \
        replacement_of(result)["message"]
    assert not [a for a in result["actions"] if a["kind"].startswith("asg.")]


def pending_reboot(node, **extra):
    fr = mf.fencing_request(spec={"action": "Reboot", "replacement": {"mode": "Owner"}})
    return mf.fr_request(fr, node)


def test_a_groups_instance_enters_standby_before_the_reboot_stop():
    node = mf.node(conditions=[mf.ready("Unknown", 100)], taints=[mf.TRIAGED_TAINT, mf.REQUIRED_TAINT])
    observed = {**mf.ec2("running"), "olderRequests": [], "asgInstance": asg_member()}
    result = decide(pending_reboot(node), observed)
    assert kinds(result) == ["asg.enter-standby"]
    assert [r["type"] for r in result["actions"][0]["requires"]] == ["GroupMember", "ClusterInstance"]
    entered = copy.deepcopy(result["response"]["status"])
    entered["replacement"]["standby"] = "Entered"
    fr = mf.fencing_request(status=entered, spec={"action": "Reboot", "replacement": {"mode": "Owner"}})
    stop = decide(mf.fr_request(fr, node), observed)
    assert kinds(stop) == ["aws.stop"]


def test_an_instance_no_group_holds_is_stopped_at_once():
    node = mf.node(conditions=[mf.ready("Unknown", 100)], taints=[mf.TRIAGED_TAINT, mf.REQUIRED_TAINT])
    result = decide(pending_reboot(node), {**mf.ec2("running"), "olderRequests": [], "asgInstance": None})
    assert kinds(result) == ["aws.stop"]


def test_an_unread_group_holds_the_stop():
    node = mf.node(conditions=[mf.ready("Unknown", 100)], taints=[mf.TRIAGED_TAINT, mf.REQUIRED_TAINT])
    result = decide(pending_reboot(node), {**mf.ec2("running"), "olderRequests": [], "asgError": "Throttling: x"})
    assert result["actions"] == []


def test_a_refused_standby_means_no_reboot_and_the_group_replaces():
    status: dict = {}
    action = Action("asg.enter-standby", mf.INSTANCE, {"group": "workers-asg", "region": "us-east-1"})
    said = replacement.failed(status, Outcome(action, False, "ValidationError: at min size", code="ValidationError"))
    assert status["replacement"]["standby"] == "Refused" and said.warning
    for not_now in ("Throttling", "ThrottlingException", "Transport", "InternalError", "ServiceUnavailable"):
        kept: dict = {}
        assert replacement.failed(kept, Outcome(action, False, "x", code=not_now)) is None
        assert "standby" not in kept["replacement"], not_now
    assert replacement.failed({}, Outcome(action, False, "x", code=PRECONDITION)) is None
    # Recovered with the Standby refused: Succeeded without a power-on, and the group asked at once.
    node = dead_node()
    refused = recovered_status("Reboot", standby="Refused", claimTime=CLAIMED)
    refused["providerStatus"].pop("startAttempts")
    observed = observed_with({"asgInstance": asg_member()}, {"group": asg_group([asg_member(), asg_member("i-2")])})
    result = decide(reboot_request(node, refused), observed)
    assert "asg.set-unhealthy" in kinds(result) and "aws.start" not in kinds(result)


def test_an_unreadable_proof_waits_with_reason_error():
    node = dead_node(labels=KARPENTER)
    result = decide(request_of(node, recovered_status()), observed_with({"nodeClaimsError": "503 Service Unavailable"}))
    assert condition(result)["reason"] == "Error" and "503" in replacement_of(result)["lastError"]
    assert result["actions"] == [] and "outcome" not in replacement_of(result)


def test_an_enter_standby_failing_until_the_queue_timeout_fails_the_request():
    node = mf.node(conditions=[mf.ready("Unknown", 2000)], taints=[mf.TRIAGED_TAINT, mf.REQUIRED_TAINT])
    status = mf.fr_status("Pending", started=1801, replacement={"standbyGroup": "workers-asg",
                                                                "lastError": "asg.enter-standby i-0: Throttling: x"})
    fr = mf.fencing_request(status=status, spec={"action": "Reboot", "replacement": {"mode": "Owner"}})
    result = decide(mf.fr_request(fr, node), {**mf.ec2("running"), "olderRequests": [], "asgInstance": asg_member()})
    assert result["response"]["status"]["phase"] == "Failed"
    assert result["response"]["status"]["errorReason"] == "StandbyFailed" and result["actions"] == []


def test_a_request_failing_before_recovery_leaves_the_standby_it_entered():
    node = dead_node()
    status = mf.fr_status("Failed", errorReason="PowerOffFailed", errorMessage="x", completionTime=mf.at(10),
                          providerStatus=mf.provider(stopAttempts=5),
                          replacement={"standby": "Entered", "standbyGroup": "workers-asg"})
    result = decide(reboot_request(node, status), {})
    assert kinds(result) == ["asg.exit-standby"] and condition(result) is None


def test_a_request_deleted_while_its_instance_is_in_standby_takes_it_out_before_it_goes():
    """Deleted half-way through a Reboot: the instance it put in Standby (the group's capacity decremented)
    leaves Standby before the finalizer goes, else the group never counts or replaces it again."""
    node = dead_node()
    status = mf.fr_status("PoweringOn", started=100, providerStatus=mf.provider(stopAttempts=1, startAttempts=1),
                          replacement={"standby": "Entered", "standbyGroup": "workers-asg"})
    fr = mf.fencing_request(status=status, deleting=True,
                            spec={"action": "Reboot", "replacement": {"mode": "Owner"}})
    result = decide(mf.fr_request(fr, node, finalizing=True), {"otherHolders": []})
    assert kinds(result) == ["asg.exit-standby"] and result["response"]["finalized"] is False
    exit_standby = result["actions"][0]
    assert exit_standby["params"]["group"] == "workers-asg" and exit_standby["requires"][0]["type"] == "GroupMember"
    exited = copy.deepcopy(result["response"]["status"])
    assert exited["replacement"]["standby"] == "Entered"  # recorded only once it succeeded
    exited["replacement"]["standby"] = "Exited"
    fr = mf.fencing_request(status=exited, deleting=True, spec={"action": "Reboot", "replacement": {"mode": "Owner"}})
    done = decide(mf.fr_request(fr, node, finalizing=True), {"otherHolders": []})
    assert "asg.exit-standby" not in kinds(done)


def test_a_node_powered_off_that_is_ready_again_is_not_replaced():
    """Action Off, held a while by a guard; meanwhile someone started the instance and the node is Ready: its
    owner is not asked to replace a node that serves again."""
    back = mf.node(conditions=[mf.ready("True", 30)], labels=KARPENTER, taints=[mf.OOS_TAINT])
    result = decide(request_of(back, recovered_status()),
                    observed_with({"nodeClaims": [nodeclaim()]}, claim_group(nodeclaim(), nodeclaim("b", node_name="n-b"))))
    assert "kube.delete-nodeclaim" not in kinds(result)
    assert condition(result)["reason"] == "NodeReadyAgain"


@pytest.mark.parametrize("kind,proofs,group", [
    ("kube.delete-nodeclaim", {"nodeClaims": [nodeclaim()]}, claim_group(nodeclaim(), nodeclaim("b", node_name="n-b"))),
    ("asg.set-unhealthy", {"asgInstance": asg_member()}, {"group": asg_group([asg_member(), asg_member("i-2")])}),
    ("kube.remediate-capi-machine", {"capiMachine": capi_machine()}, {"machines": [capi_machine()]}),
])
def test_the_owner_of_a_node_powered_off_is_asked_only_while_its_instance_is_still_off(kind, proofs, group):
    """Action Off: the instance powered off is read again right before the owner's action; one started again
    since the decision is not replaced."""
    node = dead_node(labels=KARPENTER, annotations=CAPI)
    result = decide(request_of(node, recovered_status(claimTime=CLAIMED)), observed_with(proofs, group))
    action = next(a for a in result["actions"] if a["kind"] == kind)
    assert {"type": "PoweredOff", "instance_id": mf.INSTANCE, "region": "us-east-1"} in action["requires"]


def test_an_exit_standby_refused_for_good_is_given_up_within_the_replacement_timeout():
    """ExitStandby raises the desired capacity by one: at the group's maximum size Auto Scaling refuses it, call
    after call. The tries end NODEWARDEN_REPLACEMENT_TIMEOUT_SECONDS after the first, with a Warning naming the
    instance left in Standby; nothing is asked after that, and a deletion is not held by it."""
    ready = mf.node(conditions=[mf.ready("True", 30)], labels=KARPENTER, taints=[mf.OOS_TAINT])
    entered = recovered_status("Reboot", standby="Entered", standbyGroup="workers-asg")
    first = decide(reboot_request(ready, entered), {})
    assert kinds(first) == ["asg.exit-standby"]
    began = first["response"]["status"]["replacement"]["standbyExitStartTime"]
    refused = recovered_status("Reboot", standby="Entered", standbyGroup="workers-asg", standbyExitStartTime=began,
                               lastError="asg.exit-standby i-0: ValidationError: desired capacity would exceed max")
    assert kinds(decide(reboot_request(ready, refused), {})) == ["asg.exit-standby"]
    refused["replacement"]["standbyExitStartTime"] = mf.at(1801)
    given_up = decide(reboot_request(ready, refused), {})
    assert "asg.exit-standby" not in kinds(given_up)
    assert condition(given_up)["reason"] == "Abandoned" and "Standby" in condition(given_up)["message"]
    assert any(e["reason"] == "OwnerReplacementAbandoned" and e.get("warning") for e in given_up["events"])
    again = decide(reboot_request(ready, given_up["response"]["status"]), {})
    assert again["actions"] == [] and again["events"] == []
    fr = mf.fencing_request(status=given_up["response"]["status"], deleting=True,
                            spec={"action": "Reboot", "replacement": {"mode": "Owner"}})
    deleted = decide(mf.fr_request(fr, ready, finalizing=True), {"otherHolders": []})
    assert "asg.exit-standby" not in kinds(deleted)


@pytest.mark.parametrize("uid,instance", [("uid-of-a-namesake", "i-0eeeeeeeeeeeeeee0"),
                                          (mf.NODE_UID, "i-0eeeeeeeeeeeeeee0"), ("uid-of-a-namesake", mf.INSTANCE)])
def test_a_namesake_node_is_never_the_one_replaced(uid, instance):
    """The fenced Node went and another joined under its name (not Ready yet): its NodeClaim is not the fenced
    node's owner, and is not deleted."""
    provider = f"aws:///us-east-1a/{instance}"
    namesake = mf.node(conditions=[mf.ready("False", 10)], labels=KARPENTER, uid=uid, provider=provider)
    claim = nodeclaim("default-new", provider=provider)
    result = decide(request_of(namesake, recovered_status()),
                    observed_with({"nodeClaims": [claim]}, claim_group(claim, nodeclaim("b", node_name="n-b"))))
    assert "kube.delete-nodeclaim" not in kinds(result)
    assert replacement_of(result).get("owner") is None


def _pool_pair():
    """Two fenced nodes of one NodePool of 10, each with its FencingRequest (maxReplacing 1)."""
    other_instance = "i-0bbbbbbbbbbbbbbb0"
    other_provider = f"aws:///us-east-1a/{other_instance}"
    nodes = {"a": dead_node(labels=KARPENTER),
             "b": mf.node("n-b", conditions=[mf.ready("Unknown", 120)], labels=KARPENTER, provider=other_provider)}
    claims = {"a": nodeclaim(), "b": nodeclaim("b", node_name="n-b", provider=other_provider)}
    group = claim_group(claims["a"], claims["b"], *(nodeclaim(n, node_name=f"n-{n}") for n in "cdefghij"),
                        not_ready=(mf.NODE, "n-b"))
    status_b = recovered_status()
    status_b["providerStatus"]["instanceID"] = other_instance

    def request(who, status):
        if who == "a":
            return mf.fencing_request(status=status, uid="uid-a", spec={"replacement": {"maxUnhealthy": "40%"}})
        return mf.fencing_request("fence-n-b", node_name="n-b", uid="uid-b", status=status,
                                  spec={"replacement": {"maxUnhealthy": "40%"}})

    def call(who, status, other_who, other_status):
        result = decide(mf.fr_request(request(who, status), nodes[who]),
                        observed_with({"nodeClaims": [claims[who]]}, group,
                                      requests=[request(other_who, other_status)]))
        return result, "kube.delete-nodeclaim" in kinds(result)

    return call, {"a": recovered_status(), "b": status_b}


def _acted(result) -> dict:
    """The status as written once the call's actions succeeded (their records applied)."""
    status = copy.deepcopy(result["response"]["status"])
    for action in result["actions"]:
        for change in action.get("record") or []:
            node = status
            for key in change["path"][1:-1]:
                node = node.setdefault(key, {})
            node[change["path"][-1]] = change.get("value")
    return status


@pytest.mark.parametrize("order", ["both-see-both", "a-first", "b-first"])
def test_two_requests_deciding_at_once_in_one_group_replace_one_within_a_budget_of_one(order):
    """Two FencingRequests of one NodePool decided in the same second, each reading the other before it acted:
    whatever the interleaving, at most maxReplacing (1) of them asks Karpenter."""
    call, start = _pool_pair()
    first_a, acted_a = call("a", start["a"], "b", start["b"])
    first_b, acted_b = call("b", start["b"], "a", start["a"])
    asked = acted_a + acted_b
    claimed = {"a": _acted(first_a), "b": _acted(first_b)}
    if order == "both-see-both":
        (result_a, act_a), (result_b, act_b) = call("a", claimed["a"], "b", claimed["b"]), \
            call("b", claimed["b"], "a", claimed["a"])
    elif order == "a-first":  # a reads b before b's first call was written; b then reads a as a wrote it
        result_a, act_a = call("a", claimed["a"], "b", start["b"])
        result_b, act_b = call("b", claimed["b"], "a", _acted(result_a))
    else:
        result_b, act_b = call("b", claimed["b"], "a", start["a"])
        result_a, act_a = call("a", claimed["a"], "b", _acted(result_b))
    asked += act_a + act_b
    assert asked <= 1
    # And one of them does go ahead: the later claim yields, the earlier then asks.
    status = {"a": _acted(result_a), "b": _acted(result_b)}
    for _ in range(2):
        (result_a, act_a), (result_b, act_b) = call("a", status["a"], "b", status["b"]), \
            call("b", status["b"], "a", status["a"])
        asked += act_a + act_b
        status = {"a": _acted(result_a), "b": _acted(result_b)}
    assert asked == 1


def test_the_first_clear_call_claims_a_place_and_asks_on_the_next():
    node = dead_node(labels=KARPENTER)
    group = claim_group(nodeclaim(), nodeclaim("b", node_name="n-b"))
    first = decide(request_of(node, recovered_status()), observed_with({"nodeClaims": [nodeclaim()]}, group))
    assert first["actions"] == [] and replacement_of(first)["claimTime"] == mf.at(0)
    assert first["response"]["resyncAfterSeconds"] == 2
    second = decide(request_of(node, first["response"]["status"]), observed_with({"nodeClaims": [nodeclaim()]}, group))
    assert "kube.delete-nodeclaim" in kinds(second)


def test_a_claim_held_by_the_group_is_let_go():
    node = dead_node(labels=KARPENTER)
    claims = [nodeclaim(), *(nodeclaim(n, node_name=f"n-{n}") for n in "bcd")]
    result = decide(request_of(node, recovered_status(claimTime=CLAIMED)),
                    observed_with({"nodeClaims": [nodeclaim()]}, claim_group(*claims, not_ready=(mf.NODE, "n-b"))))
    assert replacement_of(result)["heldReason"] == "GroupUnhealthy" and "claimTime" not in replacement_of(result)


def test_claims_elsewhere_count_in_flight_and_later_ones_are_told_apart():
    me = owners.attribute(dead_node(labels=KARPENTER), {"nodeClaims": [nodeclaim()]})
    read = claim_group(nodeclaim(), nodeclaim("b", node_name="n-b"), nodeclaim("c", node_name="n-c"))

    def claiming(name, uid, at, **more):
        return mf.fencing_request(f"fence-n-{name}", node_name=f"n-{name}", uid=uid, status={"replacement": {
            "owner": {"kind": "NodeClaim", "name": name, "group": "default"}, "claimTime": at, **more}})

    others = [claiming("b", "uid-b", mf.at(5)), claiming("c", "uid-c", mf.at(1)),
              claiming("d", "uid-d", mf.at(9)),  # not in the pool any more
              claiming("c", "uid-c2", mf.at(9), outcome="Abandoned")]
    assert guard.group_view(me, read, others, "uid-fr-1") == guard.GroupView("default", 3, 1, 2, 0)
    mine = guard.group_view(me, read, others, "uid-fr-1", mf.at(3))
    assert (mine.replacing, mine.claimed_later, mine.replacing_before) == (2, 1, 1)


def test_a_karpenter_instance_whose_node_lost_its_nodepool_label_is_still_looked_for():
    """Node labels are anyone's to edit: a Karpenter node whose nodepool label was taken off would be
    unattributed (and, with unattributed Terminate, terminated behind Karpenter's back). The tag Karpenter puts
    on the instance says where to look too; the NodeClaim still has to prove it."""
    node = dead_node()
    tags = {**mf.CLUSTER_TAG, owner_names.KARPENTER_NODEPOOL_LABEL: "default"}
    assert owners.to_read(node, tags) == {"nodeClaims": PROVIDER_ID}
    assert owners.attribute(node, {"nodeClaims": [nodeclaim()]}).kind == owner_names.OWNER_NODECLAIM
    assert owners.to_read(node, mf.CLUSTER_TAG) == {}


def test_every_field_the_phase_records_is_in_the_crd_else_the_api_server_prunes_it():
    """A status field the FencingRequest CRD does not declare is dropped when Metacontroller writes the status:
    a claim or a Standby exit's start would never be read back."""
    import yaml

    path = pathlib.Path(__file__).parents[2] / "kustomize" / "base" / "crds" / "fencingrequests.yaml"
    schema = yaml.safe_load(path.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    declared = set(schema["properties"]["status"]["properties"]["replacement"]["properties"])
    node = dead_node(labels=KARPENTER)
    group = claim_group(nodeclaim(), nodeclaim("b", node_name="n-b"))
    ready = mf.node(conditions=[mf.ready("True", 30)], labels=KARPENTER, taints=[mf.OOS_TAINT])
    results = [decide(request_of(node, recovered_status()), observed_with({"nodeClaims": [nodeclaim()]}, group)),
               decide(request_of(node, recovered_status(claimTime=CLAIMED)),
                      observed_with({"nodeClaims": [nodeclaim()]}, group)),
               decide(reboot_request(ready, recovered_status("Reboot", standby="Entered", standbyGroup="g")), {})]
    written = set()
    for result in results:
        written |= set(_acted(result).get("replacement") or {})
    assert {"claimTime", "standbyExitStartTime", "owner", "outcome", "requestedTime"} <= written
    assert written <= declared, written - declared


def test_mode_none_says_disabled_even_for_a_node_ready_again():
    back = mf.node(conditions=[mf.ready("True", 30)], labels=KARPENTER, taints=[mf.OOS_TAINT])
    assert condition(decide(request_of(back, recovered_status(), mode="None"), {}))["reason"] == "Disabled"


def test_a_standby_entered_whose_answer_was_lost_is_recorded_as_this_requests_and_left_later():
    """EnterStandby went through but its answer did not come back (a read timeout): the next call finds the
    instance in Standby in the group it asked. That Standby is this request's, recorded so that it is left again;
    one found with no EnterStandby asked is an operator's, left as it is."""
    node = mf.node(conditions=[mf.ready("Unknown", 100)], taints=[mf.TRIAGED_TAINT, mf.REQUIRED_TAINT])
    asked = mf.fr_status("Pending", started=10, replacement={
        "standbyGroup": "workers-asg", "lastError": "asg.enter-standby i-0: ReadTimeoutError: x"})
    fr = mf.fencing_request(status=asked, spec={"action": "Reboot", "replacement": {"mode": "Owner"}})
    observed = {**mf.ec2("running"), "olderRequests": [], "asgInstance": asg_member(state="Standby")}
    result = decide(mf.fr_request(fr, node), observed)
    assert result["response"]["status"]["replacement"]["standby"] == "Entered"
    operators = mf.fencing_request(spec={"action": "Reboot", "replacement": {"mode": "Owner"}})
    result = decide(mf.fr_request(operators, node), observed)
    assert kinds(result) == ["aws.stop"] and "standby" not in (result["response"]["status"].get("replacement") or {})
