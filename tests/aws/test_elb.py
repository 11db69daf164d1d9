"""hooks/aws/elb.py: DeregisterTargets coalesced per target group across the nodes a process deregisters at once
and a classic ELB's instances read (moto); targets' health read in batches and shared between the nodes asking,
where AWS answers as moto does not (botocore's Stubber)."""
from __future__ import annotations

import threading

import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from hooks.aws import elb
from hooks.plan import DEFERRED
from tests.support.load_balancers import (make_instances, make_target_group, tg_members,
                                          world)  # noqa: F401 - world is a fixture
from tests.support.stubbed_aws import ACCOUNT, stubbed_client


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

    def __getattr__(self, name):  # every other call as the client makes it
        return getattr(self._client, name)


def _group_of(aws, count):
    vpc, ids = make_instances(aws("ec2"), count)
    elbv2 = aws("elbv2")
    arn = make_target_group(elbv2, vpc, "wave", {})
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


@pytest.mark.moto
def test_nodes_leaving_together_share_one_call_per_group_and_window(aws):
    elbv2, arn, ids = _group_of(aws, 12)
    counted = _Counted(elbv2)
    assert _wave(elb.DeregisterCoalescer(), counted, arn, ids) == [None] * 12
    assert tg_members(elbv2, arn) == []
    assert sorted(i for call in counted.calls for i in call) == sorted(ids)
    # The first node's call goes at once; every node asking while it is under way joins the next one.
    assert len(counted.calls) <= 3, counted.calls


@pytest.mark.moto
def test_a_call_carries_at_most_a_batch_and_who_asks_after_it_is_full_goes_in_the_next(aws, monkeypatch):
    """One call, one token: a batch closes to newcomers at BATCH targets (3 here), so no call of a wave
    makes a second call its token did not pay for (refused by the limiter: its bucket holds one token, the
    next 5 s away on the limiter's clock, which its sleep moves)."""
    from hooks.aws import rate_limits
    from hooks.aws.clients import AwsClients
    from hooks.config import load_settings
    from worlds.clock import ManualClock

    monkeypatch.setattr(elb, "BATCH", 3)
    elbv2, arn, ids = _group_of(aws, 8)
    clock = ManualClock()
    limiter = rate_limits.Limiter(0.5, {"elb-mutating": 0.05}, clock=clock, sleep=clock.sleep)
    client = AwsClients(load_settings({"AWS_REGION": "us-east-1"}), limiter=limiter).client("elbv2")
    calls = []
    client.meta.events.register("provide-client-params.elastic-load-balancing-v2.DeregisterTargets",
                                lambda params, **_: calls.append(sorted(t["Id"] for t in params["Targets"])))
    coalescer = elb.DeregisterCoalescer()
    coalescer.deregister(client, "us-east-1", arn, ids[0], [30080], window=0.05)
    assert _wave(coalescer, client, arn, ids[1:]) == [None] * 7
    assert tg_members(elbv2, arn) == []
    assert all(len(call) <= 3 for call in calls) and sorted(sum(calls, [])) == sorted(ids), calls


@pytest.mark.moto
def test_a_lone_node_waits_for_no_window(aws, monkeypatch):
    elbv2, arn, (instance,) = _group_of(aws, 1)
    slept = []
    monkeypatch.setattr(elb.time, "sleep", lambda s: slept.append(s))
    assert elb.DeregisterCoalescer().deregister(elbv2, "us-east-1", arn, instance, [30080], window=0.05) is None
    assert slept == [] and tg_members(elbv2, arn) == []


@pytest.mark.moto
def test_a_batch_aws_refuses_as_naming_a_target_it_does_not_know_goes_out_again_together(aws):
    """InvalidTarget says nothing about which target: the group is read, and what it still holds goes out
    again in one call, so nobody is told their targets left on another's account, and a wave does not turn
    into a call per node."""
    elbv2, arn, ids = _group_of(aws, 6)
    counted = _Counted(elbv2, refuse="InvalidTarget")
    coalescer = elb.DeregisterCoalescer()
    coalescer.deregister(counted, "us-east-1", arn, ids[0], [30080], window=0.05)  # the group is busy now
    assert _wave(coalescer, counted, arn, ids[1:]) == [None] * 5
    assert tg_members(elbv2, arn) == []
    refused, again = [call for call in counted.calls if len(call) > 1][:2]
    assert sorted(again) == sorted(refused), "the same targets, once more, together"
    assert len(counted.calls) <= 4, counted.calls  # the lone node's, the wave's (one or two), once again


