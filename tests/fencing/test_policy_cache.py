"""The Node hook reads NodeFencingPolicies itself (a short-lived copy), and the policy controller tells the Nodes
its count admitted, since the Node decorator relates no policy."""
from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import json
import pathlib

from hooks import fencing_names
from hooks.contract import ObjectGroups, parse_request
from hooks.controllers import node, node_fencing_policy
from hooks.fencing import policy_count
from hooks.kube import policy_cache
from hooks.plan import DEFERRED, Outcome, TimeAllowance
from tests.controllers.test_node_controller import _api, _case, _request
from worlds.fake_kube import FakeKube

FIXTURES = pathlib.Path(__file__).parents[1] / "fixtures"
NOW = dt.datetime(2026, 11, 21, 12, 0, tzinfo=dt.timezone.utc)


def _policy(name: str, counted: str | None = None) -> dict:
    return {"apiVersion": fencing_names.API_VERSION, "kind": fencing_names.POLICY_KIND,
            "metadata": {"name": name, "uid": f"uid-{name}", "generation": 1},
            "spec": {"maxUnhealthy": 1}, "status": {"countedAt": counted} if counted else {}}


class _Counting(FakeKube):
    def __init__(self, objects):
        super().__init__(objects)
        self.lists = 0

    def list(self, res, namespace=None, labels=None, fields=None):
        self.lists += 1
        return super().list(res, namespace, labels, fields)


def test_one_list_serves_every_node_within_its_time_to_live():
    kube = _Counting([_policy("a")])
    cache = policy_cache.PolicyCache()
    assert list(cache.policies(kube, 60)) == ["a"]
    kube.add_object(_policy("b"))
    assert list(cache.policies(kube, 60)) == ["a"] and kube.lists == 1
    assert sorted(cache.policies(kube, 0)) == ["a", "b"] and kube.lists == 2


def test_a_count_announced_on_the_node_and_missing_from_the_copy_is_listed_for(monkeypatch):
    kube = _Counting([_policy("a", "2026-11-21T11:59:00Z")])
    cache = policy_cache.PolicyCache()
    cache.policies(kube, 60)
    kube.objects[(fencing_names.POLICY_KIND, "", "a")]["status"]["countedAt"] = "2026-11-21T11:59:40Z"
    clock = [1000.0]
    monkeypatch.setattr(policy_cache.time, "monotonic", lambda: clock[0])
    cache._read_at = clock[0]
    announced = dt.datetime(2026, 11, 21, 11, 59, 40, tzinfo=dt.timezone.utc)
    cache.policies(kube, 60, announced)
    assert kube.lists == 1, "within half a second of the last list: no list on a Node's word"
    clock[0] += 1
    assert cache.policies(kube, 60, announced)["a"]["status"]["countedAt"] == "2026-11-21T11:59:40Z"
    assert kube.lists == 2
    clock[0] += 1
    cache.policies(kube, 60, announced)  # the copy has that count now: no list
    cache.policies(kube, 60, announced - dt.timedelta(minutes=5))
    assert kube.lists == 2


def test_a_failed_list_raises_and_keeps_node_fencing_as_it_is_while_node_detacher_goes_on(make_ctx):
    case = _case("cordoned-and-unhealthy-excluded")
    kube = FakeKube([_api(case["request"]["object"])], without_crds=(fencing_names.POLICY_KIND,))
    request = _request(case)
    response = node.sync(request, make_ctx(now=NOW, kube=kube))
    types = [c["type"] for c in (response.get("status") or {}).get("conditions", [])]
    assert "FencingTriaged" not in types and "FencingRequired" not in types
    name = case["request"]["object"]["metadata"]["name"]
    assert kube.nodes[name]["metadata"]["labels"]["node.kubernetes.io/exclude-from-external-load-balancers"] == \
        "nodewarden", "node-detacher went on: its label written"
    assert response["resyncAfterSeconds"] > 0


def test_the_policies_a_request_carries_are_not_what_node_fencing_judges(make_ctx):
    """A body's related policies are a hint of nothing: the API server's list stands for them."""
    case = _case("cordoned-and-unhealthy-excluded")
    kube = FakeKube([_api(case["request"]["object"])])
    request = _request(case)
    assert request.related.of_kind(fencing_names.POLICY_KIND, fencing_names.API_GROUP)
    seen = node.with_policies(request, make_ctx(now=NOW, kube=kube))
    assert seen.related.of_kind(fencing_names.POLICY_KIND, fencing_names.API_GROUP) == []


def _policy_request(case: str):
    from hooks.contract import COMPOSITE

    data = json.loads((FIXTURES / "node-fencing-policy" / f"{case}.json").read_text())
    return parse_request(copy.deepcopy(data["request"]), COMPOSITE, data["hook"]), data


