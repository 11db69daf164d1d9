"""A fencing storm through an AWS that refuses every EC2 call for a while: nothing destructive is done on a
guess, nothing recorded is lost, every hook answer is a 200, and once AWS answers again every request ends
as it would have without the faults.

Six FencingRequests in one hook process (one context, one code clock, answered by the hook server's app),
caught by the faults at different points: two not started, two whose stops are requested and not yet
confirmed, two in recovery (one with a pod the out-of-service taint removes, one, a Reboot, waiting for
its VolumeAttachment to go). moto answers through the tests' throttling AWS (devcluster/throttling.py),
whose faults refuse calls as AWS does: RequestLimitExceeded, or an InternalError with HTTP 500; a timeout
is botocore's ReadTimeoutError, raised before anything is sent (worlds/cluster_gc.Late).
"""
from __future__ import annotations

import copy

import pytest

from hooks import fencing_names
from hooks.app import create_app
from hooks.aws import rate_limits
from hooks.aws.clients import AwsClients
from worlds.clock import ManualClock
from worlds.cluster_gc import Calls, Late
from worlds.fake_kube import FakeKube
from worlds.fencing import RequestHarness, instance_state, launch, unready_node

pytestmark = pytest.mark.moto

REGION = "us-east-1"
ROUND = 5.0  # seconds of the code's clock between two syncs of each unfinished request
FAULT_ROUNDS = 8  # the faults' stretch: 40 s, within a stop attempt's 60 s timeout
POWER_CALLS = ("StopInstances", "StartInstances")

# What a request has recorded and must keep while AWS refuses everything.
KEPT = (("startTime",), ("providerStatus", "instanceID"), ("providerStatus", "region"),
        ("providerStatus", "nodeUID"), ("providerStatus", "stopAttempts"), ("providerStatus", "lastStopTime"),
        ("providerStatus", "poweredOffTime"), ("recovery", "startTime"), ("recovery", "outOfServiceTaint"),
        ("recovery", "podsDeleted"), ("recovery", "volumeAttachmentsDeleted"))

# name -> (spec, what is on its node)
REQUESTS = {
    "pending-a": ({}, ["db-a"]),
    "pending-b": ({"recoveryStrategy": fencing_names.RESOURCE_DELETION}, ["db-b", "va-b"]),
    "confirming-c": ({"recoveryStrategy": fencing_names.RESOURCE_DELETION}, ["db-c", "va-c"]),
    "confirming-d": ({"action": "Reboot"}, ["db-d"]),
    "recovering-e": ({}, ["db-e"]),
    "recovering-f": ({"action": "Reboot"}, ["va-f"]),
}


class Storm:
    """The six requests, their Nodes, pods, VolumeAttachments and instances, and the hook process."""

    def __init__(self, aws, make_ctx):
        self.ec2, self.kube, self.clock = aws("ec2"), FakeKube(), ManualClock(0.0)
        # Calls are made one after another here: a batch window would only wait for nobody.
        self.ctx = make_ctx({"NODEWARDEN_INSTANCE_READ_WINDOW_SECONDS": "0"}, kube=self.kube)
        # The process's share of AWS's buckets refills on the code's clock.
        self.ctx._aws = AwsClients(self.ctx.settings,
                                   limiter=rate_limits.Limiter(1.0, clock=self.clock, sleep=self.clock.sleep))
        self.hook_client = self.ctx.aws.client("ec2", REGION)
        self.asked = Calls().attach(self.ctx.aws, services=("ec2",), event="before-call")
        app = create_app(self.ctx).test_client()
        self.answer_codes: list[int] = []

        def answer(hook: str, body: dict) -> dict:
            response = app.post(f"/fencing-request/{hook}", json=body)
            self.answer_codes.append(response.status_code)
            return response.get_json()

        self.requests: dict[str, RequestHarness] = {}
        self.instances: dict[str, str] = {}
        for name, (spec, held) in REQUESTS.items():
            node = f"node-{name}"
            self.instances[name] = launch(self.ec2)
            self.kube.add_node(unready_node(self.instances[name], name=node, uid=f"uid-{node}"))
            for thing in held:
                if thing.startswith("va-"):
                    self.kube.volume_attachments[thing] = {"metadata": {"name": thing}, "spec": {"nodeName": node},
                                                           "status": {"attached": True}}
                else:
                    self.kube.add_pod({"metadata": {"name": thing, "namespace": "default", "uid": f"uid-{thing}"},
                                       "spec": {"nodeName": node}, "status": {"phase": "Running"}})
            self.requests[name] = RequestHarness(make_ctx, self.kube, spec, name=name, node=node, uid=f"uid-{name}",
                                                 ctx=self.ctx, clock=self.clock, answer=answer)

    def sync(self, *names: str) -> None:
        for name in names:
            self.requests[name].call()

    def round(self) -> None:
        self.clock.advance(ROUND)
        self.sync(*(n for n, r in self.requests.items()
                    if r.status.get("phase") not in fencing_names.FINISHED_PHASES))

    def deletions(self) -> int:
        return sum(1 for call in self.kube.calls if call[0] in ("delete", "delete_with_options"))

    def outcome(self) -> dict:
        """Where each request ended and what it left, without the times it got there."""
        ended = {}
        for name, request in self.requests.items():
            status = request.status
            provider, recovery = status.get("providerStatus") or {}, status.get("recovery") or {}
            ended[name] = {
                "phase": status.get("phase"), "errorReason": status.get("errorReason"),
                "conditions": {c["type"]: c["status"] for c in status.get("conditions") or []},
                "provider": {k: provider.get(k) for k in ("stopAttempts", "startAttempts", "instanceState")},
                "recovery": {k: recovery.get(k) for k in ("outOfServiceTaint", "podsDeleted",
                                                          "volumeAttachmentsDeleted", "remainingPods")},
                "instance": instance_state(self.ec2, self.instances[name]),
                "taints": sorted(t["key"] for t in self.kube.taints(request.fr["spec"]["nodeRef"]["name"])),
            }
        ended["left"] = {"pods": sorted(self.kube.pods), "volumeAttachments": sorted(self.kube.volume_attachments)}
        ended["asked"] = {op: self.asked.by_operation[op] for op in POWER_CALLS}
        return ended