@pytest.mark.moto
def test_targets_another_process_took_out_meanwhile_are_answered_out_and_the_rest_go_out_together(aws):
    """moto refuses a call naming a target no longer registered (InvalidTarget, having taken out those named
    before it); AWS would refuse one naming a terminated instance. The group's reading says which are out."""
    elbv2, arn, ids = _group_of(aws, 8)
    elbv2.deregister_targets(TargetGroupArn=arn, Targets=[{"Id": ids[4], "Port": 30080}])  # another process
    counted = _Counted(elbv2)
    coalescer = elb.DeregisterCoalescer()
    coalescer.deregister(counted, "us-east-1", arn, ids[0], [30080], window=0.05)
    assert _wave(coalescer, counted, arn, ids[1:]) == [None] * 7
    assert tg_members(elbv2, arn) == []
    # The lone node's call, the wave's (one or two), and once again what a refused one's group still held.
    assert len(counted.calls) <= 5, counted.calls


@pytest.mark.moto
def test_a_failed_batch_fails_every_node_in_it(aws):
    elbv2, arn, ids = _group_of(aws, 6)
    counted = _Counted(elbv2, refuse="Throttling")
    coalescer = elb.DeregisterCoalescer()
    coalescer.deregister(counted, "us-east-1", arn, ids[0], [30080], window=0.05)
    results = _wave(coalescer, counted, arn, ids[1:])
    batched = [r for r in results if isinstance(r, ClientError)]
    assert batched and all(r.response["Error"]["Code"] == "Throttling" for r in batched)
    # What was refused is still registered: none of those nodes may record it as done.
    left = {i for i, _ in tg_members(elbv2, arn)}
    assert {i for i, r in zip(ids[1:], results) if isinstance(r, ClientError)} <= left


@pytest.mark.moto
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


@pytest.mark.moto
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


@pytest.mark.moto
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


@pytest.mark.moto
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



@pytest.mark.moto
def test_a_node_leaving_many_groups_reuses_the_connections_of_the_process(aws, caplog):
    """Every group's call in flight at once: the process's client keeps a connection for each (botocore's
    default pool of 10 discarded the rest, a new connection, and with AWS a new TLS handshake, per call)."""
    from hooks.aws.clients import AwsClients
    from hooks.config import load_settings

    vpc, ids = make_instances(aws("ec2"), 1)
    admin = aws("elbv2")
    arns = [make_target_group(admin, vpc, f"g{n}", {}) for n in range(24)]
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


@pytest.mark.moto
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
    assert tg_members(elbv2, arn) == [(late, 30080)], "never sent, so still registered"


@pytest.mark.moto
def test_a_deadline_already_passed_sends_nothing(aws):
    elbv2, arn, (instance,) = _group_of(aws, 1)
    counted = _Counted(elbv2)
    with pytest.raises(elb.NotSent):
        elb.DeregisterCoalescer().submit(counted, "us-east-1", arn, instance, [30080], send_within=0)
    assert counted.calls == [] and tg_members(elbv2, arn) == [(instance, 30080)]


@pytest.mark.moto
def test_a_deregistration_past_its_send_by_is_not_sent_on_the_contexts_clock(aws, make_ctx):
    """Both kinds: the deadline is the action's sendBy, read on the hook's clock right before the call."""
    import datetime as dt

    from hooks import actuators, timefmt
    from hooks.plan import Action

    vpc, (instance,) = make_instances(aws("ec2"), 1)
    elbv2, classic = aws("elbv2"), aws("elb")
    arn = make_target_group(elbv2, vpc, "late", {})
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
    assert [(o.ok, o.code) for o in late] == [(False, DEFERRED)] * 2  # put off to a fresher reading
    assert all("deadline to go out" in o.error for o in late)
    assert tg_members(elbv2, arn) == [(instance, 30080)]
    assert classic.describe_load_balancers(LoadBalancerNames=["late"])["LoadBalancerDescriptions"][0]["Instances"]
    in_time = actuators.act("node-detacher", actions(now + dt.timedelta(seconds=5)), ctx)
    assert [o.ok for o in in_time] == [True, True]
    assert tg_members(elbv2, arn) == []
    assert not classic.describe_load_balancers(LoadBalancerNames=["late"])["LoadBalancerDescriptions"][0]["Instances"]


