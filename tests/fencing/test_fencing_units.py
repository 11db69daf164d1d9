"""Fencing's pure pieces, and its hooks through the real WSGI app."""
from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hooks import durations, runtime
from hooks.app import create_app
from hooks.config import load_settings
from hooks.contract import RequestError
from hooks.fencing import failover, health, names, records, selectors, storm
from hooks.fencing import policy as policies
from hooks.fencing import request_rules as fr
from worlds.envelope import hook_request
from worlds.fake_kube import FakeKube

NOW = dt.datetime(2026, 11, 21, 12, 0, 0, tzinfo=dt.timezone.utc)


@pytest.mark.parametrize("text,seconds", [("60s", 60), ("5m", 300), ("1m30s", 90), ("1.5h", 5400), ("250ms", 0.25),
                                          ("0", 0), (45, 45)])
def test_durations(text, seconds):
    assert durations.parse(text) == seconds


@pytest.mark.parametrize("bad", ["", "60", "s", "1d", "-5s", "5s ago", True, None, -1])
def test_bad_durations(bad):
    with pytest.raises(durations.DurationError):
        durations.parse(bad)


def test_label_selector_semantics():
    sel = selectors.validate({"matchLabels": {"pool": "db"}, "matchExpressions": [
        {"key": "zone", "operator": "In", "values": ["a", "b"]},
        {"key": "spot", "operator": "DoesNotExist"},
        {"key": "tier", "operator": "NotIn", "values": ["gold"]}]}, "sel")
    assert selectors.matches(sel, {"pool": "db", "zone": "a"})
    assert not selectors.matches(sel, {"pool": "db", "zone": "c"})
    assert not selectors.matches(sel, {"pool": "db", "zone": "a", "spot": "1"})
    assert not selectors.matches(sel, {"pool": "db", "zone": "a", "tier": "gold"})
    assert selectors.matches(selectors.validate({}, "s"), {}), "an empty selector selects everything"
    with pytest.raises(RequestError, match=r"sel\.matchExpressions\[0\]\.operator"):
        selectors.validate({"matchExpressions": [{"key": "k", "operator": "Gt"}]}, "sel")
    with pytest.raises(RequestError, match="must not be empty"):
        selectors.validate({"matchExpressions": [{"key": "k", "operator": "In", "values": []}]}, "sel")


def _policy(**spec):
    return {"apiVersion": names.API_VERSION, "kind": names.POLICY_KIND,
            "metadata": {"name": "p", "generation": 3}, "spec": spec}


def test_policy_defaults():
    p = policies.parse(_policy())
    assert p.rules == policies.DEFAULT_RULES
    assert (p.max_unhealthy, p.exclude_control_plane, p.action, p.strategy) == ("40%", True, "Off", "OutOfServiceTaint")
    assert p.failover_selector is None and p.selects({"anything": "x"})
    assert [p.allowed_unhealthy(n) for n in (0, 1, 2, 3, 5, 10)] == [0, 0, 0, 1, 2, 4], "40%, rounded down"
    assert policies.parse(_policy(maxUnhealthy=3)).allowed_unhealthy(100) == 3
    assert policies.parse(_policy(maxUnhealthy="100%")).allowed_unhealthy(7) == 7


@pytest.mark.parametrize("spec,field", [
    ({"maxUnhealthy": "140%"}, "maxUnhealthy"), ({"maxUnhealthy": -1}, "maxUnhealthy"),
    ({"maxUnhealthy": True}, "maxUnhealthy"), ({"action": "Halt"}, "action"),
    ({"recoveryStrategy": "Pray"}, "recoveryStrategy"),
    ({"unhealthyConditions": [{"type": "Ready", "status": "Unknown", "duration": "soon"}]}, "duration"),
    ({"unhealthyConditions": [{"type": "Ready"}]}, "unhealthyConditions[0]"),
    ({"failover": {"namespaces": "noobaa"}}, "failover.namespaces"),
    ({"excludeControlPlane": "yes"}, "excludeControlPlane"),
])
def test_policy_errors_name_the_field(spec, field):
    with pytest.raises(RequestError) as err:
        policies.parse(_policy(**spec))
    assert field in err.value.field


def test_governing_policy_is_first_by_name_and_skips_invalid_and_deleting():
    a = _policy(nodeSelector={"matchLabels": {"pool": "db"}}, maxUnhealthy="900%")
    a["metadata"]["name"] = "a-broken"
    b = _policy(nodeSelector={"matchLabels": {"pool": "db"}})
    b["metadata"].update(name="b-leaving", deletionTimestamp="2026-11-21T11:00:00Z")
    c = _policy(nodeSelector={"matchLabels": {"pool": "db"}})
    c["metadata"]["name"] = "c-ok"
    valid, invalid = policies.parse_all([c, b, a])
    assert list(invalid) == ["a-broken"]
    assert policies.governing(valid, {"pool": "db"}).name == "c-ok"
    assert policies.governing(valid, {"pool": "web"}) is None


