"""The one pipeline every controller runs on: its interface, records, preconditions and Events."""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
import pathlib
import threading
import types

import pytest

from hooks import actuators, controllers, events, pipeline, runtime
from hooks.config import load_settings
from hooks.contract import DECORATOR, parse_request
from hooks.kube import event_recorder
from hooks.plan import Action, Change, Plan, PoweredOff, SameObject, TimeAllowance
from worlds.fake_kube import FakeKube

FIXTURES = pathlib.Path(__file__).parents[1] / "fixtures"
NOW = dt.datetime(2026, 11, 23, 12, 0, tzinfo=dt.timezone.utc)


@pytest.mark.parametrize("name", sorted(controllers.CONTROLLERS))
def test_every_registered_controller_implements_the_interface_and_replays(name):
    kind, module = controllers.load(name)
    # A controller made of concerns (hooks/controllers/node.py) runs each concern's own pipeline.
    for concern, _kinds in getattr(module, "CONCERNS", ()):
        assert isinstance(concern, pipeline.Controller), f"{concern.NAME} lacks part of hooks.pipeline.Controller"
    assert hasattr(module, "CONCERNS") or isinstance(module, pipeline.Controller), \
        f"{name} lacks part of hooks.pipeline.Controller"
    assert module.NAME == name
    assert callable(module.sync)
    fixtures = sorted((FIXTURES / name).glob("*.json"))
    assert fixtures, f"no fixture for {name}"
    case = json.loads(fixtures[0].read_text())
    ctx = runtime.Context(load_settings({"NODEWARDEN_CLUSTER_NAME": "test-cluster", **case.get("env", {})}),
                          events_inline=True)
    request = parse_request(case["request"], kind, case.get("hook", "sync"))
    observed, plan = pipeline.replay(module, request, ctx, case.get("observed", {}))
    assert isinstance(plan, Plan) and observed == case.get("observed", {})


# ------------------------------------------------------------------ the runner


def _fake_controller(plan: Plan, **overrides):
    """A controller module with one fixed plan; its settle marks the response so tests see it ran."""
    def settle(request, plan, outcomes, settings, now):
        return Plan(dict(plan.response, settled=[o.action.target for o in outcomes if not o.ok]), events=plan.events)

    module = types.SimpleNamespace(
        NAME="fake", FAILURE_REASON="FakeFailed", gather=lambda request, ctx, now: {},
        decide=lambda request, settings, now, observed: plan, needs_verification=lambda request, plan: False,
        verify=lambda request, ctx: request, unverified=pipeline.refuse, settle=settle)
    for key, value in overrides.items():
        setattr(module, key, value)
    return module


def _node_request(uid="uid-1"):
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "uid": uid}}
    return parse_request({"object": node, "attachments": {}}, DECORATOR)


@pytest.fixture
def ctx():
    kube = FakeKube()
    ctx = runtime.Context(load_settings({"AWS_REGION": "us-east-1"}), events_inline=True)
    ctx._kube = kube
    ctx.clock = lambda: NOW
    return ctx


@pytest.fixture
def test_actuators(monkeypatch):
    ran = []

    def ok(ctx, action):
        ran.append(action.target)

    def fail(ctx, action):
        ran.append(action.target)
        raise RuntimeError("boom")

    monkeypatch.setitem(actuators.ACTUATORS, "test.ok", ok)
    monkeypatch.setitem(actuators.ACTUATORS, "test.fail", fail)
    return ran


def test_a_record_lands_only_when_its_action_succeeds(ctx, test_actuators):
    plan = Plan({"status": {"deleted": 3}}, [
        Action("test.ok", "a", record=(Change(("status", "deleted"), add=1), Change(("status", "a"), "done"))),
        Action("test.fail", "b", record=(Change(("status", "deleted"), add=1), Change(("status", "b"), "done"))),
    ])
    response = pipeline.run(_fake_controller(plan), _node_request(), ctx)
    assert response["status"] == {"deleted": 4, "a": "done"}
    assert response["settled"] == ["b"]
    assert plan.response == {"status": {"deleted": 3}}  # the decided response itself is never changed


