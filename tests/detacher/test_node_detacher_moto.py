"""node-detacher against moto in server mode: real boto3 calls, real ELB state."""
from __future__ import annotations

import copy
import itertools
import json

import pytest
from botocore.exceptions import ClientError

from hooks import actuators, detacher_names
from hooks.aws.lb_discovery import CACHE
from hooks.dispatch import serve
from tests.support.load_balancers import elb_members, tg_members, world  # noqa: F401 - world is a fixture
from worlds.envelope import apply_decorator_response, hook_request
from worlds.fake_kube import FakeKube

pytestmark = pytest.mark.moto

NS = "nodewarden-system"


def _node(instance):
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "node-a", "uid": "u-1", "labels": {}, "annotations": {}},
            "spec": {"providerID": f"aws:///us-east-1a/{instance}"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}


class Harness:
    """Plays Metacontroller's part for one Node: apply responses, keep attachments."""

    def __init__(self, ctx, node):
        self.ctx, self.node, self.attachments, self.responses = ctx, node, [], []
        self.behind = False  # the request's Node is older than the API server's
        self._server_seen: dict = {}  # the API server's labels and annotations as the last call left them

    def sync(self, hook="sync", lost_write=False, drain=True):
        """One call; ``lost_write``: Metacontroller's write of the response conflicts, so it is dropped
        and the next call carries the Node as before (the API server keeps what the hook wrote itself).
        ``drain=False``: the call answers without waiting for what it carries on in the background."""
        response = serve("node-detacher", hook, self._body(hook), self.ctx)
        if drain:
            # The calls the hook carried on after answering, and their record, as its worker finishes them.
            assert actuators.drain_background(10)
        return self._answered(response, lost_write)

    def given_up(self, held: "HeldAtTheWire", hook="sync"):
        """One call, of which an AWS call may be held on the wire: then Metacontroller gives up waiting for it
        (its hook timeout) and never applies its answer; the call goes on in its own thread once the held call
        lands, and that thread is returned. A call that answers first is applied as ``sync`` applies it (None)."""
        import threading

        body = self._body(hook)
        answered = {}
        before = held.held

        def answer():
            try:
                answered["response"] = serve("node-detacher", hook, body, self.ctx)
            finally:
                held.changed()
        call = threading.Thread(target=answer, daemon=True)
        call.start()
        held.wait_for(lambda: held.held > before or "response" in answered)
        if held.held > before:
            return call
        call.join()
        assert actuators.drain_background(10)
        self._answered(answered["response"], False)
        return None

    def _body(self, hook: str) -> dict:
        if not self.behind:
            self._catch_up()
        body = hook_request("node-detacher", self.node, children=self.attachments,
                            child_kinds=["Attachment.nodewarden.io/v1alpha1"], finalizing=hook == "finalize")
        if not self.behind:
            self.ctx.kube.add_object(self.node)  # the API server has the Node the request names
        return json.loads(json.dumps(body))

    def _answered(self, response: dict, lost_write: bool) -> dict:
        self.responses.append(response)
        self.behind = lost_write
        if lost_write:
            return response
        # What the hook wrote to the Node itself (labels, annotations, set or taken off), then the response, as
        # Metacontroller applies it.
        on_server = self._on_server()
        self.node = copy.deepcopy(self.node)
        for key in ("labels", "annotations"):
            self.node["metadata"][key] = on_server[key]
        self.node = apply_decorator_response(self.node, response)
        self.attachments = response["attachments"]
        self._server_seen = self._on_server()
        return response

    def _on_server(self) -> dict:
        meta = self.ctx.kube.nodes[self.node["metadata"]["name"]]["metadata"]
        return {key: dict(meta.get(key) or {}) for key in ("labels", "annotations")}

    def _catch_up(self) -> None:
        """What the hook wrote to the API server's Node since the last call (a background record landing
        late): Metacontroller's cache sees it before the next call."""
        if not self._server_seen:
            return
        now = self._on_server()
        for key in ("labels", "annotations"):
            changed = {k: v for k, v in now[key].items() if self._server_seen[key].get(k) != v}
            self.node["metadata"][key] = {**(self.node["metadata"].get(key) or {}), **changed}


def _harness(world, make_ctx, **env) -> tuple[Harness, FakeKube]:
    kube = FakeKube()
    # The classic ELB is found by its tag: discovery classifies what the tagging
    # API lists by ARN, whatever resource type moto files it under.
    ctx = make_ctx({"NODEWARDEN_STATIC_TARGET_GROUPS": world["static"], "NODEWARDEN_DISCOVERY_CACHE_SECONDS": "0",
                    **env}, kube=kube)
    return Harness(ctx, _node(world["mine"])), kube


@pytest.fixture
def harness(world, make_ctx):
    return _harness(world, make_ctx)


def test_discovery_fills_attachment_with_ports_and_only_this_clusters_load_balancers(world, harness):
    h, _ = harness
    assert h.sync()["attachments"] == [], "a serving node has no Attachment"
    h.node["spec"]["unschedulable"] = True
    h.sync()  # the detach begins: its load balancers are recorded before the label lands
    spec = h.attachments[0]["spec"]
    assert sorted((t["arn"], t["targetPort"]) for t in spec["awsTargets"]) == sorted(
        [(world["ours"], 30443), (world["lbc"], 31000), (world["static"], 31000)])
    assert spec["awsLoadBalancers"] == [{"name": "legacy"}]
    assert spec["instanceID"] == world["mine"]


def _labelled_at_each_call(h, kube):
    """Watches every deregistration: whether the Node on the API server carried the exclude label when the
    call went out. Returns the list it fills and the function that stops watching."""
    seen = []

    def check(**_):
        seen.append(detacher_names.EXCLUDE_LABEL in (kube.nodes["node-a"]["metadata"].get("labels") or {}))

    return seen, _on_each_call(h, "DeregisterTargets", "DeregisterInstancesFromLoadBalancer", check)


def _on_each_call(h, target_group_call: str, classic_call: str, check):
    """``check`` run as each of the hook's calls of these names goes out; returns what stops it."""
    hooked = [(h.ctx.aws.client("elbv2", "us-east-1"),
               f"provide-client-params.elastic-load-balancing-v2.{target_group_call}"),
              (h.ctx.aws.client("elb", "us-east-1"), f"provide-client-params.elastic-load-balancing.{classic_call}")]
    for client, event in hooked:
        client.meta.events.register(event, check)
    return lambda: [client.meta.events.unregister(event, check) for client, event in hooked]