def _ready(status, seconds_ago):
    at = (NOW - dt.timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"conditions": [{"type": "Ready", "status": status, "lastTransitionTime": at}]}


def test_health_due_time_comes_from_last_transition_time():
    state = health.assess(_ready("Unknown", 45), policies.DEFAULT_RULES, NOW)
    assert state.unhealthy and not state.due(NOW) and state.seconds_until_due(NOW) == 15
    assert health.assess(_ready("False", 61), policies.DEFAULT_RULES, NOW).due(NOW)
    assert not health.assess(_ready("True", 999), policies.DEFAULT_RULES, NOW).unhealthy
    assert not health.assess({}, policies.DEFAULT_RULES, NOW).unhealthy, "no Ready condition yet is not unhealthy"
    missing = health.assess({"conditions": [{"type": "Ready", "status": "Unknown"}]}, policies.DEFAULT_RULES, NOW)
    assert missing.unhealthy and missing.since == NOW, "no transition time: the clock starts now"


def _node(name, ready="True", ago=10, labels=None):
    return {"metadata": {"name": name, "labels": labels or {}}, "status": _ready(ready, ago)}


def _listing(total, unrecorded=(), ago=0):
    return storm.Listing(NOW - dt.timedelta(seconds=ago), total, tuple(unrecorded), len(unrecorded))


def _count(p, recorded, listing):
    return storm.count(p, storm.judge(p, recorded, NOW, listing), listing)


def _next_list(p, recorded, listing, interval, holding=False):
    return storm.next_list(storm.judge(p, recorded, NOW, listing), listing, NOW, interval, holding)


def test_storm_count_and_verdict():
    p = policies.parse(_policy(maxUnhealthy=1))
    recorded = [_node("a", "Unknown", 70)]
    counts = _count(p, recorded, _listing(3, ["a"]))
    assert (counts.observed, counts.unhealthy, counts.allowed, counts.holds) == (3, 1, 1, False)
    assert counts.unhealthy_names == ("a",)
    recorded.append(_node("b", "False", 1))
    assert _count(p, recorded, _listing(3, ["a"])).holds, "b's record is newer than the list"
    fresh = "2026-11-21T11:59:30Z"  # 30 s before NOW
    counted = policies.parse({**_policy(), "status": {"observedGeneration": 3, "unhealthyNodeNames": ["a"],
                                                      "countedAt": fresh,
                                                      "conditions": [{"type": "StormGuard", "status": "False"}]}})
    assert storm.verdict(counted, "a", NOW, 90).outcome == storm.ALLOWED
    assert storm.verdict(counted, "b", NOW, 90).outcome == storm.PENDING
    holding = policies.parse({**_policy(), "status": {"observedGeneration": 3, "countedAt": fresh,
                                                      "conditions": [{"type": "StormGuard", "status": "True"}]}})
    assert storm.verdict(holding, "a", NOW, 90).outcome == storm.HOLD


def test_a_node_the_list_saw_not_ready_counts_whatever_its_record_says():
    """Any evidence counts, each node once: a record may add to the count, never take from it a node the
    API server's list showed not Ready (a stale record, or a forged one saying Ready)."""
    p = policies.parse(_policy(maxUnhealthy=2))
    listing = storm.listing_of({"total": 10, "notReady": ["a", "b", "c"]}, NOW)
    assert listing.not_ready == ("a", "b", "c")
    assert _count(p, [_node("a", "Unknown")], listing).holds, "a recorded, b and c on the list's word"
    counts = _count(p, [_node("a", "Unknown"), _node("b", "True"), _node("c", "True", ago=600)], listing)
    assert (counts.unhealthy, counts.holds) == (3, True), "records saying Ready do not hide what the list saw"
    assert _count(p, [_node("d", "Unknown", 1)], listing).unhealthy == 4, "a record adds a node the list missed"
    within = storm.listing_of({"total": 10, "notReady": ["b"]}, NOW)
    assert _count(p, [_node("b", "True")], within).unhealthy == 1
    # A listed node whose record finds it healthy now counts until a list no longer shows it: that list
    # comes as soon as lists may.
    assert _next_list(p, [_node("b", "True")], within, 30) == storm.MIN_LIST_GAP_SECONDS
    assert _next_list(p, [_node("b", "Unknown")], within, 30) == 30
    # More than the policy allows: only their number is kept, and the guard holds on it alone.
    many = _count(p, [], storm.listing_of({"total": 10, "notReady": ["x", "y", "z"]}, NOW))
    assert (many.not_ready, many.not_ready_count, many.unhealthy) == (None, 3, 3)
    kept_number = storm.Listing(NOW, 10, None, 3)
    assert _count(p, [_node("x", "True")], kept_number).holds, "a record saying Ready never lowers the number"
    assert _count(p, [_node(n, "Unknown") for n in "pqrs"], kept_number).unhealthy == 4
    # Once records come, the next list comes as soon as lists may, so the count is exact again.
    assert _next_list(p, [], kept_number, 30) == 30
    assert _next_list(p, [_node("x", "Unknown")], kept_number, 30) == storm.MIN_LIST_GAP_SECONDS