def test_a_union_record_merges_into_a_json_list_annotation(ctx, test_actuators):
    plan = Plan({"annotations": {"k": '[["tg","arn:1",80]]'}}, [
        Action("test.ok", "a", record=(Change(("annotations", "k"), union=(("elb", "classic"),)),))])
    response = pipeline.run(_fake_controller(plan), _node_request(), ctx)
    assert json.loads(response["annotations"]["k"]) == [["elb", "classic"], ["tg", "arn:1", 80]]


def test_an_action_whose_object_changed_uid_does_not_run(ctx, test_actuators):
    ctx.kube.add_object({"kind": "Node", "metadata": {"name": "n1", "uid": "uid-2"}})  # a namesake
    plan = Plan({}, [Action("test.ok", "x", requires=(SameObject("Node", "n1", "uid-1"),),
                            record=(Change(("done",), True),)),
                     Action("test.ok", "y", requires=(SameObject("Node", "n1", "uid-2"),))])
    response = pipeline.run(_fake_controller(plan), _node_request(), ctx)
    assert test_actuators == ["y"] and "done" not in response and response["settled"] == ["x"]


def test_an_action_needing_a_power_off_runs_only_while_the_instance_is_off(aws, make_ctx, test_actuators):
    ec2 = aws("ec2")
    image = ec2.describe_images()["Images"][0]["ImageId"]
    instance = ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    ctx = make_ctx(kube=FakeKube())
    need_off = Action("test.ok", "pod", requires=(PoweredOff(instance, "us-east-1"),))
    pipeline.run(_fake_controller(Plan({}, [need_off])), _node_request(), ctx)
    assert test_actuators == []  # running: not proven off
    ec2.stop_instances(InstanceIds=[instance], Force=True)
    pipeline.run(_fake_controller(Plan({}, [need_off])), _node_request(), ctx)
    assert test_actuators == ["pod"]


def test_reports_go_out_only_for_actions_that_succeeded_and_a_failure_is_said_once(ctx, test_actuators):
    plan = Plan({}, [Action("test.ok", "a", reports=events.normal("DidA", "a done")),
                     Action("test.fail", "b", reports=events.normal("DidB", "b done"))],
                [events.normal("Decided", "planned")])
    pipeline.run(_fake_controller(plan), _node_request(), ctx)
    assert ctx.kube.reasons() == ["Decided", "DidA", "FakeFailed"]


def test_an_action_put_off_by_the_calls_budget_is_not_run_and_not_a_failure(ctx, test_actuators):
    plan = Plan({}, [Action("test.ok", "a"), Action("test.ok", "b")], gate=TimeAllowance(0))
    response = pipeline.run(_fake_controller(plan), _node_request(), ctx)
    assert test_actuators == ["a"], "the first always runs; the budget was used up by then"
    assert response["settled"] == ["b"] and "FakeFailed" not in ctx.kube.reasons()


def test_an_unverified_request_runs_only_what_unverified_keeps(ctx, test_actuators):
    from hooks.kube import fresh

    def verify(request, ctx):
        raise fresh.Unverified("no API server")

    plan = Plan({"decided": True}, [Action("test.ok", "irreversible")])
    module = _fake_controller(plan, needs_verification=lambda r, p: True, verify=verify)
    assert pipeline.run(module, _node_request(), ctx) == {"decided": True}  # what refuse keeps: no action
    assert test_actuators == []


def test_a_verified_request_is_decided_again_on_the_fresh_copy(ctx, test_actuators):
    seen = []

    def decide(request, settings, now, observed):
        seen.append((request.verified, request.meta["uid"]))
        return Plan({}, [Action("test.ok", "x")])

    def verify(request, ctx):
        return parse_request({"object": {"kind": "Node", "apiVersion": "v1",
                                         "metadata": {"name": "n1", "uid": "fresh"}}}, DECORATOR)

    module = _fake_controller(None, decide=decide, verify=verify, needs_verification=lambda r, p: not r.verified)
    pipeline.run(module, _node_request("from-body"), ctx)
    assert seen == [(False, "from-body"), (True, "fresh")] and test_actuators == ["x"]


