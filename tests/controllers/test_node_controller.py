"""The DecoratorController ``node``: both Node concerns in one hook, apart, and the move from the two old ones."""
from __future__ import annotations

import copy
import datetime as dt
import json
import pathlib

import pytest

from hooks import actuators, events, metrics, node_answers, pipeline
from hooks.config import load_settings
from hooks.contract import DECORATOR, DECORATOR_CLAIM, decorator_finalizer, parse_request
from hooks.controllers import node, node_fencing, node_handover
from hooks.kube import handover
from worlds.fake_kube import FakeKube

FIXTURES = pathlib.Path(__file__).parents[1] / "fixtures" / "node"
NOW = dt.datetime(2026, 11, 21, 12, 0, tzinfo=dt.timezone.utc)
NEW = decorator_finalizer("node")
OLD = decorator_finalizer("node-detacher")


def _case(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def _api(obj: dict) -> dict:
    """The fixture's Node as the API server would answer it (lightkube's model wants a whole nodeInfo)."""
    obj = copy.deepcopy(obj)
    obj.get("status", {}).pop("nodeInfo", None)
    return obj


def _request(case: dict):
    return parse_request(copy.deepcopy(case["request"]), DECORATOR, case["hook"])


@pytest.fixture(autouse=True)
def _fresh_answers():
    handover.OLD_GONE.forget()
    yield
    handover.OLD_GONE.forget()


def test_one_concern_failing_does_not_stop_the_other(make_ctx, monkeypatch):
    """node-fencing raising: node-detacher still excludes the cordoned node, and node-fencing's part is
    'everything of mine as it is' (its record asked for as it exists, no condition of its own written)."""
    case = _case("cordoned-and-unhealthy-excluded")
    record = {"apiVersion": "nodewarden.io/v1alpha1", "kind": "UnhealthyNode",
              "metadata": {"name": case["request"]["object"]["metadata"]["name"]}, "spec": {"conditions": []}}
    case["request"]["attachments"]["UnhealthyNode.nodewarden.io/v1alpha1"] = {record["metadata"]["name"]: record}
    kube = FakeKube([_api(case["request"]["object"])])

    def broken(*args, **kwargs):
        raise RuntimeError("fencing is broken")

    monkeypatch.setattr(node_fencing, "decide", broken)
    response = node.sync(_request(case), make_ctx(now=NOW, kube=kube))
    name = case["request"]["object"]["metadata"]["name"]
    assert kube.nodes[name]["metadata"]["labels"]["node.kubernetes.io/exclude-from-external-load-balancers"] == \
        "nodewarden", "node-detacher wrote its label"
    assert response["status"] is None, "node-fencing wrote no condition"
    assert sorted(a["kind"] for a in response["attachments"]) == ["Attachment", "UnhealthyNode"]
    assert response["resyncAfterSeconds"] <= 5


def test_node_detacher_failing_leaves_its_attachment_and_the_deletion_held(make_ctx, monkeypatch):
    case = _case("deleting-finalize-held-by-detacher")
    kube = FakeKube([_api(case["request"]["object"])])
    from hooks.controllers import node_detacher

    monkeypatch.setattr(node_detacher, "decide", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("broken")))
    response = node.finalize(_request(case), make_ctx(now=NOW, kube=kube))
    assert response["finalized"] is False
    assert [a["kind"] for a in response["attachments"]] == ["Attachment"]
    assert response["labels"] == {} and response["annotations"] == {}


def test_both_concerns_write_their_conditions_into_one_status(make_ctx):
    """A decorator's status replaces the whole status: each concern's conditions must survive the other's."""
    case = _case("cordoned-and-unhealthy-both-write-status")
    plan = node.decide(_request(case), load_settings(case["env"]), NOW, case["observed"])
    types = [c["type"] for c in plan.response["status"]["conditions"]]
    assert types == ["Ready", "NodeBeingDetached", "FencingTriaged", "FencingRequired", "FencingComplete"]


def test_merge_status_applies_each_concerns_removals_too():
    observed = {"conditions": [{"type": "Ready"}, {"type": "NodeBeingDetached"}, {"type": "FencingTriaged"}]}
    detacher = {"conditions": [{"type": "Ready"}, {"type": "FencingTriaged"}]}  # removed its own
    fencing = {"conditions": [{"type": "Ready"}, {"type": "NodeBeingDetached"}]}  # removed its own
    assert node_answers.merge_status(observed, [detacher, fencing]) == {"conditions": [{"type": "Ready"}]}
    assert node_answers.merge_status(observed, [None, None]) is None


# ----------------------------------------------------------------------------------- the move from the old two


def _node_with(finalizers):
    case = _case("healthy-no-writes")
    obj = copy.deepcopy(case["request"]["object"])
    obj["metadata"]["finalizers"] = finalizers
    return case, obj