def test_a_record_gives_way_to_a_newer_list_that_found_its_node_ready():
    """After a storm the records wait for their Nodes' syncs behind every recovering Node; a count list taken
    well after a record's Ready last changed, and not finding the node not Ready, is the newer reading."""
    p = policies.parse(_policy(maxUnhealthy="10%"))
    stale = [_node(f"n{i}", "False", 300) for i in range(200)]
    listing = _listing(1000, ["n0", "n1", "n2"])
    counts = _count(p, stale, listing)
    assert (counts.unhealthy, counts.holds) == (3, False), "only what the list still finds not Ready"
    assert counts.unhealthy_names == ("n0", "n1", "n2"), "admitted only where the list agrees"
    assert _count(p, stale, storm.Listing(NOW, 1000, None, 3)).holds, "no names kept: the records count"
    # A record newer than the list, or within the clocks' difference of it, is not overruled.
    assert _count(p, [_node(f"n{i}", "False", 5) for i in range(200)], listing).holds
    assert _count(p, stale, _listing(1000, ["n0"], ago=295)).holds
    # Only Ready gives way: another unhealthy condition on the record still counts.
    disk = policies.parse(_policy(maxUnhealthy="10%", unhealthyConditions=[
        {"type": "Ready", "status": "False", "duration": "30s"},
        {"type": "DiskPressure", "status": "True", "duration": "30s"}]))
    pressed = [{"metadata": {"name": f"n{i}", "labels": {}}, "status": {"conditions": [
        *_ready("False", 300)["conditions"],
        {"type": "DiskPressure", "status": "True", "lastTransitionTime": "2026-11-21T11:50:00Z"}]}} for i in range(200)]
    assert _count(disk, pressed, listing).unhealthy == 200


def test_a_holding_guard_lists_as_often_as_lists_may_be_taken():
    p = policies.parse(_policy())
    assert _next_list(p, [], _listing(10, ago=1), 30) == 29
    assert _next_list(p, [], _listing(10, ago=1), 30, holding=True) == storm.MIN_LIST_GAP_SECONDS - 1


def test_a_node_is_admitted_only_on_a_list_taken_shortly_before_it_falls_due():
    p = policies.parse(_policy())  # default rules: 60 s
    node = _node("a", "Unknown", 50)  # falls due in 10 s
    for listed_ago, admitted in ((60, False), (15, False), (0, True)):
        assert _count(p, [node], _listing(10, ["a"], ago=listed_ago)).unhealthy_names == (
            ("a",) if admitted else ()), listed_ago
    # Never on a list from before the node turned unhealthy, however short its duration.
    quick = policies.parse(_policy(unhealthyConditions=[{"type": "Ready", "status": "Unknown", "duration": "3s"}]))
    assert _count(quick, [_node("a", "Unknown", 1)], _listing(10, ago=2)).unhealthy_names == ()
    assert _count(quick, [_node("a", "Unknown", 1)], _listing(10)).unhealthy_names == ("a",)


def test_the_policy_lists_again_before_a_node_falls_due():
    p = policies.parse(_policy())
    assert _next_list(p, [], None, 30) == 0, "never listed: now"
    assert _next_list(p, [], _listing(10, ago=10), 30) == 20, "the interval"
    assert _next_list(p, [_node("a", "Unknown", 45)], _listing(10, ["a"], ago=10), 30) == 10, \
        "5 s before a falls due (in 15 s)"
    quick = policies.parse(_policy(unhealthyConditions=[{"type": "Ready", "status": "Unknown", "duration": "3s"}]))
    assert _next_list(quick, [_node("a", "Unknown", 1)], _listing(10, ago=2), 30) == 3, \
        "a turned unhealthy after the last list and falls due in 2 s, but lists are at least 5 s apart"
    assert _next_list(p, [_node("a", "Unknown", 70)], _listing(10, ["a"], ago=2), 30) == 28, \
        "a is admitted already: nothing sooner than the interval"


def test_a_node_is_recorded_for_any_policy_that_may_count_it():
    ready_disk = {"conditions": [_ready("True", 99)["conditions"][0],
                                 {"type": "DiskPressure", "status": "True", "lastTransitionTime": "2026-11-21T11:59:00Z"}]}
    network = policies.parse(_policy(nodeSelector={"matchLabels": {"pool": "db"}}, unhealthyConditions=[
        {"type": "NetworkUnavailable", "status": "True"}]))
    disk = policies.parse(_policy(nodeSelector={"matchLabels": {"pool": "db"}}, unhealthyConditions=[
        {"type": "DiskPressure", "status": "True", "duration": "1h"}]))
    other = policies.parse(_policy(nodeSelector={"matchLabels": {"pool": "web"}}))
    db = {"pool": "db"}
    assert storm.flagged([network, disk], db, ready_disk, NOW), "the other selecting policy's rule holds"
    assert not storm.flagged([network], db, ready_disk, NOW)
    assert storm.flagged([network], db, _ready("Unknown", 1), NOW), "not Ready, whatever the rules"
    assert not storm.flagged([other], db, _ready("Unknown", 1), NOW), "no policy selects it: no count needs it"
    assert not storm.flagged([network, disk], db, _ready("True", 99), NOW)