def test_cordon_detaches_then_uncordon_reattaches_exactly(world, harness):
    h, kube = harness
    elbv2, elb, mine, neighbour = world["elbv2"], world["elb"], world["mine"], world["neighbour"]
    before = {arn: tg_members(elbv2, world[arn]) for arn in ("ours", "lbc", "other", "untagged", "static")}
    h.sync()  # schedulable: nothing recorded

    h.node["spec"]["unschedulable"] = True
    seen, stop = _labelled_at_each_call(h, kube)
    try:
        first = h.sync()
    finally:
        stop()
    # The hook wrote the label itself, and only then did anything leave a load balancer: one call per
    # target group and classic ELB, each made with the label already on the API server's Node.
    assert "labels" not in first or not first["labels"], "nothing left for Metacontroller to write on the Node"
    assert h.node["metadata"]["labels"][detacher_names.EXCLUDE_LABEL] == detacher_names.EXCLUDE_VALUE
    assert seen == [True] * 4
    assert tg_members(elbv2, world["ours"]) == [(neighbour, 30080)]
    assert tg_members(elbv2, world["lbc"]) == []
    assert tg_members(elbv2, world["static"]) == []
    assert elb_members(elb, "legacy") == [neighbour]
    # Another cluster's and untagged target groups are not ours to touch.
    assert tg_members(elbv2, world["other"]) == before["other"]
    assert tg_members(elbv2, world["untagged"]) == before["untagged"]
    # The record was written when the calls succeeded, after the call had answered.
    recorded = json.loads(h.node["metadata"]["annotations"][detacher_names.DEREGISTERED])
    assert sorted(m[1] for m in recorded) == sorted(["legacy", world["ours"], world["lbc"], world["static"]])

    h.sync()  # drain check: moto deregisters at once
    ann = h.node["metadata"]["annotations"]
    assert ann[detacher_names.DETACHING] == "true" and detacher_names.DETACHED_AT in ann
    assert [c["type"] for c in h.node["status"]["conditions"]] == ["Ready", detacher_names.CONDITION]
    assert {"Detaching", "Deregistered", "Detached"} <= set(kube.reasons())

    h.node["spec"]["unschedulable"] = False
    h.sync()
    # What is about to be registered is on the API server's Node before anything is registered.
    assert json.loads(kube.nodes["node-a"]["metadata"]["annotations"][detacher_names.REJOIN]) == recorded
    assert tg_members(elbv2, world["ours"]) == [(neighbour, 30080)] and elb_members(elb, "legacy") == [neighbour]
    h.sync()
    for key in ("ours", "lbc", "other", "untagged", "static"):
        assert tg_members(elbv2, world[key]) == before[key], key
    assert elb_members(elb, "legacy") == sorted([mine, neighbour])
    assert not any(k in h.node["metadata"]["annotations"] for k in detacher_names.OUR_ANNOTATIONS)
    assert detacher_names.EXCLUDE_LABEL not in h.node["metadata"]["labels"]
    assert [c["type"] for c in h.node["status"]["conditions"]] == ["Ready"]
    assert "Reattached" in kube.reasons()


def test_a_label_the_hook_cannot_write_leaves_it_to_metacontroller_and_deregisters_nothing(world, harness):
    """The API server refuses the hook's own write of the label: nothing leaves a load balancer; the
    response asks Metacontroller for the label, and the next call deregisters once it is on."""
    h, kube = harness
    h.sync()
    h.node["spec"]["unschedulable"] = True
    kube.refused = {("json_patch", "Node")}
    try:
        response = h.sync()
    finally:
        kube.refused = set()
    assert response["labels"] == {detacher_names.EXCLUDE_LABEL: detacher_names.EXCLUDE_VALUE}
    assert response["annotations"][detacher_names.DETACHING] == "true"
    assert len(tg_members(world["elbv2"], world["ours"])) == 2
    h.sync()  # the label is on (Metacontroller wrote it): the deregister step
    assert tg_members(world["elbv2"], world["ours"]) == [(world["neighbour"], 30080)]


def test_aws_failure_mid_detach_keeps_progress_and_resumes(world, harness):
    """moto cannot fail on demand: a botocore event hook injects throttling errors. The exclude step's
    background call to one group fails: what succeeded is recorded, the failed group is not; the next call
    makes that one call again in the call, where a failure is reported; then it succeeds."""
    h, kube = harness
    elbv2 = world["elbv2"]
    h.sync()
    client = h.ctx.aws.client("elbv2", "us-east-1")
    calls = []

    def flaky(params, **_):
        calls.append(params["TargetGroupArn"])
        if params["TargetGroupArn"] == world["lbc"] and calls.count(world["lbc"]) <= 2:
            raise ClientError({"Error": {"Code": "Throttling", "Message": "Rate exceeded"}}, "DeregisterTargets")

    client.meta.events.register("provide-client-params.elastic-load-balancing-v2.DeregisterTargets", flaky)
    try:
        h.node["spec"]["unschedulable"] = True
        h.sync()  # exclude: the label, then the calls in the background; lbc's fails
        done = json.loads(h.node["metadata"]["annotations"][detacher_names.DEREGISTERED])
        assert ["tg", world["ours"], 30443] in done and ["tg", world["lbc"], 31000] not in done
        assert detacher_names.ERROR not in h.node["metadata"]["annotations"], "a background failure is redone, not reported"

        waiting = h.sync()  # within the grace after the exclude step: its calls may still be under way
        assert calls.count(world["lbc"]) == 1 and waiting["resyncAfterSeconds"] <= 1
        h.node["metadata"]["annotations"][detacher_names.DEREGISTERING_SINCE] = "2026-01-01T00:00:00Z"  # long past it
        failed = h.sync()  # deregister step: only what is left, and it fails again
        ann = h.node["metadata"]["annotations"]
        assert "Throttling" in ann[detacher_names.ERROR]
        assert failed["resyncAfterSeconds"] >= 5
        assert tg_members(elbv2, world["lbc"]) == [(world["mine"], 31000)]  # still there: the call failed
        assert "DetachFailed" in kube.reasons()

        h.sync()  # retry: only what is left is called again
        assert calls.count(world["lbc"]) == 3
        assert calls.count(world["ours"]) == 1
        assert tg_members(elbv2, world["lbc"]) == []
        assert detacher_names.ERROR not in h.node["metadata"]["annotations"]
    finally:
        client.meta.events.unregister("provide-client-params.elastic-load-balancing-v2.DeregisterTargets", flaky)