@pytest.mark.moto
def test_a_registration_past_its_send_by_is_not_sent_on_the_contexts_clock(aws, make_ctx):
    """Registrations carry the same deadline: one held up past it never goes out, so none lands long after the
    reading of the Node it rests on (when the node may be leaving again)."""
    import datetime as dt

    from hooks import actuators, timefmt
    from hooks.plan import Action

    vpc, (instance,) = make_instances(aws("ec2"), 1)
    elbv2, classic = aws("elbv2"), aws("elb")
    arn = make_target_group(elbv2, vpc, "late", {})
    classic.create_load_balancer(LoadBalancerName="late", AvailabilityZones=["us-east-1a"],
                                 Listeners=[{"Protocol": "TCP", "LoadBalancerPort": 80, "InstancePort": 30080}])
    now = dt.datetime(2026, 11, 21, 12, 0, tzinfo=dt.timezone.utc)
    ctx = make_ctx(now=now)

    def actions(send_by):
        params = {"instance": instance, "region": "us-east-1", "sendBy": timefmt.fmt(send_by)}
        return [Action("elbv2.register", arn, {**params, "ports": [30080]}),
                Action("elb.register", "late", {**params, "ports": []})]

    late = actuators.act("node-detacher", actions(now - dt.timedelta(seconds=1)), ctx)
    assert [(o.ok, o.code) for o in late] == [(False, DEFERRED)] * 2  # put off to a fresher reading
    assert all("deadline to go out" in o.error for o in late)
    assert tg_members(elbv2, arn) == []
    assert not classic.describe_load_balancers(LoadBalancerNames=["late"])["LoadBalancerDescriptions"][0]["Instances"]
    in_time = actuators.act("node-detacher", actions(now + dt.timedelta(seconds=5)), ctx)
    assert [o.ok for o in in_time] == [True, True]
    assert tg_members(elbv2, arn) == [(instance, 30080)]
    assert classic.describe_load_balancers(LoadBalancerNames=["late"])["LoadBalancerDescriptions"][0]["Instances"]


@pytest.mark.moto
def test_a_classic_elb_is_read_with_the_instances_registered_with_it(world):
    """What the drain reads of a classic ELB: registered or not, in one DescribeLoadBalancers; gone, nothing."""
    mine, neighbour = world["mine"], world["neighbour"]
    wanted = [(mine, 0), (neighbour, 0)]
    world["elb"].deregister_instances_from_load_balancer(LoadBalancerName="legacy", Instances=[{"InstanceId": mine}])
    assert elb.instance_states(world["elb"], "legacy", wanted) == {(mine, 0): "unused",
                                                                        (neighbour, 0): elb.REGISTERED}
    world["elb"].delete_load_balancer(LoadBalancerName="legacy")
    assert elb.instance_states(world["elb"], "legacy", wanted) == {t: "unused" for t in wanted}


# AWS behaviour moto does not have, injected with botocore's Stubber (said per test).


def test_several_ports_leave_in_one_call_per_target_group():
    """moto keys targets by instance only; the exact request AWS would get is checked here."""
    elbv2 = stubbed_client("elbv2")
    arn = f"{ACCOUNT}:targetgroup/web/abc"
    with Stubber(elbv2) as stub:
        stub.add_response("deregister_targets", {}, {
            "TargetGroupArn": arn, "Targets": [{"Id": "i-0123456789abcdef0", "Port": 30080},
                                               {"Id": "i-0123456789abcdef0", "Port": 30443}]})
        elb.deregister_targets(elbv2, arn, "i-0123456789abcdef0", [30443, 30080])
        stub.assert_no_pending_responses()


def test_more_than_200_targets_are_split_into_batches():
    elbv2 = stubbed_client("elbv2")
    arn = f"{ACCOUNT}:targetgroup/web/abc"
    ports = list(range(20000, 20250))
    with Stubber(elbv2) as stub:
        stub.add_response("deregister_targets", {}, {
            "TargetGroupArn": arn, "Targets": [{"Id": "i-0123456789abcdef0", "Port": p} for p in ports[:200]]})
        stub.add_response("deregister_targets", {}, {
            "TargetGroupArn": arn, "Targets": [{"Id": "i-0123456789abcdef0", "Port": p} for p in ports[200:]]})
        elb.deregister_targets(elbv2, arn, "i-0123456789abcdef0", ports)
        stub.assert_no_pending_responses()


def _named(arn: str, *targets: tuple[str, int]) -> dict:
    """The parameters of a DescribeTargetHealth that names these targets."""
    return {"TargetGroupArn": arn, "Targets": [{"Id": i, "Port": port} for i, port in targets]}


def test_draining_target_is_reported_until_unused():
    """moto deregisters at once; real ELBv2 drains for deregistration_delay first."""
    elbv2 = stubbed_client("elbv2")
    arn = f"{ACCOUNT}:targetgroup/web/abc"
    target = {"Id": "i-0123456789abcdef0", "Port": 30080}
    board = elb.HealthBoard()
    with Stubber(elbv2) as stub:
        stub.add_response("describe_target_health", {"TargetHealthDescriptions": [
            {"Target": target, "TargetHealth": {"State": "draining", "Reason": "Target.DeregistrationInProgress"}}]},
            _named(arn, (target["Id"], 30080)))
        stub.add_response("describe_target_health", {"TargetHealthDescriptions": [
            {"Target": target, "TargetHealth": {"State": "unused", "Reason": "Target.NotRegistered"}}]},
            _named(arn, (target["Id"], 30080)))
        ask = lambda: board.states(elbv2, "us-east-1", arn, target["Id"], [30080], max_age=0, not_before=0)  # noqa: E731
        assert ask() == {30080: "draining"}
        assert ask() == {30080: "unused"}
        stub.assert_no_pending_responses()