def _persisting_controller(ctx, key="nodewarden.io/k"):
    """Verified on the API server's Node n1; one succeeding action whose record ``persist`` names."""
    plan = Plan({"annotations": {"other": "x"}},
                [Action("test.ok", "a", record=(Change(("annotations", key), union=("a",)),))], persist=(key,))

    def verify(request, ctx):
        from hooks.kube import fresh

        return parse_request({"object": ctx.kube.get(fresh.resource("Node"), "n1").to_dict()}, DECORATOR)

    return _fake_controller(plan, needs_verification=lambda r, p: not r.verified, verify=verify)


def test_a_persisted_record_is_written_to_the_node_by_the_call_and_left_out_of_the_response(ctx, test_actuators):
    ctx.kube.add_object({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "uid": "uid-1"}})
    response = pipeline.run(_persisting_controller(ctx), _node_request(), ctx)
    assert ctx.kube.nodes["n1"]["metadata"]["annotations"] == {"nodewarden.io/k": '["a"]'}
    assert response["annotations"] == {"other": "x"}  # Metacontroller's write no longer carries it


def test_a_persisted_record_stays_in_the_response_when_the_node_cannot_be_written(ctx, test_actuators):
    ctx.kube.add_object({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "uid": "uid-1"}})

    def refused(*args, **kwargs):
        raise RuntimeError("API server gone")

    ctx.kube.json_patch = refused
    response = pipeline.run(_persisting_controller(ctx), _node_request(), ctx)
    assert response["annotations"] == {"other": "x", "nodewarden.io/k": '["a"]'}


def test_an_unverified_request_persists_nothing(ctx, test_actuators):
    from hooks.kube import fresh

    ctx.kube.add_object({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "uid": "uid-1"}})
    module = _persisting_controller(ctx)

    def unreachable(request, ctx):
        raise fresh.Unverified("API server unreachable")

    module.verify = unreachable
    module.unverified = lambda request, plan, ctx, reason: plan
    response = pipeline.run(module, _node_request(), ctx)
    assert "annotations" not in ctx.kube.nodes["n1"]["metadata"] and test_actuators == []
    assert response == {"annotations": {"other": "x"}}


# ------------------------------------------------------------------ background actions


def _backgrounding_controller(actions, key="nodewarden.io/k"):
    """Verified on the API server's Node n1; ``actions`` as decided, with one background Event."""
    plan = Plan({"annotations": {"other": "x"}}, actions, background_events=[events.normal("AllDone", "done")])

    def verify(request, ctx):
        from hooks.kube import fresh

        return parse_request({"object": ctx.kube.get(fresh.resource("Node"), "n1").to_dict()}, DECORATOR)

    return _fake_controller(plan, needs_verification=lambda r, p: not r.verified, verify=verify)


def _in_background(target, key="nodewarden.io/k", kind="test.ok"):
    return Action(kind, target, record=(Change(("annotations", key), union=(target,)),), background=True)


def test_a_call_answers_before_its_background_actions_finish_and_they_record_themselves(ctx, test_actuators,
                                                                                         monkeypatch):
    ctx.kube.add_object({"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": "n1", "uid": "uid-1", "annotations": {"nodewarden.io/k": '["earlier"]'}}})
    release = threading.Event()
    def slow(ctx, action):
        release.wait(10)
        test_actuators.append(action.target)

    monkeypatch.setitem(actuators.ACTUATORS, "test.slow", slow)
    module = _backgrounding_controller([Action("test.ok", "first"), _in_background("a", kind="test.slow"),
                                        _in_background("b")])
    response = pipeline.run(module, _node_request(), ctx)
    # Answered while "a" still runs: nothing of the background in the response, nothing recorded yet.
    assert response == {"annotations": {"other": "x"}}
    assert ctx.kube.nodes["n1"]["metadata"]["annotations"] == {"nodewarden.io/k": '["earlier"]'}
    assert "AllDone" not in ctx.kube.reasons()
    release.set()
    assert actuators.drain_background(10)
    assert test_actuators[0] == "first" and sorted(test_actuators[1:]) == ["a", "b"]
    # The record merged into what the Node had, and the Event once all succeeded.
    assert json.loads(ctx.kube.nodes["n1"]["metadata"]["annotations"]["nodewarden.io/k"]) == ["a", "b", "earlier"]
    assert "AllDone" in ctx.kube.reasons()