def test_the_written_count_tells_each_admitted_node_once():
    request, _ = _policy_request("count-failed-keeps-the-last-count")
    status = request.parent["status"]
    assert status.get("unhealthyNodeNames"), "the fixture's written count admits a node"
    plan = node_fencing_policy.decide(request, _settings(), NOW, {})
    told = [a for a in plan.actions if a.kind == "kube.annotate-node"]
    assert [a.target for a in told] == status["unhealthyNodeNames"]
    assert told[0].params["annotations"] == {fencing_names.COUNT_ANNOTATION: status["countedAt"]}
    assert plan.response["status"]["announcedNodeNames"] == status["unhealthyNodeNames"]
    again = dataclasses.replace(request, parent={**request.parent, "status": {
        **status, "announcedNodeNames": status["unhealthyNodeNames"]}})
    assert [a for a in node_fencing_policy.decide(again, _settings(), NOW, {}).actions
            if a.kind == "kube.annotate-node"] == []


def test_no_node_is_told_while_the_guard_holds():
    request, _ = _policy_request("count-failed-keeps-the-last-count")
    status = dict(request.parent["status"])
    status["conditions"] = [dict(c, status="True") if c["type"] == fencing_names.STORM_GUARD else c
                            for c in status["conditions"]]
    held = dataclasses.replace(request, parent={**request.parent, "status": status})
    assert [a for a in node_fencing_policy.decide(held, _settings(), NOW, {}).actions
            if a.kind == "kube.annotate-node"] == []


def test_a_node_that_could_not_be_told_is_told_again():
    request, _ = _policy_request("count-failed-keeps-the-last-count")
    plan = node_fencing_policy.decide(request, _settings(), NOW, {})
    told = [a for a in plan.actions if a.kind == "kube.annotate-node"]
    settled = node_fencing_policy.settle(request, plan, [Outcome(told[0], False, error="conflict")],
                                         _settings(), NOW)
    assert told[0].target not in settled.response["status"]["announcedNodeNames"]


def test_each_admitted_node_gets_its_fencing_request_made_before_it_is_told():
    """The FencingRequest is made first (node-fencing decides, on the API server's objects), then the
    annotation brings the Node's own sync, which then finds the request made instead of racing to make it."""
    request, _ = _policy_request("count-failed-keeps-the-last-count")
    plan = node_fencing_policy.decide(request, _settings(), NOW, {})
    announcing = [(a.kind, a.target) for a in plan.actions if a.kind in ("kube.start-fencing", "kube.annotate-node")]
    names_ = request.parent["status"]["unhealthyNodeNames"]
    assert announcing == [(kind, n) for n in names_ for kind in ("kube.start-fencing", "kube.annotate-node")]
    start = next(a for a in plan.actions if a.kind == "kube.start-fencing")
    assert start.params == {"decorator": "node", "uid": start.params["uid"]} and start.params["uid"]


def test_announcements_put_off_by_the_calls_budget_are_made_on_the_next_call(make_ctx, monkeypatch):
    """However many nodes a count admits at once, a call announces only what fits in its budget (it must
    answer, and write its status, well within Metacontroller's hook timeout); the rest stay untold, with no
    failure reported, and the next call comes within a second."""
    from hooks import actuators

    request, _ = _policy_request("count-failed-keeps-the-last-count")
    status = request.parent["status"]
    admitted = [f"n{i}" for i in range(40)]
    records = {f"n{i}": {"apiVersion": "nodewarden.io/v1alpha1", "kind": "UnhealthyNode",
                         "metadata": {"name": f"n{i}"}, "spec": {"nodeUID": f"uid-{i}"}} for i in range(40)}
    crowded = dataclasses.replace(request, parent={**request.parent, "status": {**status, "unhealthyNodeNames": admitted}},
                                  related=ObjectGroups.parse({"UnhealthyNode.nodewarden.io/v1alpha1": records}, "related"))
    clock = [0.0]
    ran = []

    def slow(ctx, action):
        ran.append((action.kind, action.target))
        clock[0] += 0.3

    monkeypatch.setitem(actuators.ACTUATORS, "kube.start-fencing", slow)
    monkeypatch.setitem(actuators.ACTUATORS, "kube.annotate-node", slow)
    ctx = make_ctx(now=NOW, kube=FakeKube())
    plan = node_fencing_policy.decide(crowded, ctx.settings, NOW, {})
    assert isinstance(plan.gate, TimeAllowance) and plan.gate.seconds == policy_count.ANNOUNCE_BUDGET_SECONDS
    gate = TimeAllowance(plan.gate.seconds, clock=lambda: clock[0])  # the test's clock: 0.3 s an action
    outcomes = actuators.act(node_fencing_policy.NAME, plan.actions, ctx, gate, 0.0)
    told_now = {t for k, t in ran if k == "kube.annotate-node"}
    assert 0 < len(told_now) < 40 and len(ran) <= 2 * policy_count.ANNOUNCE_BUDGET_SECONDS / 0.3 + 1
    settled = node_fencing_policy.settle(crowded, plan, outcomes, ctx.settings, NOW)
    assert set(settled.response["status"]["announcedNodeNames"]) == told_now
    assert settled.response["resyncAfterSeconds"] <= 1.0
    deferred = [o for o in outcomes if o.code == DEFERRED]
    assert deferred and all(not o.ok for o in deferred)


def _settings():
    from hooks.config import load_settings

    return load_settings({"NODEWARDEN_CLUSTER_NAME": "test-cluster"})