def test_a_deregistration_waiting_for_its_token_is_put_off_not_failed_and_recorded_when_it_goes_out(world, harness):
    """AWS has throttled this process's DeregisterTargets, so its share of ELB's mutating bucket starts from
    empty: the deregister step's call for the group waits for its token. The hook call carries it on instead
    of waiting: no error on the Node, no DetachFailed, a look again within the call's deadline to go out;
    the call goes out when the token comes, and its record lands on the Node."""
    from hooks import aws_rate_buckets

    h, kube = harness
    elbv2 = world["elbv2"]
    h.sync()
    client = h.ctx.aws.client("elbv2", "us-east-1")
    calls = []

    def failing_once(params, **_):  # the exclude step's background call fails: the deregister step redoes it
        calls.append(params["TargetGroupArn"])
        if params["TargetGroupArn"] == world["lbc"] and calls.count(world["lbc"]) == 1:
            raise ClientError({"Error": {"Code": "InternalFailure", "Message": "boom"}}, "DeregisterTargets")

    client.meta.events.register("provide-client-params.elastic-load-balancing-v2.DeregisterTargets", failing_once)
    try:
        h.node["spec"]["unschedulable"] = True
        h.sync()
        h.node["metadata"]["annotations"][detacher_names.DEREGISTERING_SINCE] = "2026-01-01T00:00:00Z"
        h.ctx.aws.limiter.throttled("us-east-1", aws_rate_buckets.request_draws("elbv2", "DeregisterTargets", {}))
        put_off = h.sync()  # the harness waits for what the call carried on before it returns
        ann = h.node["metadata"]["annotations"]
        assert detacher_names.ERROR not in ann and detacher_names.ATTEMPTS not in ann
        assert "DetachFailed" not in kube.reasons()
        assert put_off["resyncAfterSeconds"] <= 2.5
        assert calls.count(world["lbc"]) == 2
        assert ["tg", world["lbc"], 31000] in json.loads(ann[detacher_names.DEREGISTERED]), "recorded when it went out"
        assert tg_members(elbv2, world["lbc"]) == []
    finally:
        client.meta.events.unregister("provide-client-params.elastic-load-balancing-v2.DeregisterTargets",
                                      failing_once)


def test_a_lost_write_of_the_response_repeats_no_deregistration(world, harness):
    """Metacontroller's write after the exclude step conflicts and the sync is redone from the Node it had:
    the label and the record of the deregistrations were written by the hook itself, so the redone call,
    decided on the API server's Node, calls no target group again."""
    h, kube = harness
    h.sync()
    client = h.ctx.aws.client("elbv2", "us-east-1")
    calls = []

    def count(params, **_):
        calls.append(params["TargetGroupArn"])

    client.meta.events.register("provide-client-params.elastic-load-balancing-v2.DeregisterTargets", count)
    try:
        h.node["spec"]["unschedulable"] = True
        first = h.sync(lost_write=True)
        assert detacher_names.DEREGISTERED not in (first.get("annotations") or {})  # not left to Metacontroller's write
        on_node = json.loads(kube.nodes["node-a"]["metadata"]["annotations"][detacher_names.DEREGISTERED])
        assert {m[1] for m in on_node if m[0] == "tg"} == {world["ours"], world["lbc"], world["static"]}
        assert sorted(calls) == sorted([world["ours"], world["lbc"], world["static"]])

        h.sync()  # redone from the Node as it was before the exclude step
        assert sorted(calls) == sorted([world["ours"], world["lbc"], world["static"]])  # none again
        _until(h, lambda r: detacher_names.DETACHED_AT in h.node["metadata"]["annotations"])
    finally:
        client.meta.events.unregister("provide-client-params.elastic-load-balancing-v2.DeregisterTargets", count)


def test_unreachable_kubernetes_api_means_no_deregistration_until_it_answers(world, make_ctx):
    """The Node's state is proven only by the API server: while it cannot be read, nothing leaves a load
    balancer; the Attachment stays, and the detach goes on once the API answers."""
    CACHE.clear()
    kube = FakeKube(unavailable=True)
    ctx = make_ctx({"NODEWARDEN_DISCOVERY_CACHE_SECONDS": "0"}, kube=kube)
    h = Harness(ctx, _node(world["mine"]))
    h.sync()
    h.node["spec"]["unschedulable"] = True
    h.sync()
    before = tg_members(world["elbv2"], world["ours"])
    held = h.sync()
    assert tg_members(world["elbv2"], world["ours"]) == before and len(before) == 2
    assert held["attachments"] and held["resyncAfterSeconds"] >= 1
    kube.unavailable = False
    for _ in range(4):  # the steps nothing could be recorded for while the API was away come now
        h.sync()
        if tg_members(world["elbv2"], world["ours"]) != before:
            break
    assert tg_members(world["elbv2"], world["ours"]) == [(world["neighbour"], 30080)]


# ------------------------------------------------------- gone means done; every wait ends


def _until(h, done, hook="sync", limit=12):
    for _ in range(limit):
        response = h.sync(hook)
        if done(response):
            return response
    raise AssertionError(f"not done after {limit} calls: {h.responses[-1]}")


def _cordoned_and_detached(h):
    """Warm the Attachment, cordon, and sync through exclude, deregister and drain."""
    h.sync()
    h.node["spec"]["unschedulable"] = True
    for _ in range(3):
        h.sync()


def _deleting(h, seconds_ago=0):
    import datetime as dt

    when = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=seconds_ago)
    h.node["metadata"]["deletionTimestamp"] = when.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_deleting_node_whose_target_group_is_gone_is_let_go(world, harness):
    h, _ = harness
    _deleting(h)
    h.sync(hook="finalize")  # the detach begins: the Attachment lists the target group
    assert world["lbc"] in {t["arn"] for t in h.attachments[0]["spec"]["awsTargets"]}
    world["elbv2"].delete_target_group(TargetGroupArn=world["lbc"])
    final = _until(h, lambda r: r.get("finalized") is True, hook="finalize")
    assert final["finalized"] is True
    assert tg_members(world["elbv2"], world["ours"]) == [(world["neighbour"], 30080)]