def _owned(kind, name, uid, namespace=None, claimed_by="node-detacher"):
    meta = {"name": name, "uid": f"{kind}-uid", "resourceVersion": "7",
            "annotations": {DECORATOR_CLAIM: claimed_by},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n", "uid": uid, "controller": True}]}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": "nodewarden.io/v1alpha1", "kind": kind, "metadata": meta, "spec": {}}


def _request_for(case, obj):
    body = copy.deepcopy(case["request"])
    body["object"] = obj
    body["attachments"] = {}
    return parse_request(body, DECORATOR, "sync")


def test_old_finalizer_comes_off_and_attachments_are_claimed_once_the_old_decorators_are_gone(make_ctx):
    case, obj = _node_with([OLD, NEW])
    uid, name = obj["metadata"]["uid"], obj["metadata"]["name"]
    kube = FakeKube([_api(obj), _owned("Attachment", name, uid, "nodewarden-system"),
                     _owned("UnhealthyNode", name, uid, claimed_by="node-fencing"),
                     _owned("Attachment", "someone-else", "other-uid", "nodewarden-system")])
    migrated, holds = node_handover.hand_over(_request_for(case, obj), make_ctx(now=NOW, kube=kube), "node")
    assert not holds
    assert kube.nodes[name]["metadata"]["finalizers"] == [NEW]
    assert migrated.meta["finalizers"] == [NEW]
    claimed = {(kind, n): p["metadata"]["annotations"][DECORATOR_CLAIM] for kind, _, n, p in kube.patches}
    assert claimed == {("Attachment", name): "node", ("UnhealthyNode", name): "node"}
    assert sorted(o["kind"] for o in migrated.children.all()) == ["Attachment", "UnhealthyNode"]


def test_nothing_moves_while_an_old_decorator_still_runs(make_ctx):
    """It would claim its objects back, and its finalizer is its own to take off."""
    case, obj = _node_with([OLD, NEW])
    name = obj["metadata"]["name"]
    old = {"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "DecoratorController",
           "metadata": {"name": "node-fencing"}, "spec": {}}
    kube = FakeKube([_api(obj), old, _owned("Attachment", name, obj["metadata"]["uid"], "nodewarden-system")])
    node_handover.hand_over(_request_for(case, obj), make_ctx(now=NOW, kube=kube), "node")
    assert kube.nodes[name]["metadata"]["finalizers"] == [OLD, NEW]
    assert kube.patches == []


def test_the_old_finalizer_stays_until_ours_holds_the_node(make_ctx):
    case, obj = _node_with([OLD])
    kube = FakeKube([_api(obj)])
    node_handover.hand_over(_request_for(case, obj), make_ctx(now=NOW, kube=kube), "node")
    assert kube.nodes[obj["metadata"]["name"]]["metadata"]["finalizers"] == [OLD]


def test_the_hook_hands_a_node_over_on_its_sync(make_ctx):
    """Through node.sync: the old finalizer goes, and the adopted Attachment of a node in the middle of a
    detach is what node-detacher sees (kept as it is, not looked up again)."""
    from hooks import providerid

    case, obj = _node_with([OLD, NEW])
    name = obj["metadata"]["name"]
    obj["spec"]["unschedulable"] = True
    obj["spec"]["taints"] = [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]
    detaching = json.loads((FIXTURES.parent / "node-detacher" / "deregister-batched-per-target-group.json").read_text())
    [attachment] = copy.deepcopy(list(detaching["request"]["attachments"]["Attachment.nodewarden.io/v1alpha1"].values()))
    attachment["metadata"]["name"] = attachment["spec"]["nodeName"] = name
    attachment["spec"]["instanceID"] = providerid.parse(obj["spec"]["providerID"]).instance_id
    owned = _owned("Attachment", name, obj["metadata"]["uid"], "nodewarden-system")
    attachment["metadata"].update(owned["metadata"])
    kube = FakeKube([_api(obj), attachment])
    response = node.sync(_request_for(case, obj), make_ctx(now=NOW, kube=kube))
    assert kube.nodes[name]["metadata"]["finalizers"] == [NEW]
    [kept] = [a for a in response["attachments"] if a["kind"] == "Attachment"]
    assert kept["spec"]["discoveredAt"] == attachment["spec"]["discoveredAt"]  # not rediscovered: it was seen
    key = lambda t: (t["arn"], t["targetPort"])  # noqa: E731
    assert sorted(kept["spec"]["awsTargets"], key=key) == sorted(attachment["spec"]["awsTargets"], key=key)


def test_nothing_is_made_for_a_node_being_deleted_by_node_fencing(make_ctx, monkeypatch):
    """A FencingRequest node-fencing would make is left out while the Node is being deleted; what exists stays."""
    case = _case("deleting-finalize-held-by-detacher")
    kube = FakeKube([_api(case["request"]["object"])])
    made = {"apiVersion": "nodewarden.io/v1alpha1", "kind": "FencingRequest",
            "metadata": {"name": "fence-x", "namespace": "nodewarden-system"}, "spec": {}}
    monkeypatch.setattr(node_fencing, "sync", lambda request, ctx=None: {"attachments": [made]})
    response = node.finalize(_request(case), make_ctx(now=NOW, kube=kube))
    assert [a["kind"] for a in response["attachments"]] == ["Attachment"]