def test_label_selectors_as_api_server_queries():
    sel = selectors.validate({"matchLabels": {"pool": "db", "arch": "arm64"}, "matchExpressions": [
        {"key": "zone", "operator": "In", "values": ["a", "b"]}, {"key": "spot", "operator": "DoesNotExist"},
        {"key": "tier", "operator": "NotIn", "values": ["gold"]}, {"key": "ssd", "operator": "Exists"}]}, "sel")
    assert selectors.to_query(sel) == "arch=arm64,pool=db,zone in (a,b),!spot,tier notin (gold),ssd"
    assert selectors.to_query(selectors.validate({}, "sel")) == ""


def test_the_count_list_reads_a_table_of_the_selected_nodes(make_ctx):
    from hooks.kube import nodes as kube_nodes

    kube = FakeKube()
    for name, ready, pool in (("a", "True", "db"), ("b", "Unknown", "db"), ("c", "False", "db"), ("d", "False", "web")):
        kube.add_node({"metadata": {"name": name, "labels": {"pool": pool}}, "spec": {"unschedulable": name == "a"},
                       "status": _ready(ready, 5)})
    kube.add_node({"metadata": {"name": "e", "labels": {"pool": "db"}}, "status": {}})
    found = kube_nodes.readiness(kube, selectors.validate({"matchLabels": {"pool": "db"}}, "sel"))
    assert found == {"total": 4, "notReady": ["b", "c", "e"]}, "cordoned but Ready is Ready; no condition is not"
    assert [c[0] for c in kube.calls] == ["table"]


def test_a_record_holds_only_what_a_count_reads():
    """The conditions a count reads, without heartbeats or messages, and only the labels some policy's
    selector names."""
    by_pool = policies.parse(_policy(nodeSelector={"matchLabels": {"pool": "db"}}))
    by_zone = policies.parse(_policy(nodeSelector={"matchExpressions": [
        {"key": "topology.kubernetes.io/zone", "operator": "NotIn", "values": ["us-east-1c"]}]}))
    labels = {"pool": "db", "topology.kubernetes.io/zone": "us-east-1a", "kubernetes.io/hostname": "n1"}
    status = {"conditions": [
        {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown", "message": "kubelet stopped",
         "lastHeartbeatTime": "2026-11-21T11:59:59Z", "lastTransitionTime": "2026-11-21T11:58:00Z"},
        {"type": "MemoryPressure", "status": "False", "lastTransitionTime": "2026-11-20T10:00:00Z"}],
        "images": [{"names": ["x"], "sizeBytes": 1}]}
    record = records.build("n1", "uid-1", labels, status, [by_pool, by_zone])
    assert record["metadata"] == {"name": "n1", "labels": {"pool": "db", "topology.kubernetes.io/zone": "us-east-1a"}}
    assert record["spec"] == {"nodeUID": "uid-1", "conditions": [
        {"type": "Ready", "status": "Unknown", "lastTransitionTime": "2026-11-21T11:58:00Z"}]}
    # Read back as the node it stands for: each policy judges it as it would the Node.
    seen = records.as_node(record)
    assert by_pool.selects(seen["metadata"]["labels"]) and by_zone.selects(seen["metadata"]["labels"])
    assert health.assess(seen["status"], by_pool.rules, NOW).unhealthy
    # A heartbeat alone changes nothing in the record (no write per heartbeat).
    status["conditions"][0]["lastHeartbeatTime"] = "2026-11-21T12:00:00Z"
    assert records.build("n1", "uid-1", labels, status, [by_pool, by_zone]) == record


@pytest.mark.parametrize("damaged", [
    {}, {"metadata": "x", "spec": []}, {"metadata": {"name": "n1", "labels": {"pool": 7}},
                                        "spec": {"conditions": "Ready"}},
    {"metadata": {"name": "n1"}, "spec": {"conditions": [None, {"status": "True"}, {"type": 5}]}},
    {"metadata": {"name": "n1"}, "spec": {"conditions": [{"type": "Ready", "status": "False"}] * 1000}},
])
def test_a_damaged_record_is_read_as_less_evidence(damaged):
    seen = records.as_node(damaged)
    assert all(isinstance(v, str) for v in seen["metadata"]["labels"].values())
    conds = seen["status"]["conditions"]
    assert len(conds) <= records.MAX_CONDITIONS and all(isinstance(c["type"], str) for c in conds)


def _policy_request(policy, nodes=(), verified=True):
    import dataclasses

    from hooks.contract import parse_request

    request = parse_request(hook_request("node-fencing-policy", policy, related=list(nodes)), "composite", "sync")
    return dataclasses.replace(request, verified=verified)