def test_background_actions_wait_for_every_other_action_of_the_call_to_succeed(ctx, test_actuators):
    ctx.kube.add_object({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "uid": "uid-1"}})
    module = _backgrounding_controller([Action("test.fail", "label"), _in_background("a")])
    pipeline.run(module, _node_request(), ctx)
    assert actuators.drain_background(10)
    assert test_actuators == ["label"], "the background action never ran"
    assert "annotations" not in ctx.kube.nodes["n1"]["metadata"] and "AllDone" not in ctx.kube.reasons()


def test_a_background_action_that_fails_records_nothing_of_its_own(ctx, test_actuators):
    ctx.kube.add_object({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "uid": "uid-1"}})
    module = _backgrounding_controller([_in_background("a"), _in_background("b", kind="test.fail")])
    pipeline.run(module, _node_request(), ctx)
    assert actuators.drain_background(10)
    assert ctx.kube.nodes["n1"]["metadata"]["annotations"] == {"nodewarden.io/k": '["a"]'}
    assert "AllDone" not in ctx.kube.reasons(), "not every one succeeded"


def test_a_background_record_is_never_written_to_a_namesake(ctx, test_actuators, monkeypatch):
    ctx.kube.add_object({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "uid": "uid-1"}})
    release = threading.Event()
    monkeypatch.setitem(actuators.ACTUATORS, "test.slow", lambda ctx, a: release.wait(10))
    pipeline.run(_backgrounding_controller([_in_background("a", kind="test.slow")]), _node_request(), ctx)
    ctx.kube.add_object({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "uid": "uid-2"}})
    release.set()
    assert actuators.drain_background(10)
    assert "annotations" not in ctx.kube.nodes["n1"]["metadata"]


def _unconfirmable(plan: Plan, **overrides):
    """A controller that never asks for verification itself, on an API server that cannot confirm anything;
    its ``unverified`` hands back the whole plan, actions and Events included."""
    from hooks.kube import fresh

    calls = []

    def verify(request, ctx):
        calls.append(request.name)
        raise fresh.Unverified("cannot read")

    module = _fake_controller(plan, verify=verify, unverified=lambda request, plan, ctx, reason: plan, **overrides)
    return module, calls


@pytest.mark.parametrize("plan", [
    Plan({}, [Action("test.ok", "a")]),
    Plan({}, events=[events.normal("Something", "said on a forged body")]),
])
def test_nothing_is_done_or_said_on_a_body_the_api_server_did_not_confirm(ctx, test_actuators, plan):
    """Every action and Event follows a verified request, whatever the controller's needs_verification says."""
    module, calls = _unconfirmable(plan)
    response = pipeline.run(module, _node_request(), ctx)
    assert calls == ["n1"], "verification was asked for"
    assert test_actuators == [] and ctx.kube.reasons() == []
    assert response == {}


def test_a_plan_with_nothing_to_do_is_answered_without_a_read(ctx, test_actuators):
    module, calls = _unconfirmable(Plan({"labels": {}}))
    assert pipeline.run(module, _node_request(), ctx) == {"labels": {}} and calls == []


def _finalize_request(kind: str, deleting_in_body: bool = True):
    from hooks.contract import COMPOSITE

    meta = {"name": "m1", "uid": "uid-1", **({"deletionTimestamp": "2026-11-23T11:00:00Z"} if deleting_in_body else {})}
    obj = {"apiVersion": "nodewarden.io/v1alpha1", "kind": "Machine", "metadata": meta}
    body = {"object": obj} if kind == DECORATOR else {"parent": obj}
    return parse_request({**body, "finalizing": True}, kind if kind == DECORATOR else COMPOSITE, "finalize")


def _alive_on_the_api_server(request, ctx):
    meta = {k: v for k, v in request.meta.items() if k != "deletionTimestamp"}
    return dataclasses.replace(request, parent=dict(request.parent, metadata=meta))


def test_a_composite_finalize_for_an_object_alive_on_the_api_server_does_nothing(ctx, test_actuators):
    """The body's finalizing (and its deletionTimestamp) are claims; the fresh copy says whether it is going."""
    from hooks.contract import COMPOSITE

    seen = []

    def decide(request, settings, now, observed):
        seen.append((request.verified, request.finalizing))
        return Plan({"finalized": True}, [Action("test.ok", "terminate")]) if request.finalizing else Plan({})

    module = _fake_controller(None, decide=decide, verify=_alive_on_the_api_server,
                              unverified=lambda request, plan, ctx, reason: Plan({"finalized": False, "why": reason}))
    response = pipeline.run(module, _finalize_request(COMPOSITE), ctx)
    assert test_actuators == [] and seen == [(False, True)]
    assert response["finalized"] is False and "no deletionTimestamp" in response["why"]