def _answered_with_nothing(board, elbv2, stub, arn: str, instance_id: str) -> dict:
    """Ask about one target, expecting a read that names it alone and gets an empty answer."""
    stub.add_response("describe_target_health", {"TargetHealthDescriptions": []}, _named(arn, (instance_id, 30080)))
    return board.states(elbv2, "us-east-1", arn, instance_id, [30080], max_age=0, not_before=0)


def test_a_target_the_answer_leaves_out_stays_unread():
    """AWS names every target asked about; one an answer leaves out has not been read, so it waits, never 'unused'."""
    elbv2 = stubbed_client("elbv2")
    arn = f"{ACCOUNT}:targetgroup/web/abc"
    board = elb.HealthBoard()
    with Stubber(elbv2) as stub:
        assert _answered_with_nothing(board, elbv2, stub, arn, "i-00000000000000001") == {30080: elb.UNREAD}
        stub.assert_no_pending_responses()


def test_one_reading_of_a_group_names_every_node_draining_from_it():
    elbv2 = stubbed_client("elbv2")
    arn = f"{ACCOUNT}:targetgroup/web/abc"
    ids = [f"i-{n:017x}" for n in range(3)]
    listed = [{"Target": {"Id": i, "Port": 30080}, "TargetHealth": {"State": "draining"}} for i in ids]
    board = elb.HealthBoard()
    with Stubber(elbv2) as stub:
        # The first asks alone: its reading names it alone, and the two asking within max_age wait for the next.
        stub.add_response("describe_target_health", {"TargetHealthDescriptions": listed[:1]},
                          _named(arn, (ids[0], 30080)))
        assert board.states(elbv2, "us-east-1", arn, ids[0], [30080], max_age=60, not_before=0) == {30080: "draining"}
        for i in ids[1:]:
            assert board.states(elbv2, "us-east-1", arn, i, [30080], max_age=60,
                                not_before=0) == {30080: elb.UNREAD}
        stub.assert_no_pending_responses()
        # Once the reading is older than max_age, one call names all three and answers each.
        stub.add_response("describe_target_health", {"TargetHealthDescriptions": listed},
                          _named(arn, *sorted((i, 30080) for i in ids)))
        assert board.states(elbv2, "us-east-1", arn, ids[2], [30080], max_age=0, not_before=0) == {30080: "draining"}
        for i in ids[:2]:
            assert board.states(elbv2, "us-east-1", arn, i, [30080], max_age=60, not_before=0) == {30080: "draining"}
        stub.assert_no_pending_responses()
        # A reading older than the caller's detach could predate its deregistration: read again.
        stub.add_response("describe_target_health", {"TargetHealthDescriptions": []},
                          _named(arn, *sorted((i, 30080) for i in ids)))
        import time

        assert board.states(elbv2, "us-east-1", arn, ids[0], [30080], max_age=60,
                            not_before=time.time() + 1) == {30080: elb.UNREAD}
        stub.assert_no_pending_responses()


def test_an_unknown_instance_or_too_many_targets_read_the_whole_group():
    """AWS refuses a call naming an instance that no longer exists (InvalidTarget, which moto never says):
    the whole group is read, and a target it does not list is 'unused'. Past 200 targets, the group too."""
    elbv2 = stubbed_client("elbv2")
    arn = f"{ACCOUNT}:targetgroup/web/abc"
    wanted = [("i-00000000000000001", 30080), ("i-00000000000000002", 30080)]
    with Stubber(elbv2) as stub:
        stub.add_client_error("describe_target_health", "InvalidTarget", expected_params=_named(arn, *wanted))
        stub.add_response("describe_target_health", {"TargetHealthDescriptions": [
            {"Target": {"Id": wanted[0][0], "Port": 30080}, "TargetHealth": {"State": "draining"}}]},
            {"TargetGroupArn": arn})
        assert elb.target_states(elbv2, arn, wanted) == {wanted[0]: "draining", wanted[1]: "unused"}
        many = [(f"i-{n:017x}", 30080) for n in range(elb.BATCH + 1)]
        stub.add_response("describe_target_health", {"TargetHealthDescriptions": []}, {"TargetGroupArn": arn})
        assert set(elb.target_states(elbv2, arn, many).values()) == {"unused"}
        stub.add_client_error("describe_target_health", "TargetGroupNotFound", expected_params=_named(arn, *wanted))
        assert elb.target_states(elbv2, arn, wanted) == {t: "unused" for t in wanted}
        stub.assert_no_pending_responses()