def test_a_target_group_deleted_while_draining_counts_as_drained(world, harness):
    h, _ = harness
    h.sync()
    h.node["spec"]["unschedulable"] = True
    h.sync()
    h.sync()  # deregistered
    world["elbv2"].delete_target_group(TargetGroupArn=world["static"])
    h.sync()
    assert detacher_names.DETACHED_AT in h.node["metadata"]["annotations"]
    assert detacher_names.ERROR not in h.node["metadata"]["annotations"]


def test_uncordon_after_the_service_is_gone_still_takes_our_label_off(world, harness):
    h, kube = harness
    _cordoned_and_detached(h)
    world["elbv2"].delete_target_group(TargetGroupArn=world["lbc"])  # the Service was deleted
    h.node["spec"]["unschedulable"] = False
    h.sync()  # what is about to be registered, written on the Node
    h.sync()
    assert detacher_names.EXCLUDE_LABEL not in h.node["metadata"]["labels"]
    assert not any(k in h.node["metadata"]["annotations"] for k in detacher_names.OUR_ANNOTATIONS)
    assert tg_members(world["elbv2"], world["ours"]) == sorted([(world["mine"], 30443), (world["neighbour"], 30080)])


def _refuse(client, operation, code="AccessDenied"):
    def refuse(**_):
        raise ClientError({"Error": {"Code": code, "Message": "injected by the test"}}, operation)

    event = f"provide-client-params.elastic-load-balancing-v2.{operation}"
    client.meta.events.register(event, refuse)
    return lambda: client.meta.events.unregister(event, refuse)


def test_a_deleting_node_is_let_go_at_its_deadline_whatever_fails(world, harness):
    """AWS refuses every deregistration (injected: moto cannot): still released once the deadline passed."""
    h, kube = harness
    h.sync()
    undo = _refuse(h.ctx.aws.client("elbv2", "us-east-1"), "DeregisterTargets")
    try:
        _deleting(h, seconds_ago=10)
        held = [h.sync("finalize") for _ in range(3)]
        assert all(r.get("finalized") is False for r in held)
        _deleting(h, seconds_ago=400)  # past NODEWARDEN_FINALIZE_DRAIN_TIMEOUT_SECONDS (330)
        assert h.sync("finalize")["finalized"] is True
        assert "DetachAbandoned" in kube.reasons() or h.responses[-1]["finalized"] is True
    finally:
        undo()


def test_a_reattach_that_keeps_failing_gives_the_node_back_at_its_deadline(world, harness):
    h, kube = harness
    _cordoned_and_detached(h)
    undo = _refuse(h.ctx.aws.client("elbv2", "us-east-1"), "RegisterTargets")
    try:
        h.node["spec"]["unschedulable"] = False
        h.sync()  # what is about to be registered, written on the Node
        h.sync()
        ann = h.node["metadata"]["annotations"]
        assert detacher_names.REATTACH_FAILING_SINCE in ann and h.node["metadata"]["labels"].get(detacher_names.EXCLUDE_LABEL)
        ann[detacher_names.REATTACH_FAILING_SINCE] = "2026-01-01T00:00:00Z"  # failing for long past the deadline
        h.sync()
        assert detacher_names.EXCLUDE_LABEL not in h.node["metadata"]["labels"]
        assert not any(k in h.node["metadata"]["annotations"] for k in detacher_names.OUR_ANNOTATIONS)
        assert "ReattachAbandoned" in kube.reasons()
    finally:
        undo()


# ----------------------------------------------------- every detach reason has an end


def _pod_request(h, daemonset="ingress/contour", since="2026-11-23T00:00:00Z"):
    h.node["metadata"]["annotations"][detacher_names.FOR_POD] = f"{daemonset}/uid-old"
    if since:
        h.node["metadata"]["annotations"][detacher_names.FOR_POD_SINCE] = since


def test_a_pod_request_ends_when_its_daemonset_is_gone(world, harness):
    h, kube = harness
    h.sync()
    _pod_request(h, since=None)
    h.sync()  # no managed DaemonSet ingress/contour exists in the API server
    ann = h.node["metadata"]["annotations"]
    assert detacher_names.FOR_POD not in ann and detacher_names.DETACHING not in ann
    assert "DaemonSetPodRequestEnded" in kube.reasons()
    assert len(tg_members(world["elbv2"], world["ours"])) == 2  # never left


def test_a_pod_request_ends_when_no_replacement_comes_in_time(world, make_ctx):
    CACHE.clear()
    kube = FakeKube()
    kube.add_object({"apiVersion": "apps/v1", "kind": "DaemonSet",
                     "metadata": {"name": "contour", "namespace": "ingress"}})
    ctx = make_ctx({"NODEWARDEN_DISCOVERY_CACHE_SECONDS": "0",
                    "NODEWARDEN_MANAGED_DAEMONSETS": "ingress/contour",
                    "NODEWARDEN_DAEMONSET_REPLACEMENT_TIMEOUT_SECONDS": "600"}, kube=kube)
    h = Harness(ctx, _node(world["mine"]))
    h.sync()
    import datetime as dt

    recent = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    _pod_request(h, since=recent)
    for _ in range(3):
        h.sync()
    assert tg_members(world["elbv2"], world["ours"]) == [(world["neighbour"], 30080)], "detached for the pod"
    assert h.responses[-1]["resyncAfterSeconds"] <= 600
    h.node["metadata"]["annotations"][detacher_names.FOR_POD_SINCE] = "2026-01-01T00:00:00Z"  # the replacement never came
    h.sync()
    assert detacher_names.FOR_POD not in h.node["metadata"]["annotations"]
    h.sync()
    assert sorted(tg_members(world["elbv2"], world["ours"])) == sorted([(world["mine"], 30443),
                                                                      (world["neighbour"], 30080)])


