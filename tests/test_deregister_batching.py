"""DeregisterTargets coalesced per target group across the nodes a process deregisters at once (moto)."""
from __future__ import annotations

import threading

import pytest
from botocore.exceptions import ClientError

from hooks.aws import elb
from tests.test_node_detacher_moto import _instances, _members, _tg

pytestmark = pytest.mark.moto


class _Counted:
    """An elbv2 client whose DeregisterTargets calls are counted (and may be refused once)."""

    def __init__(self, client, refuse: str | None = None):
        self._client, self.calls, self._refuse = client, [], refuse
        self._lock = threading.Lock()

    def deregister_targets(self, **params):
        with self._lock:
            self.calls.append([t["Id"] for t in params["Targets"]])
            refuse, self._refuse = self._refuse, None if len(params["Targets"]) > 1 else self._refuse
        if refuse and len(params["Targets"]) > 1:
            raise ClientError({"Error": {"Code": refuse, "Message": "refused"}}, "DeregisterTargets")
        return self._client.deregister_targets(**params)


def _group_of(aws, count):
    vpc, ids = _instances(aws("ec2"), count)
    elbv2 = aws("elbv2")
    arn = _tg(elbv2, vpc, "wave", {})
    elbv2.register_targets(TargetGroupArn=arn, Targets=[{"Id": i, "Port": 30080} for i in ids])
    return elbv2, arn, ids


def _wave(coalescer, client, arn, ids) -> list:
    results, threads = {}, []
    start = threading.Barrier(len(ids))

    def leave(instance):
        start.wait()
        try:
            results[instance] = coalescer.deregister(client, "us-east-1", arn, instance, [30080], window=0.05)
        except Exception as exc:  # noqa: BLE001
            results[instance] = exc
    for instance in ids:
        threads.append(threading.Thread(target=leave, args=(instance,)))
        threads[-1].start()
    for t in threads:
        t.join(30)
    return [results[i] for i in ids]


def test_nodes_leaving_together_share_one_call_per_group_and_window(aws):
    elbv2, arn, ids = _group_of(aws, 12)
    counted = _Counted(elbv2)
    assert _wave(elb.DeregisterCoalescer(), counted, arn, ids) == [None] * 12
    assert _members(elbv2, arn) == []
    assert sorted(i for call in counted.calls for i in call) == sorted(ids)
    # The first node's call goes at once; every node asking while it is under way joins the next one.
    assert len(counted.calls) <= 3, counted.calls


def test_a_lone_node_waits_for_no_window(aws, monkeypatch):
    elbv2, arn, (instance,) = _group_of(aws, 1)
    slept = []
    monkeypatch.setattr(elb.time, "sleep", lambda s: slept.append(s))
    assert elb.DeregisterCoalescer().deregister(elbv2, "us-east-1", arn, instance, [30080], window=0.05) is None
    assert slept == [] and _members(elbv2, arn) == []


def test_a_batch_naming_a_target_aws_does_not_know_is_redone_node_by_node(aws):
    """InvalidTarget says nothing about which target: nobody is told their targets left on another's account."""
    elbv2, arn, ids = _group_of(aws, 6)
    counted = _Counted(elbv2, refuse="InvalidTarget")
    coalescer = elb.DeregisterCoalescer()
    coalescer.deregister(counted, "us-east-1", arn, ids[0], [30080], window=0.05)  # the group is busy now
    assert _wave(coalescer, counted, arn, ids[1:]) == [None] * 5
    assert _members(elbv2, arn) == []


def test_a_failed_batch_fails_every_node_in_it(aws):
    elbv2, arn, ids = _group_of(aws, 6)
    counted = _Counted(elbv2, refuse="Throttling")
    coalescer = elb.DeregisterCoalescer()
    coalescer.deregister(counted, "us-east-1", arn, ids[0], [30080], window=0.05)
    results = _wave(coalescer, counted, arn, ids[1:])
    batched = [r for r in results if isinstance(r, ClientError)]
    assert batched and all(r.response["Error"]["Code"] == "Throttling" for r in batched)
    # What was refused is still registered: none of those nodes may record it as done.
    left = {i for i, _ in _members(elbv2, arn)}
    assert {i for i, r in zip(ids[1:], results) if isinstance(r, ClientError)} <= left


def test_the_deregister_action_goes_through_the_coalescer(make_ctx, monkeypatch):
    from hooks import actuators
    from hooks.plan import Action

    seen = []
    monkeypatch.setattr(elb.DEREGISTRATIONS, "submit", lambda *a, **k: seen.append((a[2:], k)) or (lambda: None))
    ctx = make_ctx(env={"NODEWARDEN_DEREGISTER_BATCH_WINDOW_SECONDS": "0.03"})
    action = Action("elbv2.deregister", "arn:tg", {"instance": "i-1", "region": "us-east-1", "ports": [80]})
    assert actuators.act("node-detacher", [action], ctx)[0].ok
    assert seen == [(("arn:tg", "i-1", [80]), {"window": 0.03, "send_within": None})]


