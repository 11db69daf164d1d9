"""AWS behaviour moto does not have, injected with botocore's Stubber (said per test)."""
from __future__ import annotations

import boto3
from botocore.stub import Stubber

from hooks.aws import elb as elb_api
from hooks.aws import lb_discovery
from hooks.config import load_settings

ACCOUNT = "arn:aws:elasticloadbalancing:us-east-1:123456789012"


def _client(service):
    return boto3.client(service, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")


class _Clients:
    """AwsClients' one method, over the stubbed clients of a test."""

    def __init__(self, **clients):
        self.clients = clients

    def client(self, service, region=None):
        return self.clients[service]


def test_tagged_discovery_reads_every_page_and_classifies_classic_elbs():
    """Real AWS tagging answers (moto files classic ELBs under another type), stubbed; what it lists is checked to exist."""
    tagging, elbv2, elb = _client("resourcegroupstaggingapi"), _client("elbv2"), _client("elb")
    settings = load_settings({"NODEWARDEN_CLUSTER_NAME": "prod", "NODEWARDEN_INCLUDE_LB_CONTROLLER": "false"})
    web, api = f"{ACCOUNT}:targetgroup/k8s-web/abc", f"{ACCOUNT}:targetgroup/k8s-api/def"
    owned = [{"Key": "kubernetes.io/cluster/prod", "Value": "owned"}]
    with Stubber(tagging) as tags, Stubber(elbv2) as v2, Stubber(elb) as classic:
        tags.add_response("get_resources", {
            "PaginationToken": "page-2",
            "ResourceTagMappingList": [
                {"ResourceARN": web, "Tags": owned},
                {"ResourceARN": f"{ACCOUNT}:loadbalancer/a1b2c3", "Tags": owned},  # classic
            ]}, {"TagFilters": [{"Key": "kubernetes.io/cluster/prod", "Values": ["owned"]}], "ResourcesPerPage": 100})
        tags.add_response("get_resources", {
            "PaginationToken": "",
            "ResourceTagMappingList": [
                {"ResourceARN": f"{ACCOUNT}:loadbalancer/net/k8s-nlb/def", "Tags": owned},  # NLB: its TGs count
                {"ResourceARN": api, "Tags": owned},
            ]})
        v2.add_response("describe_target_groups", {"TargetGroups": [
            {"TargetGroupArn": web}, {"TargetGroupArn": api}]}, {"PageSize": 400})
        classic.add_response("describe_load_balancers", {"LoadBalancerDescriptions": [
            {"LoadBalancerName": "a1b2c3"}]}, {"PageSize": 400})
        tgs, elbs = lb_discovery.tagged_load_balancers(_Clients(resourcegroupstaggingapi=tagging, elbv2=elbv2, elb=elb),
                                                       "us-east-1", settings)
        for stub in (tags, v2, classic):
            stub.assert_no_pending_responses()
    assert tgs == {web, api}
    assert elbs == {"a1b2c3"}


def test_several_ports_leave_in_one_call_per_target_group():
    """moto keys targets by instance only; the exact request AWS would get is checked here."""
    elbv2 = _client("elbv2")
    arn = f"{ACCOUNT}:targetgroup/web/abc"
    with Stubber(elbv2) as stub:
        stub.add_response("deregister_targets", {}, {
            "TargetGroupArn": arn, "Targets": [{"Id": "i-0123456789abcdef0", "Port": 30080},
                                               {"Id": "i-0123456789abcdef0", "Port": 30443}]})
        elb_api.deregister_targets(elbv2, arn, "i-0123456789abcdef0", [30443, 30080])
        stub.assert_no_pending_responses()


def test_more_than_200_targets_are_split_into_batches():
    elbv2 = _client("elbv2")
    arn = f"{ACCOUNT}:targetgroup/web/abc"
    ports = list(range(20000, 20250))
    with Stubber(elbv2) as stub:
        stub.add_response("deregister_targets", {}, {
            "TargetGroupArn": arn, "Targets": [{"Id": "i-0123456789abcdef0", "Port": p} for p in ports[:200]]})
        stub.add_response("deregister_targets", {}, {
            "TargetGroupArn": arn, "Targets": [{"Id": "i-0123456789abcdef0", "Port": p} for p in ports[200:]]})
        elb_api.deregister_targets(elbv2, arn, "i-0123456789abcdef0", ports)
        stub.assert_no_pending_responses()


def _named(arn: str, *targets: tuple[str, int]) -> dict:
    """The parameters of a DescribeTargetHealth that names these targets."""
    return {"TargetGroupArn": arn, "Targets": [{"Id": i, "Port": port} for i, port in targets]}


def test_draining_target_is_reported_until_unused():
    """moto deregisters at once; real ELBv2 drains for deregistration_delay first."""
    elbv2 = _client("elbv2")
    arn = f"{ACCOUNT}:targetgroup/web/abc"
    target = {"Id": "i-0123456789abcdef0", "Port": 30080}
    board = elb_api.HealthBoard()
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
    elbv2 = _client("elbv2")
    arn = f"{ACCOUNT}:targetgroup/web/abc"
    board = elb_api.HealthBoard()
    with Stubber(elbv2) as stub:
        assert _answered_with_nothing(board, elbv2, stub, arn, "i-00000000000000001") == {30080: elb_api.UNREAD}
        stub.assert_no_pending_responses()


def test_one_reading_of_a_group_names_every_node_draining_from_it():
    elbv2 = _client("elbv2")
    arn = f"{ACCOUNT}:targetgroup/web/abc"
    ids = [f"i-{n:017x}" for n in range(3)]
    listed = [{"Target": {"Id": i, "Port": 30080}, "TargetHealth": {"State": "draining"}} for i in ids]
    board = elb_api.HealthBoard()
    with Stubber(elbv2) as stub:
        # The first asks alone: its reading names it alone, and the two asking within max_age wait for the next.
        stub.add_response("describe_target_health", {"TargetHealthDescriptions": listed[:1]},
                          _named(arn, (ids[0], 30080)))
        assert board.states(elbv2, "us-east-1", arn, ids[0], [30080], max_age=60, not_before=0) == {30080: "draining"}
        for i in ids[1:]:
            assert board.states(elbv2, "us-east-1", arn, i, [30080], max_age=60,
                                not_before=0) == {30080: elb_api.UNREAD}
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
                            not_before=time.time() + 1) == {30080: elb_api.UNREAD}
        stub.assert_no_pending_responses()