def test_our_taint_comes_off_when_only_a_pod_request_is_left(world, make_ctx):
    """Cordon → shutdown laid our taint; uncordon with a pod request left must not keep it (the
    DaemonSet's replacement could never schedule)."""
    import datetime as dt

    CACHE.clear()
    kube = FakeKube()
    kube.add_object({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "contour", "namespace": "ingress"}})
    ctx = make_ctx({"NODEWARDEN_DISCOVERY_CACHE_SECONDS": "0",
                    "NODEWARDEN_MANAGED_DAEMONSETS": "ingress/contour"}, kube=kube)
    h = Harness(ctx, _node(world["mine"]))
    _cordoned_and_detached(h)
    h.node["spec"]["taints"] = [{"key": detacher_names.DETACHING_TAINT, "effect": "NoSchedule"}]
    h.node["spec"]["unschedulable"] = False
    _pod_request(h, since=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    h.sync()
    patches = [c[3] for c in kube.calls if c[0] == "json_patch" and c[1] == "Node"]
    assert any(op["path"] == "/spec/taints" and not any(t["key"] == detacher_names.DETACHING_TAINT for t in op["value"])
               for ops in patches for op in ops if op["op"] == "add"), patches


def test_a_pod_we_evicted_from_a_leaving_node_starts_no_pod_request(make_ctx):
    from hooks.config import load_settings
    from hooks.controllers import node_detacher_pods
    from hooks.contract import DECORATOR, parse_request

    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "contour-x", "namespace": "ingress", "uid": "uid-x",
                        "deletionTimestamp": "2026-11-23T00:00:00Z",
                        "ownerReferences": [{"kind": "DaemonSet", "name": "contour", "controller": True}]},
           "spec": {"nodeName": "node-a"}}
    request = parse_request(hook_request("node-detacher-pods", pod), DECORATOR)
    settings = load_settings({})
    observed = {"daemonset": "ingress/contour", "node": "node-a", "managed": True, "nodeRequest": None}
    import datetime as dt

    now = dt.datetime(2026, 11, 23, tzinfo=dt.timezone.utc)
    assert node_detacher_pods.decide(request, settings, now, {**observed, "nodeLeaving": True}).actions == []
    assert node_detacher_pods.decide(request, settings, now, {**observed, "nodeLeaving": False}).actions


# ------------------------------------------------------------------ trust and bad input


def test_a_forged_cordon_deregisters_nothing(world, harness):
    """The body says cordoned; the API server's Node (same name, another uid) is not."""
    h, kube = harness
    h.sync()
    real = _node(world["mine"])
    real["metadata"]["uid"] = "uid-the-real-one"
    forged = json.loads(json.dumps(h.node))
    forged["spec"]["unschedulable"] = True
    forged["metadata"]["labels"][detacher_names.EXCLUDE_LABEL] = detacher_names.EXCLUDE_VALUE
    forged["metadata"]["annotations"].update({detacher_names.DETACHING: "true", detacher_names.SINCE: "2026-11-23T00:00:00Z"})
    body = hook_request("node-detacher", forged, children=h.attachments, child_kinds=["Attachment.nodewarden.io/v1alpha1"])
    kube.add_object(real)
    response = serve("node-detacher", "sync", json.loads(json.dumps(body)), h.ctx)
    assert response["attachments"], "the Attachment is kept (omitting it would delete it)"
    assert len(tg_members(world["elbv2"], world["ours"])) == 2


@pytest.mark.parametrize("attempts", ["abc", "1.5", "10000000000", "²", "-3"])
def test_garbage_in_our_own_progress_annotations_never_strands_the_node(world, harness, attempts):
    h, _ = harness
    h.sync()
    h.node["spec"]["unschedulable"] = True
    h.node["metadata"]["annotations"][detacher_names.ATTEMPTS] = attempts
    deep = "[" * 5000 + "]" * 5000
    h.node["metadata"]["annotations"][detacher_names.DEREGISTERED] = deep
    for _ in range(4):
        h.sync()
    assert tg_members(world["elbv2"], world["ours"]) == [(world["neighbour"], 30080)]


def test_a_fresh_cordon_does_not_wait_for_the_controller_managers_taint():
    """The hook writes the exclude label itself, checked against the Node it read and retried on a conflict,
    so kube-controller-manager's unschedulable taint landing meanwhile costs nothing: no wait for it."""
    import pathlib

    from hooks import timefmt
    from hooks.config import load_settings
    from hooks.contract import DECORATOR, parse_request
    from hooks.controllers import node_detacher

    fixture = pathlib.Path(__file__).parents[1] / "fixtures" / "node-detacher" / "trigger-cordon.json"
    case = json.loads(fixture.read_text())
    request = parse_request(case["request"], DECORATOR)
    assert request.parent["spec"].get("unschedulable") is True
    assert not any(t.get("key") == detacher_names.UNSCHEDULABLE_TAINT for t in request.parent["spec"].get("taints") or [])
    settings = load_settings({"NODEWARDEN_CLUSTER_NAME": "test-cluster"})
    now = timefmt.parse(case["now"])
    plan = node_detacher.decide(request, settings, now, {**case["observed"], "unschedulableTaintPendingSeconds": 0.5})
    assert plan.actions[0].kind == "kube.label-node"
    assert plan.actions[0].params["labels"] == {detacher_names.EXCLUDE_LABEL: detacher_names.EXCLUDE_VALUE}


def test_an_uncordon_waits_for_the_controller_managers_taint_to_go_but_not_for_ever():
    """The re-attach is answered for Metacontroller to write (the label off, our annotations and condition
    gone): written before kube-controller-manager takes its taint off, it would be refused as a conflict
    and redone, Events and all; so it waits, bounded."""
    import pathlib

    from hooks import timefmt
    from hooks.config import load_settings
    from hooks.contract import DECORATOR, parse_request
    from hooks.controllers import node_detacher

    fixture = pathlib.Path(__file__).parents[1] / "fixtures" / "node-detacher" / "reattach-after-uncordon.json"
    case = json.loads(fixture.read_text())
    request = parse_request(case["request"], DECORATOR)
    settings = load_settings({"NODEWARDEN_CLUSTER_NAME": "test-cluster"})
    now = timefmt.parse(case["now"])
    waiting = node_detacher.decide(request, settings, now, {**case["observed"], "unschedulableTaintPendingSeconds": 0.5})
    assert not waiting.response["labels"] and not waiting.actions and not waiting.events
    waited = node_detacher.decide(request, settings, now, {**case["observed"], "unschedulableTaintPendingSeconds": 3.5})
    assert waited.response["labels"] == {detacher_names.EXCLUDE_LABEL: None}