class _Meeting:
    """An elbv2 client whose DeregisterTargets waits until ``parties`` calls are under way at once."""

    def __init__(self, parties: int):
        self.barrier = threading.Barrier(parties, timeout=5)
        self.groups = []

    def deregister_targets(self, **params):
        self.groups.append(params["TargetGroupArn"])
        self.barrier.wait()  # BrokenBarrierError unless every group's call is in flight together


def test_a_nodes_groups_are_all_handed_over_before_any_is_waited_on(make_ctx, monkeypatch):
    """One after the other, the first call would wait alone at the barrier and fail."""
    from hooks import actuators
    from hooks.plan import Action

    meeting = _Meeting(3)
    ctx = make_ctx()
    monkeypatch.setattr(ctx.aws, "client", lambda service, region=None: meeting)
    actions = [Action("elbv2.deregister", f"arn:tg-{g}", {"instance": "i-1", "region": "us-east-1",
                                                          "ports": [80]}) for g in range(3)]
    outcomes = actuators.act("node-detacher", actions, ctx)
    assert [o.ok for o in outcomes] == [True] * 3, [o.error for o in outcomes]
    assert [o.action.target for o in outcomes] == ["arn:tg-0", "arn:tg-1", "arn:tg-2"]  # in plan order
    assert sorted(meeting.groups) == ["arn:tg-0", "arn:tg-1", "arn:tg-2"]


def test_a_call_that_never_answers_fails_its_ticket_at_the_deadline(monkeypatch):
    stuck = threading.Event()

    class _Hanging:
        def deregister_targets(self, **params):
            stuck.wait(10)

    coalescer = elb.DeregisterCoalescer()
    monkeypatch.setattr(coalescer, "TICKET_DEADLINE_SECONDS", 0.2)
    ticket = coalescer.submit(_Hanging(), "us-east-1", "arn:tg", "i-1", [80])
    with pytest.raises(TimeoutError, match="arn:tg"):
        ticket()
    stuck.set()


def test_a_precondition_that_fails_keeps_only_its_own_deregistration_back(make_ctx, monkeypatch):
    from hooks import actuators
    from hooks.plan import PRECONDITION, Action, SameObject

    calls = []
    monkeypatch.setattr(elb.DEREGISTRATIONS, "submit", lambda *a, **k: calls.append(a[2]) or (lambda: None))
    monkeypatch.setattr(actuators, "_precondition_failure", lambda ctx, r: "the Node was replaced")
    ctx = make_ctx()
    plain = Action("elbv2.deregister", "arn:a", {"instance": "i-1", "region": "us-east-1", "ports": [80]})
    guarded = Action("elbv2.deregister", "arn:b", {"instance": "i-1", "region": "us-east-1", "ports": [80]},
                     requires=(SameObject("Node", "n1", "u1"),))
    outcomes = actuators.act("node-detacher", [guarded, plain], ctx)
    assert [o.ok for o in outcomes] == [False, True] and outcomes[0].code == PRECONDITION
    assert calls == ["arn:a"]



def test_a_node_leaving_many_groups_reuses_the_connections_of_the_process(aws, caplog):
    """Every group's call in flight at once: the process's client keeps a connection for each (botocore's
    default pool of 10 discarded the rest, a new connection, and with AWS a new TLS handshake, per call)."""
    from hooks.aws.clients import AwsClients
    from hooks.config import load_settings

    vpc, ids = _instances(aws("ec2"), 1)
    admin = aws("elbv2")
    arns = [_tg(admin, vpc, f"g{n}", {}) for n in range(24)]
    for arn in arns:
        admin.register_targets(TargetGroupArn=arn, Targets=[{"Id": ids[0], "Port": 30080}])
    client = AwsClients(load_settings({})).client("elbv2")
    coalescer = elb.DeregisterCoalescer(window=0.02)
    caplog.set_level("WARNING", logger="urllib3.connectionpool")
    for _ in range(2):  # the second round runs on the connections the first left in the pool
        tickets = [coalescer.submit(client, "us-east-1", arn, ids[0], [30080]) for arn in arns]
        assert [ticket() for ticket in tickets] == [None] * len(arns)
    assert not [r for r in caplog.records if "pool is full" in r.getMessage()]
    assert all(not admin.describe_target_health(TargetGroupArn=arn)["TargetHealthDescriptions"] for arn in arns)


class _HeldFirst:
    """An elbv2 client whose first DeregisterTargets waits for ``go`` before it reaches moto (a slow call
    that keeps its group busy; moto answers at once, so the wait is the test's)."""

    def __init__(self, client):
        self._client, self.go, self.calls = client, threading.Event(), []

    def deregister_targets(self, **params):
        self.calls.append(sorted(t["Id"] for t in params["Targets"]))
        if len(self.calls) == 1:
            assert self.go.wait(10)
        return self._client.deregister_targets(**params)