def test_a_node_deleted_before_the_hand_over_is_finalized_under_the_old_finalizer(make_ctx):
    """Metacontroller adds no finalizer to a Node already being deleted: the old one holds it until the
    finalize answer lets it go, then comes off; until then it stays."""
    case, obj = _node_with([OLD])
    obj["metadata"]["deletionTimestamp"] = "2026-11-21T11:59:58Z"
    kube = FakeKube([_api(obj)])
    request = _request_for(case, obj)
    migrated, holds = node_handover.hand_over(request, make_ctx(now=NOW, kube=kube), "node")
    assert holds and migrated.finalizing
    response = node.sync(request, make_ctx(now=NOW, kube=kube))  # the detach of a deleting node begins
    assert response["finalized"] is False
    assert kube.nodes[obj["metadata"]["name"]]["metadata"]["finalizers"] == [OLD]
    # A node node-detacher lets go at once (control plane: not its to detach).
    obj["metadata"]["labels"]["node-role.kubernetes.io/control-plane"] = ""
    kube.nodes[obj["metadata"]["name"]]["metadata"]["labels"]["node-role.kubernetes.io/control-plane"] = ""
    response = node.sync(_request_for(case, obj), make_ctx(now=NOW, kube=kube))
    assert response["finalized"] is True
    assert kube.nodes[obj["metadata"]["name"]]["metadata"]["finalizers"] == []


def _actions(controller, kind, outcome):
    return metrics.ACTIONS.labels(controller, kind, outcome)._value.get()


def test_each_hand_over_write_is_an_action_with_its_outcome_count_and_event(make_ctx, monkeypatch):
    """The claims and the finalizers' removal run through the pipeline: an Outcome each, counted in
    nodewarden_actions_total under ``node``, and reported as an Event on the Node."""
    case, obj = _node_with([OLD, NEW])
    uid, name = obj["metadata"]["uid"], obj["metadata"]["name"]
    kube = FakeKube([_api(obj), _owned("Attachment", name, uid, "nodewarden-system")])
    outcomes = []
    act = actuators.act

    def spy(controller, actions, ctx, *args, **kwargs):
        result = act(controller, actions, ctx, *args, **kwargs)
        outcomes.extend((controller, o.action.kind, o.ok) for o in result)
        return result

    monkeypatch.setattr(actuators, "act", spy)
    assert isinstance(node_handover.HandOver("node"), pipeline.Controller)
    before = [_actions("node", kind, "ok") for kind in ("kube.claim-attachment", "kube.remove-finalizers")]
    node_handover.hand_over(_request_for(case, obj), make_ctx(now=NOW, kube=kube), "node")
    assert ("node", "kube.claim-attachment", True) in outcomes
    assert ("node", "kube.remove-finalizers", True) in outcomes
    after = [_actions("node", kind, "ok") for kind in ("kube.claim-attachment", "kube.remove-finalizers")]
    assert after == [b + 1 for b in before]
    assert kube.reasons() == [events.ATTACHMENT_CLAIMED, events.DECORATOR_FINALIZERS_REMOVED]
    assert kube.nodes[name]["metadata"]["finalizers"] == [NEW]


def test_a_failed_claim_is_a_warning_and_leaves_the_old_finalizer_for_the_next_call(make_ctx):
    case, obj = _node_with([OLD, NEW])
    uid, name = obj["metadata"]["uid"], obj["metadata"]["name"]
    kube = FakeKube([_api(obj), _owned("Attachment", name, uid, "nodewarden-system")])
    kube.refused.add(("merge_patch", "Attachment"))
    before = _actions("node", "kube.claim-attachment", "error")
    request = _request_for(case, obj)
    migrated, holds = node_handover.hand_over(request, make_ctx(now=NOW, kube=kube), "node")
    assert migrated is request and not holds
    assert _actions("node", "kube.claim-attachment", "error") == before + 1
    assert kube.reasons() == [events.HAND_OVER_FAILED]
    assert kube.nodes[name]["metadata"]["finalizers"] == [OLD, NEW]


def test_releasing_the_old_finalizer_of_a_deleted_node_is_an_action_too(make_ctx):
    case, obj = _node_with([OLD])
    obj["metadata"]["deletionTimestamp"] = "2026-11-21T11:59:58Z"
    obj["metadata"]["labels"]["node-role.kubernetes.io/control-plane"] = ""  # node-detacher lets it go at once
    kube = FakeKube([_api(obj)])
    before = _actions("node", "kube.remove-finalizers", "ok")
    assert node.sync(_request_for(case, obj), make_ctx(now=NOW, kube=kube))["finalized"] is True
    assert _actions("node", "kube.remove-finalizers", "ok") == before + 1
    assert events.DECORATOR_FINALIZERS_REMOVED in kube.reasons()
    assert kube.nodes[obj["metadata"]["name"]]["metadata"]["finalizers"] == []