def test_the_policy_lists_its_nodes_only_when_a_count_is_due(make_ctx):
    from hooks.controllers import node_fencing_policy

    kube = FakeKube()
    kube.add_node({"metadata": {"name": "a", "labels": {"pool": "db"}}, "status": _ready("True", 99)})
    ctx = make_ctx({}, now=NOW, kube=kube)
    policy = _policy(nodeSelector={"matchLabels": {"pool": "db"}})
    policy["metadata"]["uid"] = "uid-p"
    assert node_fencing_policy.gather(_policy_request(policy, verified=False), ctx, NOW) == {}, \
        "a body the API server has not confirmed lists nothing"
    assert kube.calls == []
    assert node_fencing_policy.gather(_policy_request(policy), ctx, NOW) == {"countList": {"total": 1, "notReady": []}}
    policy["status"] = {"observedGeneration": 3, "countedAt": "2026-11-21T11:59:50Z", "observedNodes": 1,
                        "notReadyNodes": 0}
    assert node_fencing_policy.gather(_policy_request(policy), ctx, NOW) == {}, "counted 10 s ago"
    assert len([c for c in kube.calls if c[0] == "table"]) == 1
    kube.unavailable = True
    policy["status"]["countedAt"] = "2026-11-21T11:59:00Z"
    assert "Kubernetes API unreachable" in node_fencing_policy.gather(_policy_request(policy), ctx, NOW)["countError"]


def test_a_frozen_count_never_lets_fencing_through():
    """The last good count listed the node, but the policy sync stopped (e.g. 413 on every request)."""
    status = {"observedGeneration": 3, "unhealthyNodeNames": ["a"],
              "conditions": [{"type": "StormGuard", "status": "False"}]}
    for counted_at in (None, "2026-11-21T11:58:00Z", "2026-11-21T13:00:00Z", "not a time"):
        policy = policies.parse({**_policy(), "status": {**status, **({"countedAt": counted_at} if counted_at else {})}})
        assert storm.verdict(policy, "a", NOW, 90).outcome == storm.PENDING, counted_at


@pytest.mark.parametrize("value", ["²", "¹⁰", "٣", "10000000000000000000000", "-1", "101%", "1.5", True, 1e400])
def test_max_unhealthy_the_crd_might_accept_is_an_invalid_spec_not_a_crash(value):
    with pytest.raises(RequestError):
        policies.parse(_policy(maxUnhealthy=value))


@pytest.mark.parametrize("duration", ["70000000h", "9" * 80 + "s", "-5s", "1e9s"])
def test_absurd_rule_durations_are_an_invalid_spec(duration):
    spec = {"unhealthyConditions": [{"type": "Ready", "status": "Unknown", "duration": duration}]}
    with pytest.raises(RequestError):
        policies.parse({**_policy(), "spec": spec})


def test_tolerations_of_the_out_of_service_taint():
    key, value, effect = names.OUT_OF_SERVICE_TAINT, names.OUT_OF_SERVICE_VALUE, "NoExecute"
    assert fr.tolerates([{"operator": "Exists"}], key, value, effect)
    assert fr.tolerates([{"key": key, "operator": "Exists", "effect": "NoExecute"}], key, value, effect)
    assert fr.tolerates([{"key": key, "value": value}], key, value, effect)
    assert not fr.tolerates([{"key": key, "value": "other"}], key, value, effect)
    assert not fr.tolerates([{"operator": "Exists", "effect": "NoSchedule"}], key, value, effect)
    assert not fr.tolerates([{"operator": "Exists", "tolerationSeconds": 30}], key, value, effect), \
        "tolerationSeconds only delays the eviction"
    assert not fr.tolerates([{"key": "node.kubernetes.io/unreachable", "operator": "Exists"}], key, value, effect)


def test_request_spec_defaults_and_errors():
    spec = fr.parse_spec({"metadata": {"name": "x"}, "spec": {"nodeRef": {"name": "n"}}})
    assert (spec.action, spec.strategy, spec.retries, spec.retry_interval, spec.timeout) == \
        ("Off", "OutOfServiceTaint", 5, 5.0, 60.0)
    for bad, field in (({}, "nodeRef.name"), ({"nodeRef": {"name": "n"}, "retries": 0}, "retries"),
                       ({"nodeRef": {"name": "n"}, "timeout": "0s"}, "timeout"),
                       ({"nodeRef": {"name": "n"}, "action": "Reboot!"}, "action")):
        with pytest.raises(RequestError) as err:
            fr.parse_spec({"metadata": {"name": "x"}, "spec": bad})
        assert field in err.value.field


def _other_request(name, ns, node="n1", **status):
    return {"metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}"}, "spec": {"nodeRef": {"name": node}},
            "status": status}