def test_discovery_lists_and_reads_tags_where_the_tagging_api_is_refused(world, make_ctx):
    """An IAM policy without tag:GetResources (the refusal injected; moto has no IAM here): the same memberships."""
    from worlds import cluster_gc as w
    from hooks.aws import lb_discovery

    ctx = make_ctx({"NODEWARDEN_DISCOVERY_CACHE_SECONDS": "0"}, kube=FakeKube())
    faults = w.Faults().add("GetResources", "AccessDeniedException", times=float("inf")).attach(ctx.aws)
    index = lb_discovery.build_index(ctx.aws, "us-east-1", ctx.settings)
    assert faults.injected[("GetResources", "AccessDeniedException")] >= 1
    assert index.memberships(world["mine"]) == sorted([
        ("elb", "legacy"), ("tg", world["ours"], 30443), ("tg", world["lbc"], 31000)])
    assert index.memberships(world["neighbour"]) == sorted([("elb", "legacy"), ("tg", world["ours"], 30080)])


def test_a_serving_node_is_never_looked_up_and_a_detach_looks_once(world, harness, monkeypatch):
    """No discovery and no Attachment on the healthy path; the detach's first step reads the index, and
    the steps after it work from the Attachment and the record it left."""
    from hooks.aws import lb_discovery

    h, _ = harness
    reads = []
    real = lb_discovery.CACHE.get
    monkeypatch.setattr(lb_discovery.CACHE, "get", lambda *a, **kw: reads.append(1) or real(*a, **kw))
    for _ in range(3):
        assert h.sync()["attachments"] == []
    assert reads == []

    h.node["spec"]["unschedulable"] = True
    h.sync()  # exclude: the load balancers recorded, the label written, the calls made
    excluding = len(reads)
    assert excluding >= 1 and h.attachments and detacher_names.EXCLUDE_LABEL in h.node["metadata"]["labels"]
    h.sync()  # drain
    assert tg_members(world["elbv2"], world["static"]) == []

    h.node["spec"]["unschedulable"] = False
    h.sync()  # what is about to be registered, from the record, written on the Node
    h.sync()  # re-attach
    assert h.sync()["attachments"] == [], "back in service: the Attachment goes"
    assert len(reads) == excluding


# ------------------------------------------- a deregistration that lands late, whatever becomes of its record


class _Clock:
    """The hook's clock, moved on by the test (how long things take is what is tested, not waited for)."""

    def __init__(self):
        import datetime as dt

        self.now = dt.datetime.now(dt.timezone.utc)

    def __call__(self):
        return self.now

    def advance(self, seconds: float) -> None:
        import datetime as dt

        self.now += dt.timedelta(seconds=seconds)


class ProcessEnded(BaseException):
    """The hook process ending right after an AWS call: raised from botocore's after-call event, past every
    ``except Exception`` of the hook, so nothing that process would have done after the call happens (no
    record of it, no second look at the Node)."""


class HeldAtTheWire:
    """Holds the hook's deregistration calls (DeregisterTargets, DeregisterInstancesFromLoadBalancer), or its
    registrations, at botocore's before-send event, where AWS has not seen them yet, until ``land``; then each
    reaches moto as it is. ``first``: only that many are held, the calls after them pass. Mocked timing: moto
    answers at once and no real part here can make a call the hook sent land after later syncs, which is what
    a slow network or a busy AWS does. After a call has answered, the process goes on, or ends
    (``land(end_process=True)``)."""

    DEREGISTRATIONS = (("elbv2", "elastic-load-balancing-v2.DeregisterTargets"),
                       ("elb", "elastic-load-balancing.DeregisterInstancesFromLoadBalancer"))
    REGISTRATIONS = (("elbv2", "elastic-load-balancing-v2.RegisterTargets"),
                     ("elb", "elastic-load-balancing.RegisterInstancesWithLoadBalancer"))
    DEADLINE_SECONDS = 20.0

    def __init__(self, ctx, operations=DEREGISTRATIONS, first: int | None = None):
        import threading

        self._open = threading.Event()
        self._changed = threading.Condition()
        self._calls = threading.local()  # whether the call on this thread was held
        self.held = self.landed = 0
        self.first = first
        self.end_process = False
        self._hooks = []
        for service, operation in operations:
            events = ctx.aws.client(service, "us-east-1").meta.events
            for event, handler in ((f"before-send.{operation}", self._hold),
                                   (f"after-call.{operation}", self._after)):
                events.register(event, handler)
                self._hooks.append((events, event, handler))

    def _hold(self, **_):
        with self._changed:
            self._calls.held = self.first is None or self.held < self.first
            if not self._calls.held:
                return
            self.held += 1
            self._changed.notify_all()
        if not self._open.wait(self.DEADLINE_SECONDS):
            raise AssertionError("a held call was never let go")

    def _after(self, **_):
        if not getattr(self._calls, "held", False):
            return
        self._calls.held = False
        with self._changed:
            self.landed += 1
            self._changed.notify_all()
        if self.end_process:
            raise ProcessEnded()

    def wait_held(self, count: int) -> None:
        self.wait_for(lambda: self.held >= count)

    def wait_for(self, done) -> None:
        with self._changed:
            assert self._changed.wait_for(done, self.DEADLINE_SECONDS), self.held

    def changed(self) -> None:
        """Something a waiter waits for besides the held calls happened."""
        with self._changed:
            self._changed.notify_all()

    def land(self, end_process: bool = False) -> None:
        """Let every held call through and wait until each has answered; calls after them pass at once (and
        the process that made them, if it ended, is another one by then)."""
        self.end_process = end_process
        self._open.set()
        with self._changed:
            assert self._changed.wait_for(lambda: self.landed >= self.held, self.DEADLINE_SECONDS)
        self.end_process = False

    def close(self) -> None:
        self._open.set()
        for events, event, handler in self._hooks:
            events.unregister(event, handler)