def test_an_unknown_instance_or_too_many_targets_read_the_whole_group():
    """AWS refuses a call naming an instance that no longer exists (InvalidTarget, which moto never says):
    the whole group is read, and a target it does not list is 'unused'. Past 200 targets, the group too."""
    elbv2 = _client("elbv2")
    arn = f"{ACCOUNT}:targetgroup/web/abc"
    wanted = [("i-00000000000000001", 30080), ("i-00000000000000002", 30080)]
    with Stubber(elbv2) as stub:
        stub.add_client_error("describe_target_health", "InvalidTarget", expected_params=_named(arn, *wanted))
        stub.add_response("describe_target_health", {"TargetHealthDescriptions": [
            {"Target": {"Id": wanted[0][0], "Port": 30080}, "TargetHealth": {"State": "draining"}}]},
            {"TargetGroupArn": arn})
        assert elb_api.target_states(elbv2, arn, wanted) == {wanted[0]: "draining", wanted[1]: "unused"}
        many = [(f"i-{n:017x}", 30080) for n in range(elb_api.BATCH + 1)]
        stub.add_response("describe_target_health", {"TargetHealthDescriptions": []}, {"TargetGroupArn": arn})
        assert set(elb_api.target_states(elbv2, arn, many).values()) == {"unused"}
        stub.add_client_error("describe_target_health", "TargetGroupNotFound", expected_params=_named(arn, *wanted))
        assert elb_api.target_states(elbv2, arn, wanted) == {t: "unused" for t in wanted}
        stub.assert_no_pending_responses()


def test_a_target_nobody_asks_about_is_no_longer_read(monkeypatch):
    elbv2 = _client("elbv2")
    arn = f"{ACCOUNT}:targetgroup/web/abc"
    board = elb_api.HealthBoard()
    with Stubber(elbv2) as stub:
        _answered_with_nothing(board, elbv2, stub, arn, "i-00000000000000001")
        monkeypatch.setattr(elb_api.HealthBoard, "WANTED_SECONDS", -1.0)
        _answered_with_nothing(board, elbv2, stub, arn, "i-00000000000000002")  # names the second alone
        stub.assert_no_pending_responses()


def test_a_drain_check_never_waits_for_a_reading_under_way_and_reads_only_when_allowed():
    """One group is read at a time per process; a caller that finds a read under way, or may not read,
    is answered from the reading at hand, however old, or UNREAD: it waits longer, never stops early."""
    elbv2 = _client("elbv2")
    arn = f"{ACCOUNT}:targetgroup/web/abc"
    board = elb_api.HealthBoard()
    ask = lambda may_read=True: board.states(elbv2, "us-east-1", arn, "i-00000000000000001", [30080],  # noqa: E731
                                             max_age=0, not_before=0, may_read=may_read)
    with Stubber(elbv2) as stub:  # no response queued: any call would fail
        assert ask(may_read=False) == {30080: elb_api.UNREAD}
        with board._reader:  # another thread is reading
            assert ask() == {30080: elb_api.UNREAD}
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
    elbv2 = _client("elbv2")
    arn = f"{ACCOUNT}:targetgroup/web/abc"
    mine, other = ("i-00000000000000001", 30080), ("i-00000000000000002", 30080)
    board = elb_api.HealthBoard()
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
        assert ask(mine, not_before=1010) == {30080: elb_api.UNREAD}, "not the reading from before its ask"
        now[0] = 1020
        answer("unused", mine, other)
        assert ask(mine, not_before=1010) == {30080: "unused"}
        stub.assert_no_pending_responses()


def test_once_no_registration_can_land_a_group_is_read_again_and_only_readings_since_count():
    """``after``: readings begun before it are not used, and a group last read before it is read once more."""
    elbv2 = _client("elbv2")
    arn = f"{ACCOUNT}:targetgroup/web/abc"
    board = elb_api.HealthBoard()
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