def test_a_target_nobody_asks_about_is_no_longer_read(monkeypatch):
    elbv2 = stubbed_client("elbv2")
    arn = f"{ACCOUNT}:targetgroup/web/abc"
    board = elb.HealthBoard()
    with Stubber(elbv2) as stub:
        _answered_with_nothing(board, elbv2, stub, arn, "i-00000000000000001")
        monkeypatch.setattr(elb.HealthBoard, "WANTED_SECONDS", -1.0)
        _answered_with_nothing(board, elbv2, stub, arn, "i-00000000000000002")  # names the second alone
        stub.assert_no_pending_responses()


def test_a_drain_check_never_waits_for_a_reading_under_way_and_reads_only_when_allowed():
    """One group is read at a time per process; a caller that finds a read under way, or may not read,
    is answered from the reading at hand, however old, or UNREAD: it waits longer, never stops early."""
    elbv2 = stubbed_client("elbv2")
    arn = f"{ACCOUNT}:targetgroup/web/abc"
    board = elb.HealthBoard()
    ask = lambda may_read=True: board.states(elbv2, "us-east-1", arn, "i-00000000000000001", [30080],  # noqa: E731
                                             max_age=0, not_before=0, may_read=may_read)
    with Stubber(elbv2) as stub:  # no response queued: any call would fail
        assert ask(may_read=False) == {30080: elb.UNREAD}
        with board._reader:  # another thread is reading
            assert ask() == {30080: elb.UNREAD}
        stub.add_response("describe_target_health", {"TargetHealthDescriptions": [
            {"Target": {"Id": "i-00000000000000001", "Port": 30080}, "TargetHealth": {"State": "draining"}}]},
            _named(arn, ("i-00000000000000001", 30080)))
        assert ask() == {30080: "draining"}
        with board._reader:
            assert ask() == {30080: "draining"}, "the reading at hand, older than max_age"
        stub.assert_no_pending_responses()


def test_a_reading_begun_before_a_nodes_first_ask_in_its_detach_is_never_used():
    """A target is still named by its group's readings for a while after its node's last ask (WANTED_SECONDS):
    one begun after the node's new detach began but before the node first asked in it (before its
    deregistration was recorded) can show it in service from before, and would have it deregistered again for
    nothing. The node is answered from the next reading only."""
    elbv2 = stubbed_client("elbv2")
    arn = f"{ACCOUNT}:targetgroup/web/abc"
    mine, other = ("i-00000000000000001", 30080), ("i-00000000000000002", 30080)
    board = elb.HealthBoard()
    now = [1000.0]

    def ask(target, not_before):
        return board.states(elbv2, "us-east-1", arn, target[0], [target[1]], max_age=5, not_before=not_before,
                            clock=lambda: now[0])

    def answer(state, *targets):
        stub.add_response("describe_target_health", {"TargetHealthDescriptions": [
            {"Target": {"Id": i, "Port": p}, "TargetHealth": {"State": state}} for i, p in targets]},
            _named(arn, *sorted(targets)))

    with Stubber(elbv2) as stub:
        answer("unused", mine)
        assert ask(mine, not_before=900) == {30080: "unused"}  # an earlier detach of the node
        now[0] = 1012  # its new detach began at 1010; another node's ask reads the group, naming it too
        answer("healthy", mine, other)
        assert ask(other, not_before=1010) == {30080: "healthy"}
        now[0] = 1013  # the node's deregistration is recorded: it asks
        assert ask(mine, not_before=1010) == {30080: elb.UNREAD}, "not the reading from before its ask"
        now[0] = 1020
        answer("unused", mine, other)
        assert ask(mine, not_before=1010) == {30080: "unused"}
        stub.assert_no_pending_responses()


def test_once_no_registration_can_land_a_group_is_read_again_and_only_readings_since_count():
    """``after``: readings begun before it are not used, and a group last read before it is read once more."""
    elbv2 = stubbed_client("elbv2")
    arn = f"{ACCOUNT}:targetgroup/web/abc"
    board = elb.HealthBoard()
    now = [1000.0]

    def ask(after=None):
        return board.states(elbv2, "us-east-1", arn, "i-00000000000000001", [30080], max_age=60, not_before=900,
                            after=after, clock=lambda: now[0])

    with Stubber(elbv2) as stub:
        stub.add_response("describe_target_health", {"TargetHealthDescriptions": [
            {"Target": {"Id": "i-00000000000000001", "Port": 30080}, "TargetHealth": {"State": "unused"}}]},
            _named(arn, ("i-00000000000000001", 30080)))
        assert ask() == {30080: "unused"}
        now[0] = 1010
        assert ask() == {30080: "unused"}, "within max_age: the reading at hand"
        stub.add_response("describe_target_health", {"TargetHealthDescriptions": [
            {"Target": {"Id": "i-00000000000000001", "Port": 30080}, "TargetHealth": {"State": "healthy"}}]},
            _named(arn, ("i-00000000000000001", 30080)))
        assert ask(after=1005) == {30080: "healthy"}, "read again: the one at hand began before 1005"
        assert ask(after=1005) == {30080: "healthy"}
        stub.assert_no_pending_responses()