def _registered_where(world) -> dict:
    """Which of our load balancers the instance is in now (moto's view)."""
    mine = world["mine"]
    found = {key: any(i == mine for i, _ in tg_members(world["elbv2"], world[key]))
             for key in ("ours", "lbc", "static")}
    found["legacy"] = mine in elb_members(world["elb"], "legacy")
    return found


EVERYWHERE = {"ours": True, "lbc": True, "static": True, "legacy": True}
NOWHERE = {"ours": False, "lbc": False, "static": False, "legacy": False}


def _end_the_worker() -> None:
    """gunicorn's worker_exit, as the image runs it: it waits for the background runs within the graceful
    timeout (made short here), and the worker goes whether they finished or not."""
    import pathlib
    import runpy

    conf = runpy.run_path(str(pathlib.Path(__file__).parents[2] / "gunicorn.conf.py"))
    conf["worker_exit"].__globals__["graceful_timeout"] = 0  # waits its floor of 1 s
    conf["worker_exit"](None, None)


@pytest.mark.parametrize("record", ["refused", "process-ended"])
def test_a_deregistration_landing_after_the_uncordon_never_keeps_the_node_out(world, harness, record):
    """Cordon: the exclude step writes the label and hands its deregistrations over; they are held on the
    wire. Uncordon: the re-attach registers the node and takes the label off. Then the held calls land, and
    their record is never written: the API server refuses it, or the worker stops (its drain gives up) and
    the process ends right after the calls. The node is schedulable and out of every load balancer, with
    nothing of the detach left on it; the syncs that follow must bring it back, and do once no
    deregistration sent before the re-attach can still land."""
    h, kube = harness
    clock = _Clock()
    h.ctx.clock = clock
    h.sync()
    assert _registered_where(world) == EVERYWHERE
    held = HeldAtTheWire(h.ctx)
    try:
        h.node["spec"]["unschedulable"] = True
        h.sync(drain=False)  # exclude: the label, then the calls handed over, and held
        held.wait_held(4)  # three target groups and the classic ELB
        assert kube.nodes["node-a"]["metadata"]["labels"][detacher_names.EXCLUDE_LABEL] == detacher_names.EXCLUDE_VALUE
        assert _registered_where(world) == EVERYWHERE

        h.node["spec"]["unschedulable"] = False
        h.sync(drain=False)  # what is about to be registered, written on the Node
        h.sync(drain=False)  # re-attach: registered (it still is), label and annotations off
        assert detacher_names.EXCLUDE_LABEL not in h.node["metadata"]["labels"]
        assert detacher_names.SINCE not in h.node["metadata"]["annotations"]

        if record == "refused":
            kube.refused = {("json_patch", "Node")}
            held.land()
            assert actuators.drain_background(10)
            kube.refused = set()
        else:
            _end_the_worker()
            held.land(end_process=True)
        assert _registered_where(world) == NOWHERE, "the late calls took the serving node out"
        assert detacher_names.DEREGISTERED not in kube.nodes["node-a"]["metadata"]["annotations"], "and no record says so"

        for _ in range(2):
            h.sync()
        clock.advance(120)  # past the time any deregistration sent before the re-attach can take to land
        for _ in range(3):
            h.sync()
        assert _registered_where(world) == EVERYWHERE
        assert detacher_names.EXCLUDE_LABEL not in h.node["metadata"]["labels"]
    finally:
        held.close()


def _registrations_while_leaving(h, kube):
    """Watches every registration the hook makes: the list of those made while the API server's Node was
    cordoned, and the function that stops watching."""
    leaving = []

    def check(**_):
        if kube.nodes["node-a"]["spec"].get("unschedulable"):
            leaving.append(dict(kube.nodes["node-a"]["metadata"].get("annotations") or {}))

    return leaving, _on_each_call(h, "RegisterTargets", "RegisterInstancesWithLoadBalancer", check)


def _interleavings():
    """After the exclude step has handed its calls over (held): the calls landing and the uncordon in either
    order, a further sync or none before and between them (one always follows); their record written,
    refused by the API server, or never written (the process ends right after the calls); and whether the
    node is cordoned again before it settles."""
    for first, second in (("land", "uncordon"), ("uncordon", "land")):
        for gaps in itertools.product((False, True), repeat=2):
            steps = ["sync"] * gaps[0] + [first] + ["sync"] * gaps[1] + [second, "sync"]
            for record in ("written", "refused", "process-ended"):
                for again in (False, True):
                    yield tuple(steps), record, again


@pytest.mark.parametrize("steps,record,again", list(_interleavings()),
                         ids=lambda v: "-".join(v) if isinstance(v, tuple) else str(v))
def test_a_schedulable_node_ends_in_every_group_whatever_order_the_calls_land_in(world, harness, steps, record,
                                                                                again):
    """Cordon, then every interleaving of the exclude step's held deregistrations landing (whatever becomes
    of their record) with the uncordon and the syncs around it. Once the node is schedulable and the calls
    have settled, it is in every group it was in and nothing of the detach is left on it; while it is
    cordoned it is never registered anywhere."""
    h, kube = harness
    clock = _Clock()
    h.ctx.clock = clock
    h.sync()
    registered_while_leaving, stop = _registrations_while_leaving(h, kube)
    held = HeldAtTheWire(h.ctx)

    def land():
        if record == "refused":
            kube.refused = {("json_patch", "Node")}
        held.land(end_process=record == "process-ended")
        assert actuators.drain_background(10)
        kube.refused = set()

    try:
        h.node["spec"]["unschedulable"] = True
        h.sync(drain=False)
        held.wait_held(4)
        for step in steps:
            if step == "uncordon":
                h.node["spec"]["unschedulable"] = False
            if step == "land":
                land()
            else:
                h.sync(drain=False)
        if again:  # cordoned again, and kept so for longer than a rejoin waits
            h.node["spec"]["unschedulable"] = True
            h.sync()
            clock.advance(120)
            for _ in range(3):
                h.sync()
            assert _registered_where(world) == NOWHERE
            h.node["spec"]["unschedulable"] = False
            h.sync()
        for _ in range(4):  # each time past the time any deregistration sent before can take to land
            clock.advance(60)
            h.sync()
        assert _registered_where(world) == EVERYWHERE
        assert registered_while_leaving == []
        left = [k for k in h.node["metadata"]["annotations"] if k.startswith(("nodewarden.io/", "node-detacher."))]
        assert left == [] and detacher_names.EXCLUDE_LABEL not in h.node["metadata"]["labels"]
        assert tg_members(world["elbv2"], world["other"]) == [(world["mine"], 31000)], "never ours to touch"
    finally:
        held.close()
        stop()