def test_targets_whose_deadline_passes_while_their_group_is_busy_are_never_sent(aws):
    elbv2, arn, (first, late, timely) = _group_of(aws, 3)
    client = _HeldFirst(elbv2)
    coalescer = elb.DeregisterCoalescer()
    busy = coalescer.submit(client, "us-east-1", arn, first, [30080], window=0.01)
    waiting_late = coalescer.submit(client, "us-east-1", arn, late, [30080], window=0.01, send_within=0.05)
    waiting_timely = coalescer.submit(client, "us-east-1", arn, timely, [30080], window=0.01, send_within=30)
    threading.Event().wait(0.3)  # the late one's deadline passes while the group's call is under way
    client.go.set()
    assert busy() is None and waiting_timely() is None
    with pytest.raises(elb.NotSent):
        waiting_late()
    assert client.calls == [[first], [timely]]
    assert _members(elbv2, arn) == [(late, 30080)], "never sent, so still registered"


def test_a_deadline_already_passed_sends_nothing(aws):
    elbv2, arn, (instance,) = _group_of(aws, 1)
    counted = _Counted(elbv2)
    with pytest.raises(elb.NotSent):
        elb.DeregisterCoalescer().submit(counted, "us-east-1", arn, instance, [30080], send_within=0)
    assert counted.calls == [] and _members(elbv2, arn) == [(instance, 30080)]


def test_a_deregistration_past_its_send_by_is_not_sent_on_the_contexts_clock(aws, make_ctx):
    """Both kinds: the deadline is the action's sendBy, read on the hook's clock right before the call."""
    import datetime as dt

    from hooks import actuators, timefmt
    from hooks.plan import Action

    vpc, (instance,) = _instances(aws("ec2"), 1)
    elbv2, classic = aws("elbv2"), aws("elb")
    arn = _tg(elbv2, vpc, "late", {})
    elbv2.register_targets(TargetGroupArn=arn, Targets=[{"Id": instance, "Port": 30080}])
    classic.create_load_balancer(LoadBalancerName="late", AvailabilityZones=["us-east-1a"],
                                 Listeners=[{"Protocol": "TCP", "LoadBalancerPort": 80, "InstancePort": 30080}])
    classic.register_instances_with_load_balancer(LoadBalancerName="late", Instances=[{"InstanceId": instance}])
    now = dt.datetime(2026, 11, 21, 12, 0, tzinfo=dt.timezone.utc)
    ctx = make_ctx(now=now)

    def actions(send_by):
        params = {"instance": instance, "region": "us-east-1", "sendBy": timefmt.fmt(send_by)}
        return [Action("elbv2.deregister", arn, {**params, "ports": [30080]}),
                Action("elb.deregister", "late", {**params, "ports": []})]

    late = actuators.act("node-detacher", actions(now - dt.timedelta(seconds=1)), ctx)
    assert [(o.ok, o.code) for o in late] == [(False, "NotSent")] * 2
    assert _members(elbv2, arn) == [(instance, 30080)]
    assert classic.describe_load_balancers(LoadBalancerNames=["late"])["LoadBalancerDescriptions"][0]["Instances"]
    in_time = actuators.act("node-detacher", actions(now + dt.timedelta(seconds=5)), ctx)
    assert [o.ok for o in in_time] == [True, True]
    assert _members(elbv2, arn) == []
    assert not classic.describe_load_balancers(LoadBalancerNames=["late"])["LoadBalancerDescriptions"][0]["Instances"]


def test_a_registration_past_its_send_by_is_not_sent_on_the_contexts_clock(aws, make_ctx):
    """Registrations carry the same deadline: one held up past it never goes out, so none lands long after the
    reading of the Node it rests on (when the node may be leaving again)."""
    import datetime as dt

    from hooks import actuators, timefmt
    from hooks.plan import Action

    vpc, (instance,) = _instances(aws("ec2"), 1)
    elbv2, classic = aws("elbv2"), aws("elb")
    arn = _tg(elbv2, vpc, "late", {})
    classic.create_load_balancer(LoadBalancerName="late", AvailabilityZones=["us-east-1a"],
                                 Listeners=[{"Protocol": "TCP", "LoadBalancerPort": 80, "InstancePort": 30080}])
    now = dt.datetime(2026, 11, 21, 12, 0, tzinfo=dt.timezone.utc)
    ctx = make_ctx(now=now)

    def actions(send_by):
        params = {"instance": instance, "region": "us-east-1", "sendBy": timefmt.fmt(send_by)}
        return [Action("elbv2.register", arn, {**params, "ports": [30080]}),
                Action("elb.register", "late", {**params, "ports": []})]

    late = actuators.act("node-detacher", actions(now - dt.timedelta(seconds=1)), ctx)
    assert [(o.ok, o.code) for o in late] == [(False, "NotSent")] * 2
    assert _members(elbv2, arn) == []
    assert not classic.describe_load_balancers(LoadBalancerNames=["late"])["LoadBalancerDescriptions"][0]["Instances"]
    in_time = actuators.act("node-detacher", actions(now + dt.timedelta(seconds=5)), ctx)
    assert [o.ok for o in in_time] == [True, True]
    assert _members(elbv2, arn) == [(instance, 30080)]
    assert classic.describe_load_balancers(LoadBalancerNames=["late"])["LoadBalancerDescriptions"][0]["Instances"]