class _HeldSleep:
    """The limiter's sleep, held until the test lets it go; then the limiter's clock moves by what it slept."""

    def __init__(self, clock):
        self.clock, self.asleep, self.go = clock, threading.Event(), threading.Event()

    def __call__(self, seconds: float) -> None:
        self.asleep.set()
        assert self.go.wait(10)
        self.clock.now += seconds


def _paced_client(aws):
    """A metered elbv2 client whose bucket is empty: the next DeregisterTargets waits 5 s, held by the test."""
    from hooks import aws_rate_buckets
    from hooks.aws import rate_limits
    from hooks.aws.clients import AwsClients
    from hooks.config import load_settings
    from worlds.clock import ManualClock

    clock = ManualClock()
    held = _HeldSleep(clock)
    limiter = rate_limits.Limiter(0.5, {"elb-mutating": 0.05}, clock=clock, sleep=held)
    with rate_limits.hook_call(0):
        limiter.acquire("us-east-1", "DeregisterTargets", aws_rate_buckets.request_draws("elbv2", "DeregisterTargets", {}))
    client = AwsClients(load_settings({"AWS_REGION": "us-east-1"}), limiter=limiter).client("elbv2")
    calls = []
    client.meta.events.register("provide-client-params.elastic-load-balancing-v2.DeregisterTargets",
                                lambda params, **_: calls.append(sorted(t["Id"] for t in params["Targets"])))
    return client, held, calls


@pytest.mark.moto
def test_callers_who_ask_while_the_leader_waits_for_its_token_go_out_in_its_call(aws):
    elbv2, arn, (first, second, third) = _group_of(aws, 3)
    client, held, calls = _paced_client(aws)
    coalescer = elb.DeregisterCoalescer()
    tickets = [coalescer.submit(client, "us-east-1", arn, first, [30080], window=0.01, send_within=30)]
    assert held.asleep.wait(10), "the leader waits for the token"
    tickets += [coalescer.submit(client, "us-east-1", arn, i, [30080], window=0.01, send_within=30)
                for i in (second, third)]
    held.go.set()
    assert [ticket() for ticket in tickets] == [None, None, None]
    assert calls == [sorted([first, second, third])], "one call, with everyone who asked meanwhile"
    assert tg_members(elbv2, arn) == []


@pytest.mark.moto
def test_a_deadline_that_passes_while_the_token_is_awaited_keeps_its_targets_back(aws):
    elbv2, arn, (timely, late) = _group_of(aws, 2)
    client, held, calls = _paced_client(aws)
    coalescer = elb.DeregisterCoalescer()
    waiting_timely = coalescer.submit(client, "us-east-1", arn, timely, [30080], window=0.01, send_within=30)
    assert held.asleep.wait(10)
    waiting_late = coalescer.submit(client, "us-east-1", arn, late, [30080], window=0.01, send_within=0.05)
    threading.Event().wait(0.2)  # the late one's deadline passes while the leader still waits
    held.go.set()
    assert waiting_timely() is None
    with pytest.raises(elb.NotSent):
        waiting_late()
    assert calls == [[timely]]
    assert tg_members(elbv2, arn) == [(late, 30080)], "never sent, so still registered"


@pytest.mark.moto
def test_a_token_that_would_come_after_every_deadline_sends_nothing(aws):
    elbv2, arn, (instance,) = _group_of(aws, 1)
    client, held, calls = _paced_client(aws)
    ticket = elb.DeregisterCoalescer().submit(client, "us-east-1", arn, instance, [30080], window=0.01,
                                              send_within=1)  # its token is 5 s away
    with pytest.raises(elb.NotSent, match="no token before its deadline"):
        ticket()
    assert not held.asleep.is_set() and calls == []
    assert tg_members(elbv2, arn) == [(instance, 30080)]