def test_taint_holders_look_at_every_namespace_and_skip_malformed_requests():
    me = {"metadata": {"uid": "uid-me"}}
    fenced = [{"type": names.FENCING_SUCCEEDED, "status": "True"}]
    others = [
        _other_request("applied", "team-a", recovery={"outOfServiceTaint": "Applied"}),
        _other_request("fenced-unrecorded", "team-b", conditions=fenced),
        _other_request("removed", "team-c", conditions=fenced, recovery={"outOfServiceTaint": "Removed"}),
        _other_request("other-node", "team-d", node="n2", recovery={"outOfServiceTaint": "Applied"}),
        {**_other_request("deleting", "x", recovery={"outOfServiceTaint": "Applied"}),
         "metadata": {"name": "deleting", "namespace": "x", "uid": "u-d", "deletionTimestamp": "2026-01-01T00:00:00Z"}},
        {**_other_request("me", "x", recovery={"outOfServiceTaint": "Applied"}), "metadata": {"uid": "uid-me"}},
        {"metadata": "odd", "spec": ["x"], "status": 5},
        "not even an object",
    ]
    assert fr.taint_holders(me, others, "n1") == ["team-a/applied", "team-b/fenced-unrecorded"]
    resource_deletion = _other_request("rd", "team-e", conditions=fenced)
    resource_deletion["spec"]["recoveryStrategy"] = "ResourceDeletion"
    assert fr.taint_holders(me, [resource_deletion], "n1") == []


def test_the_out_of_service_taint_goes_only_on_the_node_of_the_verified_uid():
    """FakeKube stands in for the API server: the Node was replaced after the checks, before the patch."""
    from hooks.kube import taints

    kube = FakeKube()
    kube.add_node({"metadata": {"name": "n1", "uid": "uid-new"}, "spec": {}})
    with pytest.raises(taints.NodeReplaced):
        taints.add(kube, "n1", names.OUT_OF_SERVICE_TAINT, "NoExecute", names.OUT_OF_SERVICE_VALUE, uid="uid-old")
    assert kube.taints("n1") == []
    assert taints.add(kube, "n1", names.OUT_OF_SERVICE_TAINT, "NoExecute", names.OUT_OF_SERVICE_VALUE, uid="uid-new")


@given(st.from_regex(r"[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?", fullmatch=True))
def test_request_names_are_valid_object_names(node_name):
    name = names.request_name(node_name)
    assert len(name) <= 253 and name.startswith("fence-")
    assert names.request_name(node_name) == name


def test_single_writer_detection():
    pod = {"metadata": {"namespace": "ns"}, "spec": {"volumes": [
        {"name": "a", "persistentVolumeClaim": {"claimName": "c"}}]}}
    assert failover.single_writer(pod, {"ns/c": {"accessModes": ["ReadWriteOnce", "ReadOnlyMany"]}})
    assert failover.single_writer(pod, {}), "an unreadable claim counts as single-writer"
    assert failover.single_writer(pod, {"ns/c": {"accessModes": ["ReadWriteMany"]}}) is None
    assert failover.claim_keys(pod) == ["ns/c"]


# --------------------------------------------------------------------------- HTTP


@pytest.fixture(scope="module")
def client():
    env = {"NODEWARDEN_CLUSTER_NAME": "c", "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
           "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x"}
    ctx = runtime.Context(load_settings(env), events_inline=True)
    ctx._kube = FakeKube()
    return create_app(ctx).test_client()


def test_customize_hooks_relate_what_each_controller_reads(client):
    fence = client.post("/node-fencing/customize", json={"controller": {}, "parent": {
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}}).get_json()
    assert fence == {"relatedResources": [{"apiVersion": "nodewarden.io/v1alpha1", "resource": "nodefencingpolicies"}]}
    pol = client.post("/node-fencing-policy/customize", json={"controller": {}, "parent": _policy(
        nodeSelector={"matchLabels": {"pool": "db"}})}).get_json()
    assert pol == {"relatedResources": [{"apiVersion": names.API_VERSION, "resource": "unhealthynodes",
                                         "labelSelector": {"matchLabels": {"pool": "db"}}}]}
    req = client.post("/fencing-request/customize", json={"controller": {}, "parent": {
        "apiVersion": names.API_VERSION, "kind": "FencingRequest",
        "metadata": {"name": "f", "namespace": "nodewarden-system"}, "spec": {"nodeRef": {"name": "n1"}}}}).get_json()
    assert req == {"relatedResources": [{"apiVersion": "v1", "resource": "nodes", "names": ["n1"]}]}


@pytest.mark.parametrize("spec, field", [({"retries": "many"}, "retries"), ({"timeout": "0s"}, "timeout"),
                                         ({"retries": 1e300}, "retries"), ({"retryInterval": "70000000h"}, "retryInterval")])
def test_an_unreadable_fencing_request_spec_is_reported_in_its_status(spec, field):
    """Not a 400 on every sync: the request says why it will not run (an Event too, for one the API server
    has), and nothing is done."""
    request = {"apiVersion": names.API_VERSION, "kind": "FencingRequest",
               "metadata": {"name": "f", "namespace": "nodewarden-system", "uid": "fr-uid"},
               "spec": {"nodeRef": {"name": "n1"}, **spec}}
    env = {"NODEWARDEN_CLUSTER_NAME": "c", "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
           "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x"}
    ctx = runtime.Context(load_settings(env), events_inline=True)
    ctx._kube = FakeKube()
    client = create_app(ctx).test_client()
    body = {"controller": {}, "parent": request, "children": {}, "related": {}}
    for on_the_api_server in (False, True):
        if on_the_api_server:
            ctx._kube.add_object(request)
        r = client.post("/fencing-request/sync", json=body)
        assert r.status_code == 200
        status = r.get_json()["status"]
        assert status["phase"] == "Failed" and status["errorReason"] == "InvalidSpec"
        assert f"parent.spec.{field}" in status["errorMessage"]
        assert ctx._kube.reasons() == (["FencingFailed"] if on_the_api_server else [])