# ------------------------------------------- a registration that lands while the node leaves again


def _priority_pods(kube, world) -> list:
    """Two pods of different deletion priorities on the node, and a record, for every eviction, of which load
    balancers held the node as it was asked for. An evicted pod goes at once (its kubelet would stop it)."""
    for name, priority in (("ingress", 10), ("app", 5)):
        kube.add_pod({"apiVersion": "v1", "kind": "Pod",
                      "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}",
                                   "annotations": {detacher_names.POD_PRIORITY: str(priority)}},
                      "spec": {"nodeName": "node-a"}, "status": {"phase": "Running"}})
    evictions = []
    create = kube.create

    def create_recording(obj, name=None, namespace=None):
        if getattr(obj, "kind", None) == "Eviction":
            evictions.append((f"{namespace}/{name}", _registered_where(world)))
            kube.pods.pop(f"{namespace}/{name}", None)
        return create(obj, name=name, namespace=namespace)

    kube.create = create_recording
    return evictions


def _leaving_cases():
    """Whose registration lands while the node leaves again: the re-attach's or the rejoin's, held on the wire
    (Metacontroller gives up on the call, whose answer is then never applied), followed by Metacontroller's
    next call for the node completing before the cordon, or the node cordoned before any call completes; the
    held call landing right after the new detach's deregistrations, or 20 s into the drain (the rest of its
    calls then past their deadline to go out). And registrations that are not ours: one made while the node
    drains (another hook process's, a controller's), one made after the drain ended, before the evictions."""
    for held in ("reattach", "rejoin"):
        for then in ("retried", "cordoned-at-once"):
            for lands in ("after-the-exclude", "while-draining"):
                yield held, then, lands
    yield "foreign", None, "while-draining"
    yield "foreign", None, "after-the-drain"


@pytest.mark.parametrize("held,then,lands", list(_leaving_cases()), ids=lambda v: str(v))
def test_a_leaving_node_is_in_no_load_balancer_before_its_pods_are_evicted_whatever_order_the_calls_land_in(
        world, make_ctx, held, then, lands):
    """Cordon, detach, uncordon; then a registration lands while the node leaves again, after that detach's
    deregistrations: one of ours held on the wire (slow AWS, a busy pool), or someone else's. Once the calls
    have settled, every pod evicted was evicted with the node in no load balancer, the classic ELB included,
    whatever the drain timeout (300 s here); and once the node is schedulable again and settled, it is in
    every load balancer it was in, with nothing of the detach left on it."""
    import datetime as dt

    h, kube = _harness(world, make_ctx, NODEWARDEN_DRAIN_TIMEOUT_SECONDS="300")
    clock = _Clock()
    h.ctx.clock = clock
    h.sync()
    h.node["spec"]["unschedulable"] = True
    _until(h, lambda r: detacher_names.DETACHED_AT in h.node["metadata"]["annotations"])
    assert _registered_where(world) == NOWHERE

    call = None
    h.node["spec"]["unschedulable"] = False
    if held == "rejoin":
        _until(h, lambda r: detacher_names.EXCLUDE_LABEL not in h.node["metadata"]["labels"])  # re-attached
        clock.advance(50)  # the rejoin is due
    elif held == "foreign":
        for _ in range(6):
            clock.advance(30)
            h.sync()
        assert _registered_where(world) == EVERYWHERE
    # Only the first registration is held: the ones after it pass.
    wire = HeldAtTheWire(h.ctx, HeldAtTheWire.REGISTRATIONS, first=0 if held == "foreign" else 1)
    try:
        if held != "foreign":
            for _ in range(3):  # the call that registers is held: Metacontroller gives up on it
                call = h.given_up(wire)
                if call is not None:
                    break
            assert call is not None and wire.held == 1
            if then == "retried":
                h.sync()  # Metacontroller's next call for the node, after its hook timeout: it completes

        evictions = _priority_pods(kube, world)
        h.node["spec"]["unschedulable"] = True
        deadline = clock.now + dt.timedelta(seconds=400)  # past the drain timeout
        h.sync()  # the detach begins: the label, and the deregistrations, which land at once
        assert _registered_where(world) == NOWHERE
        if lands == "while-draining":
            for _ in range(2):
                clock.advance(10)
                h.sync()
        if held == "foreign" and lands == "while-draining":  # another process's, or a controller's
            world["elbv2"].register_targets(TargetGroupArn=world["ours"], Targets=[{"Id": world["mine"], "Port": 30443}])
            world["elb"].register_instances_with_load_balancer(LoadBalancerName="legacy",
                                                               Instances=[{"InstanceId": world["mine"]}])
        elif held == "foreign":  # after the drain ended, before the pods go
            while detacher_names.DETACHED_AT not in h.node["metadata"]["annotations"] and clock.now < deadline:
                clock.advance(10)
                h.sync()
            world["elbv2"].register_targets(TargetGroupArn=world["lbc"], Targets=[{"Id": world["mine"], "Port": 31000}])
        else:
            wire.land()
            call.join(10)
            assert not call.is_alive()
            assert _registered_where(world) != NOWHERE, "the held registration landed while the node leaves"
        while clock.now < deadline:
            clock.advance(10)
            h.sync()
        assert [pod for pod, _ in evictions] == ["default/ingress", "default/app"], "the pods were evicted"
        assert [where for _, where in evictions] == [NOWHERE, NOWHERE], "each with the node in no load balancer"
        assert _registered_where(world) == NOWHERE

        h.node["spec"]["unschedulable"] = False
        for _ in range(8):  # each time past the time any call sent before can take to land
            clock.advance(30)
            h.sync()
        assert _registered_where(world) == EVERYWHERE
        left = [k for k in h.node["metadata"]["annotations"] if k.startswith(("nodewarden.io/", "node-detacher."))]
        assert left == [] and detacher_names.EXCLUDE_LABEL not in h.node["metadata"]["labels"]
        assert tg_members(world["elbv2"], world["other"]) == [(world["mine"], 31000)], "never ours to touch"
    finally:
        wire.close()