@pytest.mark.moto
def test_targets_asked_again_while_they_wait_keep_their_place_with_the_later_deadline(aws):
    """A node asking again on its next sync joins its own waiting part: one target in the call, sent by the
    later reading's deadline though the first one's passed while the token was awaited."""
    elbv2, arn, (instance, other) = _group_of(aws, 2)
    client, held, calls = _paced_client(aws)
    coalescer = elb.DeregisterCoalescer(clock=held.clock)  # on the limiter's clock
    first = coalescer.submit(client, "us-east-1", arn, instance, [30080], window=0.01, send_within=5.5)
    assert held.asleep.wait(10), "the leader waits for the token, 5 s away"
    held.clock.advance(1.0)
    again = coalescer.submit(client, "us-east-1", arn, instance, [30080], window=0.01, send_within=5)
    beside = coalescer.submit(client, "us-east-1", arn, other, [30080], window=0.01, send_within=5)
    assert (first.renewal, again.renewal, beside.renewal) == (False, True, False)
    held.go.set()  # the token comes 5 s on: past the first deadline (5.5), within the renewed one (6)
    assert (first(), again(), beside()) == (None, None, None)
    assert calls == [sorted([instance, other])], "one call, each target once"
    assert tg_members(elbv2, arn) == []


@pytest.mark.moto
def test_a_carried_on_deregistration_stops_holding_the_call_once_its_group_is_busy(aws, make_ctx):
    """The token is there as the node asks, but its group's call waits behind another one (slow here): the
    hook call answers UNDER_WAY then, instead of holding its thread until that one is done."""
    from hooks import actuators
    from hooks.plan import UNDER_WAY, Action

    elbv2, arn, (slow, waiting) = _group_of(aws, 2)
    client = _HeldFirst(elbv2)
    ctx = make_ctx()
    ctx._aws = type("OneClient", (), {"client": lambda self, service, region=None: client})()
    coalescer = elb.DeregisterCoalescer()
    ahead = coalescer.submit(client, "us-east-1", arn, slow, [30080], window=0.01)
    original, elb.DEREGISTRATIONS = elb.DEREGISTRATIONS, coalescer
    answered: list = []
    try:
        action = Action("elbv2.deregister", arn, {"instance": waiting, "region": "us-east-1", "ports": [30080]},
                        carry_on=True)
        call = threading.Thread(target=lambda: answered.extend(actuators.act("node-detacher", [action], ctx)),
                                daemon=True)
        call.start()
        call.join(10)
        assert not call.is_alive(), "the call did not wait for the group's other call"
    finally:
        elb.DEREGISTRATIONS = original
    assert [o.code for o in answered] == [UNDER_WAY]
    client.go.set()
    assert ahead() is None and answered[0].later().ok
    assert tg_members(elbv2, arn) == []


@pytest.mark.moto
def test_deregistrations_carried_on_hold_no_background_thread_while_they_wait(aws, make_ctx):
    """More carried-on runs than the background pool has threads, all waiting for one call's token (held):
    other background work still runs meanwhile, and every run is recorded once the call answers."""
    from hooks import actuators
    from hooks.plan import Action

    elbv2, arn, ids = _group_of(aws, actuators.BACKGROUND_THREADS + 4)
    client, held, calls = _paced_client(aws)
    ctx = make_ctx()
    ctx._aws = type("OneClient", (), {"client": lambda self, service, region=None: client})()
    coalescer = elb.DeregisterCoalescer(clock=held.clock)
    recorded = []
    original, elb.DEREGISTRATIONS = elb.DEREGISTRATIONS, coalescer
    try:
        for instance in ids:
            action = Action("elbv2.deregister", arn, {"instance": instance, "region": "us-east-1", "ports": [30080]})
            actuators.act_in_background("node-detacher", [action], ctx, recorded.append)
    finally:
        elb.DEREGISTRATIONS = original
    assert held.asleep.wait(10)
    assert actuators._BACKGROUND.submit(lambda: "ran").result(timeout=5) == "ran"
    held.go.set()
    assert actuators.drain_background(10)
    assert len(recorded) == len(ids) and all(o.ok for run in recorded for o in run)
    assert calls == [sorted(ids)]


@pytest.mark.moto
def test_a_part_is_queued_when_the_processs_share_has_no_token_for_its_call(aws):
    elbv2, arn, (instance, other) = _group_of(aws, 2)
    client, held, _ = _paced_client(aws)
    coalescer = elb.DeregisterCoalescer(clock=held.clock)
    waiting = coalescer.submit(client, "us-east-1", arn, instance, [30080], window=0.01, send_within=30)
    at_once = coalescer.submit(elbv2, "us-east-1", arn + "-unmetered", other, [30080], window=0.01)
    assert (waiting.queued, at_once.queued) == (True, False), "no limiter meters the second client"
    held.go.set()
    assert waiting() is None