def test_a_healthy_node_sync_over_http_writes_nothing(client):
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    r = client.post("/node-fencing/sync", json=hook_request("node-fencing", node))
    assert r.status_code == 200
    assert r.get_json() == {"labels": {}, "annotations": {}, "status": None, "attachments": []}


def test_fencing_crds_parse_into_structural_schemas():
    """Every schema property is a plain field name (a flow-mapping slip makes prose a field)."""
    import pathlib

    import yaml

    root = pathlib.Path(__file__).parents[2] / "kustomize" / "base" / "crds"
    for name in ("nodefencingpolicies.yaml", "fencingrequests.yaml"):
        crd = yaml.safe_load((root / name).read_text())

        def walk(schema, path):
            for key, sub in (schema.get("properties") or {}).items():
                assert key.isidentifier(), f"{name}: {path}.{key}"
                walk(sub, f"{path}.{key}")
            if isinstance(schema.get("items"), dict):
                walk(schema["items"], f"{path}[]")

        walk(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"], name)


def test_the_fencing_request_crd_bounds_what_the_hook_would_refuse():
    """The API server refuses what parse_spec would report as InvalidSpec, and a spec never changes under a fence."""
    import pathlib
    import re

    import yaml

    path = pathlib.Path(__file__).parents[2] / "kustomize" / "base" / "crds" / "fencingrequests.yaml"
    schema = yaml.safe_load(path.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    spec = schema["properties"]["spec"]
    assert {"rule": "self == oldSelf", "message": "spec is immutable; delete the FencingRequest and create another"} \
        in spec["x-kubernetes-validations"]
    props = spec["properties"]
    assert (props["retries"]["minimum"], props["retries"]["maximum"]) == (1, fr.MAX_RETRIES)
    for key in ("retryInterval", "timeout"):
        pattern = re.compile(props[key]["pattern"])
        assert pattern.match("1m30s") and not pattern.match("Infinity") and not pattern.match("-5s")
        assert "duration('1h')" in props[key]["x-kubernetes-validations"][0]["rule"]
    assert "duration(self) > duration('0s')" in props["timeout"]["x-kubernetes-validations"][0]["rule"]
    status = schema["properties"]["status"]["properties"]
    assert status["unverifiedCalls"]["type"] == "integer"
    assert status["recovery"]["properties"]["nodeReadyAgainTime"]["format"] == "date-time"


def test_a_count_stamped_in_the_future_is_not_trusted():
    """A countedAt ahead of this clock would stay 'fresh' long after its sync stopped."""
    status = {"observedGeneration": 3, "unhealthyNodeNames": ["a"], "countedAt": "2026-11-21T12:01:00Z",
              "conditions": [{"type": "StormGuard", "status": "False"}]}
    policy = policies.parse({**_policy(), "status": status})
    assert storm.verdict(policy, "a", NOW, 90).outcome == storm.PENDING
    status["countedAt"] = "2026-11-21T12:00:05Z"  # a few seconds of clock skew between replicas
    assert storm.verdict(policies.parse({**_policy(), "status": status}), "a", NOW, 90).outcome == storm.ALLOWED


@pytest.mark.parametrize("interval, max_age, expected", [("30", "90", 30), ("30", "30", 10), ("600", "90", 30)])
def test_policies_are_counted_well_within_the_count_max_age(interval, max_age, expected):
    """Whatever the two settings say, a running policy sync never lets its own count expire."""
    from hooks.controllers import node_fencing_policy
    from hooks.contract import parse_request

    settings = load_settings({"NODEWARDEN_CLUSTER_NAME": "c", "NODEWARDEN_FENCING_COUNT_INTERVAL_SECONDS": interval,
                              "NODEWARDEN_FENCING_COUNT_MAX_AGE_SECONDS": max_age})
    body = {"controller": {}, "parent": _policy(), "children": {}, "related": {}}
    plan = node_fencing_policy.decide(parse_request(body, "composite", "sync"), settings, NOW,
                                      {"countList": {"total": 0, "notReady": []}})
    assert plan.response["resyncAfterSeconds"] == expected, "at most a third of the max age, at most the interval"


def test_policy_lists_are_bounded():
    rule = {"type": "Ready", "status": "Unknown", "duration": "60s"}
    with pytest.raises(RequestError, match="unhealthyConditions"):
        policies.parse(_policy(unhealthyConditions=[rule] * 33))
    with pytest.raises(RequestError, match="namespaces"):
        policies.parse(_policy(failover={"namespaces": [f"ns{i}" for i in range(257)]}))
    assert len(policies.parse(_policy(unhealthyConditions=[rule] * 32)).rules) == 32


@pytest.mark.parametrize("spec", [{"maxUnhealthy": "²"},
                                  {"unhealthyConditions": [{"type": "Ready", "status": "Unknown",
                                                            "duration": "70000000h"}]}])
def test_a_policy_the_crd_might_accept_never_fails_every_node_sync(client, spec):
    """The policy says why it is invalid; every Node's sync (healthy or not) still answers, ignoring it."""
    policy = _policy(**spec)
    policy["metadata"]["uid"] = "uid-p"
    for ready in ("True", "Unknown"):
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "uid": "u1", "labels": {}},
                "status": {"conditions": [{"type": "Ready", "status": ready,
                                           "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}
        r = client.post("/node-fencing/sync", json=hook_request("node-fencing", node, related=[policy]))
        assert r.status_code == 200, r.get_data(as_text=True)
        assert r.get_json()["attachments"] == [] and r.get_json()["status"] is None, "an invalid policy governs nothing"
    r = client.post("/node-fencing-policy/sync", json={"controller": {}, "parent": policy, "children": {},
                                                        "related": {}})
    assert r.status_code == 200
    valid = next(c for c in r.get_json()["status"]["conditions"] if c["type"] == names.POLICY_VALID)
    assert valid["status"] == "False" and "parent.spec" in valid["message"]


def test_healthy_and_merely_triaged_nodes_cost_no_api_call(make_ctx):
    """Every Node syncs through node-fencing: a healthy node, and a triaged one once its conditions are
    written, cost no API call. A transition (an Event, a taint) follows the API server's copy: read once."""
    from hooks.dispatch import serve

    kube = FakeKube()  # records every call; no API server here
    ctx = make_ctx({}, now=NOW, kube=kube)
    policy = _policy()
    policy["status"] = {"observedGeneration": 3, "countedAt": "2026-11-21T11:59:50Z", "unhealthyNodeNames": ["n1"],
                        "conditions": [{"type": "StormGuard", "status": "False"}]}
    healthy = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "uid": "u1", "labels": {}},
               "status": _ready("True", 9999)}
    serve("node-fencing", "sync", hook_request("node-fencing", healthy, related=[policy]), ctx)
    assert kube.calls == []
    triaged = {**healthy, "status": _ready("Unknown", 5)}
    serve("node-fencing", "sync", hook_request("node-fencing", triaged, related=[policy]), ctx)
    reads = [c for c in kube.calls if c[0] != "create"]
    assert reads and len(reads) <= 3, reads
    settled = dict(triaged, status=triaged["status"] | {"conditions": [
        *triaged["status"]["conditions"],
        *({"type": t, "status": v, "reason": r, "message": "", "lastTransitionTime": "2026-11-21T11:59:55Z",
           "lastHeartbeatTime": "2026-11-21T11:59:55Z"} for t, v, r in (
            ("FencingTriaged", "True", "UnhealthyCondition"), ("FencingRequired", "False", "WaitingForDuration"),
            ("FencingComplete", "False", "NotRequired")))]})
    settled["spec"] = {"taints": [{"key": "node.kubernetes.io/fencingtriaged", "effect": "PreferNoSchedule"}]}
    kube.calls.clear()
    serve("node-fencing", "sync", hook_request("node-fencing", settled, related=[policy]), ctx)
    assert kube.calls == [], "a steady triaged node costs nothing"


def test_a_forged_policy_body_lists_nothing_writes_no_metric_and_says_nothing(make_ctx):
    """Bodies naming policies the API server does not have (or the real one with another uid): no Node list,
    no metric series, no Event. The real policy, by name and uid, is counted."""
    from hooks import metrics
    from hooks.dispatch import serve

    kube = FakeKube()
    kube.add_node({"metadata": {"name": "a", "labels": {"pool": "db"}}, "status": _ready("True", 99)})
    real = _policy(nodeSelector={"matchLabels": {"pool": "db"}})
    real["metadata"].update(name="real-db", uid="uid-real-db")
    kube.add_object(real)
    ctx = make_ctx({}, now=NOW, kube=kube)
    forged = [dict(real, metadata={**real["metadata"], "name": f"invented-{i}", "uid": f"uid-{i}"}) for i in range(3)]
    forged.append(dict(real, metadata={**real["metadata"], "uid": "uid-not-the-real-one"}))
    for body in forged:
        serve("node-fencing-policy", "sync", hook_request("node-fencing-policy", body), ctx)
    exposed = metrics.exposition().decode()
    assert not any(c[0] == "table" for c in kube.calls), "no Node list for a body alone"
    assert "invented-" not in exposed and 'policy="real-db"' not in exposed
    assert kube.events == []
    serve("node-fencing-policy", "sync", hook_request("node-fencing-policy", real), ctx)
    assert [c[0] for c in kube.calls].count("table") == 1
    assert 'nodewarden_fencing_storm_guard_active{policy="real-db"} 0.0' in metrics.exposition().decode()