def test_a_decorator_finalize_for_an_object_alive_on_the_api_server_is_a_sync_that_lets_go(ctx, test_actuators):
    """Metacontroller calls a decorator's finalize also when the object stops matching the selector: nothing a
    deletion would do happens, and the finalizer is let go."""
    seen = []

    def decide(request, settings, now, observed):
        seen.append((request.verified, request.finalizing))
        if request.finalizing:
            return Plan({"finalized": True}, [Action("test.ok", "deregister")])
        return Plan({"labels": {}}, events=[events.normal("Synced", "as a sync")])

    module = _fake_controller(None, decide=decide, verify=_alive_on_the_api_server)
    response = pipeline.run(module, _finalize_request(DECORATOR), ctx)
    assert seen == [(False, True), (True, False)] and test_actuators == []
    assert response == {"labels": {}, "finalized": True}


# ------------------------------------------------------------------- the recorder


class _Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def test_a_repeated_event_is_aggregated_into_a_count():
    kube = FakeKube()
    recorder = event_recorder.Recorder(lambda: kube, inline=True)
    about = events.node_ref("n1", "u1")
    for _ in range(3):
        recorder.record("node-detacher", about, events.warning("DetachFailed", "same text"))
    creates = [c for c in kube.calls if c[0] == "create"]
    patches = [c for c in kube.calls if c[0] == "merge_patch"]
    assert len(creates) == 1 and creates[0][4].source.component == "node-detacher"
    assert [p[3]["count"] for p in patches] == [2, 3]


def test_a_normal_event_redone_at_once_is_not_news_but_later_it_counts():
    kube, clock = FakeKube(), _Clock()
    recorder = event_recorder.Recorder(lambda: kube, inline=True, clock=clock)
    about = events.node_ref("n1", "u1")
    recorder.record("node-detacher", about, events.normal("Detached", "Every target finished draining"))
    recorder.record("node-detacher", about, events.normal("Detached", "Every target finished draining"))
    assert kube.reasons() == ["Detached"]  # a redone hook call: one Event, count 1
    clock.t += event_recorder.REPEAT_SECONDS + 1
    recorder.record("node-detacher", about, events.normal("Detached", "Every target finished draining"))
    assert kube.reasons() == ["Detached", "Detached"]  # a second detach later: counted


def test_events_about_one_object_are_rate_limited_and_the_bucket_refills():
    kube, clock = FakeKube(), _Clock()
    recorder = event_recorder.Recorder(lambda: kube, inline=True, clock=clock)
    about = events.node_ref("n1")
    for i in range(event_recorder.BURST + 5):
        recorder.record("c", about, events.normal("Step", f"step {i}"))
    assert len(kube.reasons()) == event_recorder.BURST and recorder.dropped == 5
    recorder.record("c", events.node_ref("n2"), events.normal("Step", "another object has its own bucket"))
    assert len(kube.reasons()) == event_recorder.BURST + 1
    clock.t += event_recorder.REFILL_SECONDS
    recorder.record("c", about, events.normal("Step", "after a refill"))
    assert len(kube.reasons()) == event_recorder.BURST + 2


def test_events_are_sent_off_the_request_path():
    release = threading.Event()

    class SlowKube(FakeKube):
        def create(self, obj, name=None, namespace=None):
            release.wait(5)
            super().create(obj, name, namespace)

    kube = SlowKube()
    recorder = event_recorder.Recorder(lambda: kube)
    recorder.record("c", events.node_ref("n1"), events.normal("Step", "one"))  # returns although the POST blocks
    assert kube.reasons() == []
    release.set()
    assert recorder.flush(5) and kube.reasons() == ["Step"]


def test_a_failing_api_server_never_fails_the_caller():
    recorder = event_recorder.Recorder(lambda: FakeKube(unavailable=True), inline=True)
    recorder.record("c", {"kind": "Node", "name": "n1"}, events.normal("Step", "lost"))