@pytest.mark.moto
def test_carried_on_deregistrations_answer_at_once_and_go_out_together_when_the_token_comes(aws, make_ctx):
    """A wave through one hook process while its share of ELB's mutating bucket is spent: every node's
    deregister call answers UNDER_WAY while the group's call still waits for its token (held here), and
    that one call then carries them all; each waited-on answer comes after the call. A renewal has no wait
    of its own."""
    from hooks import actuators
    from hooks.plan import UNDER_WAY, Action

    elbv2, arn, ids = _group_of(aws, 12)
    client, held, calls = _paced_client(aws)
    ctx = make_ctx()
    ctx._aws = type("OneClient", (), {"client": lambda self, service, region=None: client})()
    coalescer = elb.DeregisterCoalescer(clock=held.clock)

    def leaving(instance):
        return Action("elbv2.deregister", arn, {"instance": instance, "region": "us-east-1", "ports": [30080]},
                      carry_on=True)

    answered: list = []
    original = elb.DEREGISTRATIONS
    elb.DEREGISTRATIONS = coalescer
    try:
        wave = threading.Thread(target=lambda: answered.extend(
            actuators.act("node-detacher", [leaving(i)], ctx)[0] for i in ids + ids[:1]), daemon=True)
        wave.start()
        wave.join(10)
        assert not wave.is_alive(), "no call waited for the token"
    finally:
        elb.DEREGISTRATIONS = original
    assert [o.code for o in answered] == [UNDER_WAY] * 13 and calls == []
    assert answered[-1].later is None, "asked again while waiting: the first asker waits for it"
    held.go.set()
    assert [o.later().ok for o in answered[:-1]] == [True] * 12
    assert calls == [sorted(ids)]
    assert tg_members(elbv2, arn) == []


@pytest.mark.moto
@pytest.mark.parametrize("kind", ["elbv2.register", "elb.register"])
def test_a_registration_whose_token_comes_after_its_send_by_is_not_sent(aws, make_ctx, kind):
    """The token is awaited before the deadline is read: a registration goes out in time or not at all, both when
    the token would come too late and when the wait for it took longer than it should (a busy machine)."""
    import datetime as dt

    from hooks import actuators, aws_rate_buckets, timefmt
    from hooks.aws import rate_limits
    from hooks.aws.clients import AwsClients
    from hooks.plan import Action
    from worlds.clock import ManualClock

    vpc, (instance,) = make_instances(aws("ec2"), 1)
    elbv2, classic = aws("elbv2"), aws("elb")
    arn = make_target_group(elbv2, vpc, "paced", {})
    classic.create_load_balancer(LoadBalancerName="paced", AvailabilityZones=["us-east-1a"],
                                 Listeners=[{"Protocol": "TCP", "LoadBalancerPort": 80, "InstancePort": 30080}])
    now = [dt.datetime(2026, 11, 21, 12, 0, tzinfo=dt.timezone.utc)]
    limiter_clock, overrun = ManualClock(), [0.0]

    def sleep(seconds):  # the limiter's sleep; the hook's clock moves with it, and by any overrun
        limiter_clock.sleep(seconds)
        now[0] += dt.timedelta(seconds=seconds + overrun[0])

    limiter = rate_limits.Limiter(0.5, {"elb-mutating": 0.05}, clock=limiter_clock, sleep=sleep)
    ctx = make_ctx()
    ctx.clock = lambda: now[0]
    ctx._aws = AwsClients(ctx.settings, limiter=limiter)

    service, operation = (("elbv2", "RegisterTargets") if kind == "elbv2.register"
                          else ("elb", "RegisterInstancesWithLoadBalancer"))

    def drain():
        with rate_limits.hook_call(0):
            limiter.acquire("us-east-1", operation, aws_rate_buckets.request_draws(service, operation, {}))

    def register(send_within: float):
        target = arn if kind == "elbv2.register" else "paced"
        params = {"instance": instance, "region": "us-east-1", "ports": [30080],
                  "sendBy": timefmt.fmt(now[0] + dt.timedelta(seconds=send_within))}
        with rate_limits.hook_call(25):
            return actuators.act("node-detacher", [Action(kind, target, params)], ctx)[0]

    def registered() -> bool:
        if kind == "elbv2.register":
            return tg_members(elbv2, arn) == [(instance, 30080)]
        return bool(classic.describe_load_balancers(LoadBalancerNames=["paced"])["LoadBalancerDescriptions"][0]
                    ["Instances"])

    drain()
    too_soon = register(send_within=1)  # the token is 5 s away
    assert (too_soon.ok, too_soon.code) == (False, DEFERRED) and "no token before its deadline" in too_soon.error
    assert limiter_clock.slept == [] and not registered()

    overrun[0] = 10.0
    overslept = register(send_within=8)  # the token in 5 s, but the machine wakes the hook 10 s later still
    assert (overslept.ok, overslept.code) == (False, DEFERRED) and "had passed" in overslept.error
    assert limiter_clock.slept and not registered()

    overrun[0] = 0.0
    in_time = register(send_within=8)  # the token in 5 s again, the hook awake on time
    assert in_time.ok, in_time
    assert registered()