def _path(status: dict, path: tuple):
    for key in path:
        status = status.get(key) if isinstance(status, dict) else None
    return status


def _kept(status: dict) -> dict:
    return {path: _path(status, path) for path in KEPT if _path(status, path) is not None}


def _true_conditions(status: dict) -> set[str]:
    return {c["type"] for c in status.get("conditions") or [] if c["status"] == "True"}


def _storm(aws, make_ctx, fault=None, lift=None) -> Storm:
    """The storm, the same calls in the same order with or without a fault: ``fault(storm)`` starts it
    once two requests are in recovery and two have their stops requested, ``lift(storm)`` ends it."""
    storm = Storm(aws, make_ctx)
    storm.sync("recovering-e", "recovering-f")  # their stops
    storm.clock.advance(2)
    storm.sync("recovering-e", "recovering-f")  # confirmed; the taint on
    storm.sync("confirming-c", "confirming-d")  # their stops
    r = storm.requests
    assert [r[n].status.get("phase") for n in REQUESTS] == [
        None, None, fencing_names.POWERING_OFF, fencing_names.POWERING_OFF, fencing_names.RECOVERING,
        fencing_names.RECOVERING]
    assert all(r[n].status["recovery"]["outOfServiceTaint"] == fencing_names.TAINT_APPLIED
               for n in ("recovering-e", "recovering-f"))
    assert "default/db-e" in storm.kube.pods, "the pod the taint removes is still there"

    before = {n: copy.deepcopy(h.status) for n, h in r.items()}
    deletions, asked = storm.deletions(), dict(storm.asked.by_operation)
    if fault:
        fault(storm)
    for number in range(FAULT_ROUNDS):
        if number == FAULT_ROUNDS // 2:
            del storm.kube.volume_attachments["va-f"]  # the attach/detach controller did its part
        storm.round()
        if not fault:
            continue
        assert storm.deletions() == deletions, "no pod or VolumeAttachment deleted without a fresh power-off"
        assert {op: storm.asked.by_operation[op] - asked.get(op, 0) for op in POWER_CALLS} == \
            dict.fromkeys(POWER_CALLS, 0), "no power call without a fresh read of the instance's tags"
        for name, request in r.items():
            assert request.status.get("phase") != fencing_names.FAILED, (name, request.status)
            assert _kept(before[name]).items() <= _kept(request.status).items(), (name, request.status)
            assert _true_conditions(before[name]) <= _true_conditions(request.status), name
            if fencing_names.FENCING_SUCCEEDED not in _true_conditions(before[name]):
                assert fencing_names.FENCING_SUCCEEDED not in _true_conditions(request.status), \
                    f"{name}: a power-off confirmed without DescribeInstances"
        assert "default/db-e" in storm.kube.pods
    if fault:
        for name, request in r.items():
            assert request.status["providerStatus"].get("lastDescribeError"), (name, request.status)
        assert r["recovering-f"].status["phase"] == fencing_names.POWERING_ON, "recovered: that rests on the API"
        lift(storm)
    for _ in range(30):
        if all(h.status.get("phase") in fencing_names.FINISHED_PHASES for h in r.values()):
            break
        storm.round()
    assert set(storm.answer_codes) == {200}, storm.answer_codes
    return storm


def _refused(kind: str, **limits):
    def start(storm: Storm, throttling) -> None:
        throttling.add_fault("ec2", kind, **limits)

    def end(storm: Storm, throttling) -> None:
        assert all(f["matched"] for f in throttling.state()["faults"])
        throttling.clear_faults()
    return start, end


def _timed_out():
    late = Late("*", latency=60)  # past the hooks' 5 s read timeout: every attempt gives up

    def start(storm: Storm, throttling) -> None:
        late.attach_client(storm.hook_client)

    def end(storm: Storm, throttling) -> None:
        late.detach_client(storm.hook_client)
        assert late.timed_out > 0
    return start, end


@pytest.mark.parametrize("faults", [_refused("throttle"), _refused("error", status=500), _timed_out()],
                         ids=["throttled", "internal-error", "timed-out"])
def test_a_fencing_storm_through_an_aws_that_refuses_everything(aws, make_ctx, throttling_aws, retries_at_once,
                                                               faults):
    throttling_aws.disable()  # only the faults refuse: the buckets would also slow the test's own calls
    undisturbed = _storm(aws, make_ctx).outcome()
    assert {name: undisturbed[name]["phase"] for name in REQUESTS} == \
        dict.fromkeys(REQUESTS, fencing_names.SUCCEEDED), undisturbed
    assert undisturbed["asked"] == {"StopInstances": 6, "StartInstances": 2}
    assert undisturbed["left"] == {"pods": [], "volumeAttachments": []}

    start, end = faults
    disturbed = _storm(aws, make_ctx, fault=lambda storm: start(storm, throttling_aws),
                       lift=lambda storm: end(storm, throttling_aws)).outcome()
    assert disturbed == undisturbed
