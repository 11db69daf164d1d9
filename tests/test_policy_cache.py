"""The Node hook reads NodeFencingPolicies itself (a short-lived copy), and the policy controller tells the Nodes
its count admitted, since the Node decorator relates no policy."""
from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import json
import pathlib

from hooks.contract import parse_request
from hooks.controllers import node, node_fencing_policy
from hooks.fencing import names, policy_cache
from hooks.plan import Outcome
from tests.fake_kube import FakeKube
from tests.test_node_controller import _api, _case, _request

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
NOW = dt.datetime(2026, 11, 21, 12, 0, tzinfo=dt.timezone.utc)


def _policy(name: str, counted: str | None = None) -> dict:
    return {"apiVersion": names.API_VERSION, "kind": names.POLICY_KIND,
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
    kube.objects[(names.POLICY_KIND, "", "a")]["status"]["countedAt"] = "2026-11-21T11:59:40Z"
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
    kube = FakeKube([_api(case["request"]["object"])], without_crds=(names.POLICY_KIND,))
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
    assert request.related.of_kind(names.POLICY_KIND, names.API_GROUP)
    seen = node.with_policies(request, make_ctx(now=NOW, kube=kube))
    assert seen.related.of_kind(names.POLICY_KIND, names.API_GROUP) == []


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
    assert told[0].params["annotations"] == {names.COUNT_ANNOTATION: status["countedAt"]}
    assert plan.response["status"]["announcedNodeNames"] == status["unhealthyNodeNames"]
    again = dataclasses.replace(request, parent={**request.parent, "status": {
        **status, "announcedNodeNames": status["unhealthyNodeNames"]}})
    assert [a for a in node_fencing_policy.decide(again, _settings(), NOW, {}).actions
            if a.kind == "kube.annotate-node"] == []


def test_no_node_is_told_while_the_guard_holds():
    request, _ = _policy_request("count-failed-keeps-the-last-count")
    status = dict(request.parent["status"])
    status["conditions"] = [dict(c, status="True") if c["type"] == names.STORM_GUARD else c
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


def _settings():
    from hooks.config import load_settings

    return load_settings({"NODEWARDEN_CLUSTER_NAME": "test-cluster"})
