"""fencing-request and node-fencing against moto in server mode: real StopInstances,
StartInstances and DescribeInstances, real instance state.

The Kubernetes side is worlds/fake_kube.FakeKube (no API server here;
tests/e2e/test_fencing.py runs the same flow on the real one). The clock is
the test's, so retries and timeouts are walked through without sleeping.
"""
from __future__ import annotations

import copy
import datetime as dt
import json

import pytest
from botocore.exceptions import ClientError

from hooks import fencing_names
from hooks.dispatch import serve
from worlds.envelope import hook_request
from worlds.fake_kube import FakeKube
from worlds.fencing import CLUSTER_TAG, NS, T0, RequestHarness, fmt, instance_state, launch, unready_node

pytestmark = pytest.mark.moto

OOS = {"key": fencing_names.OUT_OF_SERVICE_TAINT, "value": fencing_names.OUT_OF_SERVICE_VALUE, "effect": "NoExecute"}


def _set_ready(kube: FakeKube, node: str, status: str, at: dt.datetime) -> None:
    """What the kubelet does on its return: the Ready condition changes, the others stay."""
    others = [c for c in kube.nodes[node]["status"]["conditions"] if c["type"] != "Ready"]
    kube.nodes[node]["status"]["conditions"] = [{"type": "Ready", "status": status, "reason": "x",
                                                 "lastHeartbeatTime": fmt(at), "lastTransitionTime": fmt(at)}] + others


def _one_request(aws, make_ctx, kube, spec: dict | None = None):
    """A NotReady node-a on a running moto instance, and a harness for one request fencing it."""
    ec2 = aws("ec2")
    instance = launch(ec2)
    kube.add_node(unready_node(instance))
    return ec2, instance, RequestHarness(make_ctx, kube, spec or {})


@pytest.fixture
def kube():
    return FakeKube()


def test_stop_confirm_recover_and_release(aws, make_ctx, kube):
    ec2 = aws("ec2")
    instance = launch(ec2)
    kube.add_node(unready_node(instance))
    kube.add_pod({"metadata": {"name": "db-0", "namespace": "default", "uid": "u-db"},
                  "spec": {"nodeName": "node-a"}, "status": {"phase": "Running"}})
    kube.volume_attachments["csi-1"] = {"metadata": {"name": "csi-1"}, "spec": {"nodeName": "node-a"},
                                        "status": {"attached": True}}
    h = RequestHarness(make_ctx, kube, {})

    first = h.call()
    assert h.status["phase"] == fencing_names.POWERING_OFF and h.status["providerStatus"]["stopAttempts"] == 1
    assert first["resyncAfterSeconds"] == 2
    assert h.condition(fencing_names.FENCING_SUCCEEDED) is None, "a stop request is not a confirmed power-off"
    assert instance_state(ec2, instance) == "stopped"  # moto stops at once; real EC2 takes seconds

    h.call(after=2)  # DescribeInstances confirms
    assert h.condition(fencing_names.FENCING_SUCCEEDED)["status"] == "True"
    assert h.status["phase"] == fencing_names.RECOVERING
    assert OOS in kube.taints("node-a")

    h.call(after=5)  # the pod goes at once (no waiting for pod GC); the volume is kube-controller-manager's
    assert h.status["phase"] == fencing_names.RECOVERING
    assert h.status["recovery"]["remainingPods"] == 1 and h.status["recovery"]["remainingVolumeAttachments"] == 1
    assert "default/db-0" not in kube.pods and h.status["recovery"]["podsDeleted"] == 1
    delete = next(c for c in kube.calls if c[0] == "delete_with_options")
    assert delete[4] == {"gracePeriodSeconds": 0, "preconditions": {"uid": "u-db"}}

    kube.volume_attachments.clear()  # the attach/detach controller did its part
    h.call(after=5)
    assert h.status["phase"] == fencing_names.SUCCEEDED and h.condition(fencing_names.COMPLETE_CONDITION)["status"] == "True"
    assert OOS in kube.taints("node-a"), "the node is still down: the taint stays"

    _set_ready(kube, "node-a", "True", h.now)  # an admin started it again
    h.call(after=30)
    assert OOS not in kube.taints("node-a")
    assert h.status["recovery"]["outOfServiceTaint"] == fencing_names.TAINT_REMOVED
    assert {"FencingStarted", "StopRequested", "PoweredOff", "OutOfServiceTaintApplied", "FencingComplete",
            "OutOfServiceTaintRemoved"} <= set(kube.reasons())
    # Nothing left to do: no resync, and the same status again (no hot loop).
    again = h.call(after=30)
    assert "resyncAfterSeconds" not in again and again["status"] == h.responses[-2]["status"]


def test_reboot_with_resource_deletion_starts_the_instance_again(aws, make_ctx, kube):
    ec2 = aws("ec2")
    instance = launch(ec2)
    kube.add_node(unready_node(instance))
    kube.add_pod({"metadata": {"name": "web-1", "namespace": "default", "uid": "u-web"},
                  "spec": {"nodeName": "node-a"}, "status": {"phase": "Running"}})
    kube.add_pod({"metadata": {"name": "other", "namespace": "default", "uid": "u-o"},
                  "spec": {"nodeName": "node-b"}, "status": {"phase": "Running"}})
    kube.volume_attachments["csi-1"] = {"metadata": {"name": "csi-1"}, "spec": {"nodeName": "node-a"}}
    h = RequestHarness(make_ctx, kube, {"action": "Reboot", "recoveryStrategy": "ResourceDeletion"})

    h.run_until(lambda: h.status.get("phase") == fencing_names.SUCCEEDED)
    assert instance_state(ec2, instance) == "running"
    assert list(kube.pods) == ["default/other"], "only the fenced node's pods were force-deleted"
    assert kube.volume_attachments == {}
    deletes = [c for c in kube.calls if c[0] == "delete_with_options"]
    assert deletes[0][4] == {"gracePeriodSeconds": 0, "preconditions": {"uid": "u-web"}}
    ps = h.status["providerStatus"]
    assert ps["stopAttempts"] == 1 and ps["startAttempts"] == 1 and ps["poweredOnTime"] >= ps["poweredOffTime"]
    assert h.condition(fencing_names.RECOVERED)["status"] == "True"
    assert not any(t["key"] == fencing_names.OUT_OF_SERVICE_TAINT for t in kube.taints("node-a"))


def test_a_stop_that_never_completes_fails_after_the_last_retry(aws, make_ctx, kube):
    """moto stops at once; a botocore event hook makes DescribeInstances say 'stopping' forever."""
    ec2 = aws("ec2")
    instance = launch(ec2)
    kube.add_node(unready_node(instance))
    h = RequestHarness(make_ctx, kube, {"retries": 3, "timeout": "20s", "retryInterval": "1s"})
    client = h.ctx.aws.client("ec2", "us-east-1")

    def stuck(parsed=None, **_):
        for reservation in parsed.get("Reservations") or []:
            for inst in reservation.get("Instances") or []:
                inst["State"] = {"Code": 64, "Name": "stopping"}

    client.meta.events.register("after-call.ec2.DescribeInstances", stuck)
    try:
        h.run_until(lambda: h.status.get("phase") == fencing_names.FAILED, limit=60)
    finally:
        client.meta.events.unregister("after-call.ec2.DescribeInstances", stuck)
    assert h.status["errorReason"] == "PowerOffTimeout"
    assert "still stopping 20s after attempt 3 of 3" in h.status["errorMessage"]
    assert h.status["providerStatus"]["stopAttempts"] == 3
    assert h.condition(fencing_names.FAILED_CONDITION)["status"] == "True"
    assert h.condition(fencing_names.FENCING_SUCCEEDED) is None
    assert kube.taints("node-a") == [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}], \
        "nothing is recovered when fencing failed"
    assert (T0 + dt.timedelta(seconds=60)) <= h.now < (T0 + dt.timedelta(seconds=70))
    assert "FencingFailed" in kube.reasons()


def test_an_aws_error_ends_in_error_reason(aws, make_ctx, kube):
    """StopInstances refused every time (as IAM refuses it where the policy's tag condition does not hold;
    moto enforces no IAM, so a botocore hook answers it): after the last retry, errorReason."""
    ec2 = aws("ec2")
    kube.add_node(unready_node(launch(ec2)))
    h = RequestHarness(make_ctx, kube, {"retries": 2, "retryInterval": "3s"})
    client = h.ctx.aws.client("ec2", "us-east-1")

    def refuse(**_):
        raise ClientError({"Error": {"Code": "UnauthorizedOperation", "Message": "not allowed"}}, "StopInstances")

    client.meta.events.register("before-call.ec2.StopInstances", refuse)
    try:
        h.run_until(lambda: h.status.get("phase") == fencing_names.FAILED)
    finally:
        client.meta.events.unregister("before-call.ec2.StopInstances", refuse)
    assert h.status["errorReason"] == "PowerOffFailed"
    assert "UnauthorizedOperation" in h.status["errorMessage"]
    assert h.status["providerStatus"]["stopAttempts"] == 2
    assert h.condition(fencing_names.FENCING_SUCCEEDED) is None
    assert kube.reasons().count("FencingActionFailed") == 2
    assert not any(t["key"] == fencing_names.OUT_OF_SERVICE_TAINT for t in kube.taints("node-a"))


def test_an_instance_aws_does_not_know_is_never_stopped(aws, make_ctx, kube):
    """Not found is not this cluster's: Failed InstanceNotFound at once, and no StopInstances at all."""
    kube.add_node(unready_node("i-0000000000000dead"))
    h = RequestHarness(make_ctx, kube, {"retries": 2, "retryInterval": "3s"})
    client = h.ctx.aws.client("ec2", "us-east-1")
    stops = []
    client.meta.events.register("before-call.ec2.StopInstances", lambda **_: stops.append(1))
    h.call()
    assert h.status["phase"] == fencing_names.FAILED and h.status["errorReason"] == "InstanceNotFound"
    assert stops == [] and "stopAttempts" not in h.status["providerStatus"]


def test_a_throttled_stop_is_retried_after_the_interval(aws, make_ctx, kube):
    """moto never throttles: an injected RequestLimitExceeded on the first StopInstances only."""
    ec2 = aws("ec2")
    instance = launch(ec2)
    kube.add_node(unready_node(instance))
    h = RequestHarness(make_ctx, kube, {"retryInterval": "4s"})
    client = h.ctx.aws.client("ec2", "us-east-1")
    calls = []

    def throttle_once(**_):
        calls.append(1)
        if len(calls) == 1:
            raise ClientError({"Error": {"Code": "RequestLimitExceeded", "Message": "slow down"}}, "StopInstances")

    client.meta.events.register("before-call.ec2.StopInstances", throttle_once)
    try:
        first = h.call()
        assert "RequestLimitExceeded" in h.status["providerStatus"]["lastStopError"]
        assert first["resyncAfterSeconds"] == 4
        h.call(after=1)  # inside the interval: no new attempt
        assert len(calls) == 1
        h.run_until(lambda: h.status.get("phase") == fencing_names.RECOVERING)
    finally:
        client.meta.events.unregister("before-call.ec2.StopInstances", throttle_once)
    assert h.status["providerStatus"]["stopAttempts"] == 2
    assert "lastStopError" not in h.status["providerStatus"]


def test_deleting_a_request_half_way_leaves_no_taint(aws, make_ctx, kube):
    ec2 = aws("ec2")
    instance = launch(ec2)
    kube.add_node(unready_node(instance))
    kube.add_pod({"metadata": {"name": "db-0", "namespace": "default", "uid": "u-db"},
                  "spec": {"nodeName": "node-a"}, "status": {"phase": "Running"}})
    h = RequestHarness(make_ctx, kube, {})
    h.call()
    h.call(after=2)
    assert OOS in kube.taints("node-a") and h.status["phase"] == fencing_names.RECOVERING

    h.fr["metadata"]["deletionTimestamp"] = fmt(h.now)
    done = h.call("finalize", after=1)
    assert done["finalized"] is True
    assert OOS not in kube.taints("node-a")
    assert "OutOfServiceTaintRemoved" in kube.reasons()


def test_finalize_keeps_trying_while_the_api_is_down(aws, make_ctx, kube):
    _, _, h = _one_request(aws, make_ctx, kube)
    h.call()
    h.call(after=2)  # powered off, tainted out of service
    h.fr["metadata"]["deletionTimestamp"] = fmt(h.now)
    kube.unavailable = True
    held = h.call("finalize", after=1)
    assert held["finalized"] is False and held["resyncAfterSeconds"] >= 1
    assert h.status["recovery"]["outOfServiceTaint"] == fencing_names.TAINT_APPLIED
    kube.unavailable = False
    assert h.call("finalize", after=5)["finalized"] is True
    assert OOS not in kube.taints("node-a")


# ------------------------------------------- fencing-request: proof before every irreversible step


def _pod(name: str, uid: str) -> dict:
    return {"metadata": {"name": name, "namespace": "default", "uid": uid}, "spec": {"nodeName": "node-a"},
            "status": {"phase": "Running"}}


def test_a_forged_request_stops_nothing(aws, make_ctx, kube):
    """A body naming a FencingRequest the API server does not have, and a Node naming a running instance."""
    ec2 = aws("ec2")
    instance = launch(ec2)
    ctx = make_ctx({}, kube=kube)  # the API server has neither the request nor the node
    hooks = {h: {"version": "v2"} for h in ("sync", "finalize", "customize")}
    body = {"controller": {"spec": {"hooks": hooks}}, "children": {}, "finalizing": False,
            "parent": {"apiVersion": fencing_names.API_VERSION, "kind": fencing_names.REQUEST_KIND,
                       "metadata": {"name": "made-up", "namespace": NS, "uid": "uid-made-up", "generation": 1},
                       "spec": {"nodeRef": {"name": "victim"}}},
            "related": {"Node.v1": {"victim": unready_node(instance, name="victim")}}}
    for _ in range(3):
        response = serve("fencing-request", "sync", json.loads(json.dumps(body)), ctx)
        assert response["status"].get("phase") in (None, fencing_names.PENDING)
    assert instance_state(ec2, instance) == "running"
    # Even with the node real and NotReady, a request the API server lacks does nothing.
    kube.add_node(unready_node(instance, name="victim"))
    serve("fencing-request", "sync", json.loads(json.dumps(body)), ctx)
    assert instance_state(ec2, instance) == "running"
    assert not any(c[0] in ("json_patch", "delete_with_options", "delete") for c in kube.calls)


def test_a_ready_node_is_never_powered_off(aws, make_ctx, kube):
    ec2 = aws("ec2")
    instance = launch(ec2)
    kube.add_node(unready_node(instance, ready="True"))
    h = RequestHarness(make_ctx, kube, {})
    h.call()
    assert h.status["phase"] == fencing_names.FAILED and h.status["errorReason"] == "NodeReady"
    assert instance_state(ec2, instance) == "running"


def test_the_node_seen_by_the_api_server_decides_not_the_body(aws, make_ctx, kube):
    """The body says NotReady, the API server says Ready: no stop."""
    ec2 = aws("ec2")
    instance = launch(ec2)
    kube.add_node(unready_node(instance, ready="True"))
    h = RequestHarness(make_ctx, kube, {})
    lying = unready_node(instance)  # NotReady in the body only
    h.kube.put_fencing_request(h.fr)
    body = {"controller": {}, "parent": h.fr, "children": {}, "related": {"Node.v1": {"node-a": lying}},
            "finalizing": False}
    response = serve("fencing-request", "sync", json.loads(json.dumps(body)), h.ctx)
    assert response["status"]["errorReason"] == "NodeReady"
    assert instance_state(ec2, instance) == "running"


def test_no_reachable_api_server_means_no_power_off(aws, make_ctx, kube):
    ec2, instance, h = _one_request(aws, make_ctx, kube)
    kube.unavailable = True
    response = h.call()
    assert response["resyncAfterSeconds"] >= 1 and instance_state(ec2, instance) == "running"
    assert "stopAttempts" not in (h.status.get("providerStatus") or {}), "an unverified call spends no attempt"
    kube.unavailable = False
    h.call(after=5)
    assert h.status["providerStatus"]["stopAttempts"] == 1 and instance_state(ec2, instance) == "stopped"


def test_two_requests_for_one_node_fence_one_at_a_time_and_never_split_brain(aws, make_ctx, kube):
    """A Reboot and, behind it, an Off + ResourceDeletion for the same node: db-0 is never force-deleted
    while the instance runs again and the node is Ready."""
    ec2 = aws("ec2")
    instance = launch(ec2)
    kube.add_node(unready_node(instance))
    kube.add_pod(_pod("db-0", "uid-db-0"))
    kube.volume_attachments["csi-db"] = {"metadata": {"name": "csi-db"}, "spec": {"nodeName": "node-a"},
                                         "status": {"attached": True}}
    reboot = RequestHarness(make_ctx, kube, {"action": "Reboot"})
    reboot.fr["metadata"]["creationTimestamp"] = fmt(T0)
    off = RequestHarness(make_ctx, kube, {"action": "Off", "recoveryStrategy": "ResourceDeletion"})
    off.fr["metadata"].update(name="fence-node-a-by-hand", uid="uid-fr-2", creationTimestamp=fmt(T0 + dt.timedelta(seconds=1)))
    kube.put_fencing_request(reboot.fr)

    off.call()
    assert off.status["phase"] == fencing_names.PENDING and off.condition(fencing_names.QUEUED_CONDITION)["status"] == "True"
    assert "fence-node-a" in off.condition(fencing_names.QUEUED_CONDITION)["message"]

    reboot.call()  # stops the instance
    reboot.call(after=2)  # confirmed; out-of-service taint
    assert reboot.status["phase"] == fencing_names.RECOVERING
    kube.pods.clear()  # kube-controller-manager recovered the node's pods and volumes
    kube.volume_attachments.clear()
    kube.add_pod(_pod("db-0", "uid-db-0-new"))  # ... and the StatefulSet's new db-0 is on this node again
    kube.pods["default/db-0"]["spec"]["nodeName"] = "node-b"
    off.now = reboot.now
    off.call(after=1)
    assert off.status["phase"] == fencing_names.PENDING, "still queued behind the reboot"
    reboot.run_until(lambda: reboot.status.get("phase") == fencing_names.SUCCEEDED)
    assert instance_state(ec2, instance) == "running"
    _set_ready(kube, "node-a", "True", reboot.now)
    kube.add_pod(_pod("db-1", "uid-db-1"))  # a pod that runs on the rebooted node now

    off.now = reboot.now
    off.call(after=1)
    assert off.status["phase"] == fencing_names.FAILED and off.status["errorReason"] == "NodeReady"
    assert instance_state(ec2, instance) == "running"
    assert "default/db-1" in kube.pods, "nothing is force-deleted on a node that is back"
    assert not any(c[0] == "delete_with_options" for c in kube.calls)


def test_resource_deletion_stops_when_the_instance_runs_again(aws, make_ctx, kube):
    ec2 = aws("ec2")
    instance = launch(ec2)
    kube.add_node(unready_node(instance))
    h = RequestHarness(make_ctx, kube, {"recoveryStrategy": "ResourceDeletion"})
    h.call()
    ec2.start_instances(InstanceIds=[instance])  # someone powers it on between two calls
    kube.add_pod(_pod("db-0", "uid-db-0"))
    kube.volume_attachments["csi-db"] = {"metadata": {"name": "csi-db"}, "spec": {"nodeName": "node-a"},
                                         "status": {"attached": True}}
    ec2.stop_instances(InstanceIds=[instance])
    h.call(after=2)  # power-off confirmed: the first deletes happen
    assert h.status["phase"] == fencing_names.RECOVERING
    kube.add_pod(_pod("db-0", "uid-db-0b"))  # something puts a pod back
    ec2.start_instances(InstanceIds=[instance])  # and the instance runs again
    h.call(after=5)
    assert h.status["phase"] == fencing_names.FAILED and h.status["errorReason"] == "PowerRestored"
    assert "default/db-0" in kube.pods, "the pod of a running node is never force-deleted"


def test_out_of_service_recovery_deletes_no_pod_of_an_instance_running_again(aws, make_ctx, kube):
    """The taint is on; before the pods are force-deleted the instance runs again: they stay."""
    ec2, instance, h = _one_request(aws, make_ctx, kube)
    h.run_until(lambda: h.status.get("recovery", {}).get("outOfServiceTaint") == fencing_names.TAINT_APPLIED)
    kube.add_pod(_pod("db-0", "uid-db-0"))
    ec2.start_instances(InstanceIds=[instance])
    h.call(after=5)
    assert h.status["phase"] == fencing_names.FAILED and h.status["errorReason"] == "PowerRestored"
    assert "default/db-0" in kube.pods, "the pod of a running node is never force-deleted"
    assert not any(c[0] == "delete_with_options" for c in kube.calls)


def test_resource_deletion_times_out_when_pods_keep_coming_back(aws, make_ctx, kube):
    """A DaemonSet that tolerates every taint puts its pod back after every force delete."""
    ec2 = aws("ec2")
    kube.add_node(unready_node(launch(ec2)))
    h = RequestHarness(make_ctx, kube, {"recoveryStrategy": "ResourceDeletion"},
                       env={"NODEWARDEN_FENCING_RECOVERY_TIMEOUT_SECONDS": "60"})
    h.call()
    for i in range(40):
        kube.add_pod(_pod("kube-proxy-x", f"uid-proxy-{i}"))
        h.call(after=h.responses[-1].get("resyncAfterSeconds", 5))
        if h.status.get("phase") == fencing_names.SUCCEEDED:
            break
    assert h.status["phase"] == fencing_names.SUCCEEDED and h.status["recovery"]["timedOut"] is True
    assert "RecoveryTimedOut" in kube.reasons()


def test_a_node_missing_from_one_request_is_not_taken_for_gone(aws, make_ctx, kube):
    ec2, instance, h = _one_request(aws, make_ctx, kube)
    h.run_until(lambda: h.status.get("phase") == fencing_names.SUCCEEDED)
    assert OOS in kube.taints("node-a")
    node = kube.nodes["node-a"]
    kube.unavailable = True  # Metacontroller's request lacks the node and the API server cannot be asked
    body = {"controller": {}, "parent": h.fr, "children": {}, "related": {}, "finalizing": False}
    response = serve("fencing-request", "sync", json.loads(json.dumps(body)), h.ctx)
    assert response["status"]["recovery"]["outOfServiceTaint"] == fencing_names.TAINT_APPLIED
    kube.unavailable = False
    h.fr["status"] = response["status"]
    assert node is kube.nodes["node-a"]
    # A new request whose related Node is missing once still fences the node the API server has.
    fresh_request = RequestHarness(make_ctx, kube, {})
    fresh_request.fr["metadata"].update(name="again", uid="uid-again")
    kube.fencing_requests.clear()
    kube.put_fencing_request(fresh_request.fr)
    body = {"controller": {}, "parent": fresh_request.fr, "children": {}, "related": {}, "finalizing": False}
    response = serve("fencing-request", "sync", json.loads(json.dumps(body)), fresh_request.ctx)
    assert response["status"].get("errorReason") != "NodeNotFound"


def test_finalize_without_the_node_in_the_request_does_not_leave_the_taint(aws, make_ctx, kube):
    """Metacontroller's finalize request lacks the Node and the API server cannot be asked: not finalized yet."""
    _, _, h = _one_request(aws, make_ctx, kube)
    h.call()
    h.call(after=2)  # powered off, tainted out of service
    assert OOS in kube.taints("node-a")
    h.fr["metadata"]["deletionTimestamp"] = fmt(h.now)
    kube.put_fencing_request(h.fr)
    body = {"controller": {}, "parent": h.fr, "children": {}, "related": {}, "finalizing": True}
    kube.unavailable = True
    held = serve("fencing-request", "finalize", json.loads(json.dumps(body)), h.ctx)
    assert held["finalized"] is False and held["resyncAfterSeconds"] >= 1
    kube.unavailable = False
    done = serve("fencing-request", "finalize", json.loads(json.dumps(body)), h.ctx)
    assert done["finalized"] is True and OOS not in kube.taints("node-a")


_OTHER_REQUESTS = {
    # Recorded as holding the taint, in another namespace: finalize looks in every namespace.
    "holder-in-another-namespace": ({"metadata": {"name": "team-fence", "namespace": "team-a", "uid": "uid-team"},
                                     "spec": {"nodeRef": {"name": "node-a"}},
                                     "status": {"phase": fencing_names.RECOVERING,
                                                "recovery": {"outOfServiceTaint": fencing_names.TAINT_APPLIED}}}, True),
    # Fenced with the taint strategy, its status saying so never written: it still holds.
    "fenced-holder-not-recorded-yet": ({"metadata": {"name": "team-fence", "namespace": "team-a", "uid": "uid-team"},
                                        "spec": {"nodeRef": {"name": "node-a"}},
                                        "status": {"phase": fencing_names.RECOVERING, "conditions": [
                                            {"type": fencing_names.FENCING_SUCCEEDED, "status": "True"}]}}, True),
    # One odd request in the listing is skipped, not taken for a failed listing (which would hold forever).
    "malformed-elsewhere": ({"metadata": {"name": "odd", "namespace": "team-b", "uid": "uid-odd"},
                             "spec": ["not", "an", "object"], "status": "nor this"}, False),
}


@pytest.mark.parametrize("case", sorted(_OTHER_REQUESTS))
def test_finalize_keeps_the_taint_exactly_while_another_request_holds_it(aws, make_ctx, kube, case):
    other, kept = _OTHER_REQUESTS[case]
    _, _, h = _one_request(aws, make_ctx, kube)
    h.call()
    h.call(after=2)  # powered off, tainted out of service
    assert OOS in kube.taints("node-a")
    kube.fencing_requests.append({"apiVersion": fencing_names.API_VERSION, "kind": fencing_names.REQUEST_KIND, **copy.deepcopy(other)})
    assert h.call("finalize", after=1)["finalized"] is True
    assert (OOS in kube.taints("node-a")) is kept


def test_aftercare_leaves_the_taint_to_another_unfinished_holder(aws, make_ctx, kube):
    ec2 = aws("ec2")
    kube.add_node(unready_node(launch(ec2)))
    h = RequestHarness(make_ctx, kube, {})
    h.run_until(lambda: h.status.get("phase") == fencing_names.SUCCEEDED)
    holder = {"apiVersion": fencing_names.API_VERSION, "kind": fencing_names.REQUEST_KIND,
              "metadata": {"name": "fence-by-hand", "namespace": NS, "uid": "uid-team"},
              "spec": {"nodeRef": {"name": "node-a"}},
              "status": {"phase": fencing_names.RECOVERING, "recovery": {"outOfServiceTaint": fencing_names.TAINT_APPLIED}}}
    kube.put_fencing_request(holder)
    _set_ready(kube, "node-a", "True", h.now)
    h.call(after=30)
    assert OOS in kube.taints("node-a"), f"{NS}/fence-by-hand still counts on it"
    assert h.status["recovery"]["outOfServiceTaint"] == fencing_names.TAINT_REMOVED, "this request has let go"
    assert "OutOfServiceTaintKept" in kube.reasons()
    # Both finished: neither waits for the other, the taint comes off.
    holder["status"] = {"phase": fencing_names.SUCCEEDED, "recovery": {"outOfServiceTaint": fencing_names.TAINT_APPLIED,
                                                               "completionTime": fmt(h.now)}}
    other = RequestHarness(make_ctx, kube, {})
    other.fr = holder
    other.now = h.now
    other.call(after=30)
    assert OOS not in kube.taints("node-a")


def test_letting_go_of_the_taint_rests_on_the_fresh_node_not_a_stale_body(aws, make_ctx, kube):
    ec2, instance, h = _one_request(aws, make_ctx, kube)
    h.run_until(lambda: h.status.get("phase") == fencing_names.SUCCEEDED)
    kube.put_fencing_request({"apiVersion": fencing_names.API_VERSION, "kind": fencing_names.REQUEST_KIND,
                              "metadata": {"name": "team-fence", "namespace": "team-a", "uid": "uid-team"},
                              "spec": {"nodeRef": {"name": "node-a"}},
                              "status": {"phase": fencing_names.RECOVERING,
                                         "recovery": {"outOfServiceTaint": fencing_names.TAINT_APPLIED}}})
    stale = copy.deepcopy(kube.nodes["node-a"])  # Ready in the body only; the API server has it down
    stale["status"]["conditions"][0].update(status="True", lastTransitionTime=fmt(h.now))
    body = {"controller": {}, "parent": h.fr, "children": {}, "finalizing": False,
            "related": {"Node.v1": {"node-a": stale}}}
    h.now += dt.timedelta(seconds=30)
    response = serve("fencing-request", "sync", json.loads(json.dumps(body)), h.ctx)
    assert response["status"]["recovery"]["outOfServiceTaint"] == fencing_names.TAINT_APPLIED
    assert OOS in kube.taints("node-a")


def test_a_node_replaced_after_the_checks_is_not_tainted(aws, make_ctx, kube):
    """The Node is deleted and re-created under its name between the fresh read and the taint's patch."""
    ec2, instance, h = _one_request(aws, make_ctx, kube)
    h.call()  # stop requested
    original_get = kube.get

    def replace_after_the_check(res, name, namespace=None):
        found = original_get(res, name, namespace=namespace)
        if res.__name__ == "Node" and kube.nodes[name]["metadata"]["uid"] == "uid-node-a":
            kube.nodes[name]["metadata"]["uid"] = "uid-newcomer"  # what the next read will see
        return found

    kube.get = replace_after_the_check
    h.call(after=2)
    assert OOS not in kube.taints("node-a"), "the newcomer is not the node that was fenced"
    assert h.status["recovery"].get("outOfServiceTaint") != fencing_names.TAINT_APPLIED
    kube.get = original_get
    h.call(after=5)
    assert h.status["phase"] == fencing_names.FAILED and h.status["errorReason"] == "NodeReplaced"
    assert OOS not in kube.taints("node-a")


def test_an_unverified_call_says_why_and_backs_off(aws, make_ctx, kube):
    ec2, instance, h = _one_request(aws, make_ctx, kube)
    h.call()  # stop requested
    kube.unavailable = True  # the power-off is confirmed next, but the taint waits for the API server's word
    waits = [h.call(after=2)["resyncAfterSeconds"] for _ in range(3)]
    assert waits[0] < waits[1] < waits[2], "backoff grows while the API server cannot be asked"
    verified = h.condition(fencing_names.VERIFIED_CONDITION)
    assert verified["status"] == "False" and "unreachable" in verified["message"]
    assert h.status["unverifiedCalls"] == 3 and h.status["phase"] == fencing_names.POWERING_OFF
    assert OOS not in kube.taints("node-a")
    kube.unavailable = False
    h.call(after=waits[-1])
    assert OOS in kube.taints("node-a") and h.status["phase"] == fencing_names.RECOVERING
    assert h.condition(fencing_names.VERIFIED_CONDITION) is None and "unverifiedCalls" not in h.status


def test_a_sync_for_a_request_being_deleted_starts_nothing(aws, make_ctx, kube):
    """The body predates the delete; the API server's copy has a deletionTimestamp: no stop, finalize takes over."""
    ec2, instance, h = _one_request(aws, make_ctx, kube)
    deleting = copy.deepcopy(h.fr)
    deleting["metadata"]["deletionTimestamp"] = fmt(T0)
    kube.put_fencing_request(deleting)
    body = {"controller": {}, "parent": h.fr, "children": {}, "finalizing": False,
            "related": {"Node.v1": {"node-a": kube.nodes["node-a"]}}}
    response = serve("fencing-request", "sync", json.loads(json.dumps(body)), h.ctx)
    assert instance_state(ec2, instance) == "running"
    assert "being deleted" in next(c for c in response["status"]["conditions"]
                                   if c["type"] == fencing_names.VERIFIED_CONDITION)["message"]


def test_a_stale_ready_node_in_the_body_does_not_fail_the_request(aws, make_ctx, kube):
    """Metacontroller's cached Node still says Ready; the API server says NotReady: fence, do not fail."""
    ec2, instance, h = _one_request(aws, make_ctx, kube)
    kube.put_fencing_request(h.fr)
    body = {"controller": {}, "parent": h.fr, "children": {}, "finalizing": False,
            "related": {"Node.v1": {"node-a": unready_node(instance, ready="True")}}}
    response = serve("fencing-request", "sync", json.loads(json.dumps(body)), h.ctx)
    assert response["status"]["phase"] == fencing_names.POWERING_OFF and instance_state(ec2, instance) == "stopped"


def test_a_queued_request_with_an_unreadable_start_time_still_times_out(aws, make_ctx, kube):
    ec2 = aws("ec2")
    kube.add_node(unready_node(launch(ec2)))
    kube.put_fencing_request({"apiVersion": fencing_names.API_VERSION, "kind": fencing_names.REQUEST_KIND,
                              "metadata": {"name": "older", "namespace": "team-a", "uid": "uid-older",
                                           "creationTimestamp": "2026-01-01T00:00:00Z"},
                              "spec": {"nodeRef": {"name": "node-a"}}, "status": {"phase": fencing_names.RECOVERING}})
    h = RequestHarness(make_ctx, kube, {}, env={"NODEWARDEN_FENCING_QUEUE_TIMEOUT_SECONDS": "60"})
    h.fr["metadata"]["creationTimestamp"] = fmt(T0)
    h.fr["status"] = {"startTime": "not-a-time"}
    h.run_until(lambda: h.status.get("phase") == fencing_names.FAILED, step=30, limit=5)
    assert h.status["errorReason"] == "AnotherFenceActive" and "team-a/older" in h.status["errorMessage"]


def test_the_release_wait_ends_even_when_the_nodes_pods_cannot_be_listed(aws, make_ctx, kube):
    """Back and Ready, but listing its pods fails every time: the taint still comes off after the release timeout."""
    ec2 = aws("ec2")
    kube.add_node(unready_node(launch(ec2)))
    h = RequestHarness(make_ctx, kube, {}, env={"NODEWARDEN_FENCING_RELEASE_TIMEOUT_SECONDS": "60"})
    h.run_until(lambda: h.status.get("phase") == fencing_names.SUCCEEDED)
    original_list = kube.list

    def pods_fail(res, *args, **kw):
        if res.__name__ == "Pod":
            raise __import__("worlds.fake_kube", fromlist=["api_error"]).api_error(503, "etcd is slow")
        return original_list(res, *args, **kw)

    kube.list = pods_fail
    _set_ready(kube, "node-a", "True", h.now + dt.timedelta(seconds=1))
    h.call(after=1)
    assert OOS in kube.taints("node-a"), "not knowing what is left is not 'nothing left'"
    h.run_until(lambda: OOS not in kube.taints("node-a"), step=20, limit=6)
    assert h.status["recovery"]["outOfServiceTaint"] == fencing_names.TAINT_REMOVED


# --------------------------------------------------------------------------- node-fencing


class NodeHarness:
    """Plays Metacontroller for one Node: status and annotations applied, attachments kept."""

    def __init__(self, make_ctx, kube: FakeKube, node: dict, policy: dict):
        self.kube, self.now, self.policy, self.attachments = kube, T0, policy, []
        self.ctx = make_ctx({}, kube=kube)
        self.ctx.clock = lambda: self.now
        kube.add_node(node)

    @property
    def node(self) -> dict:
        return self.kube.nodes["node-a"]

    def call(self, after: float = 0) -> dict:
        from worlds.envelope import apply_decorator_response

        self.now += dt.timedelta(seconds=after)
        # What node-fencing-policy keeps doing: count recently. The API server has the policy
        # and the node's FencingRequest as this request shows them.
        self.policy.setdefault("status", {})["countedAt"] = fmt(self.now)
        self.kube.add_object(self.policy)
        if (fr := self.fencing_request()) is not None:
            self.kube.put_fencing_request({**fr, "metadata": {"uid": "uid-fr", **fr["metadata"]}})
        body = hook_request("node-fencing", self.node, children=self.attachments, related=[self.policy])
        response = serve("node-fencing", "sync", json.loads(json.dumps(body)), self.ctx)
        updated = apply_decorator_response(self.node, response)
        self.kube.nodes["node-a"]["status"] = updated["status"]
        self.kube.nodes["node-a"]["metadata"]["annotations"] = updated["metadata"]["annotations"]
        # What Metacontroller does with attachments: create the new, delete the
        # omitted; a FencingRequest is left as it is (OnDelete), status included,
        # an UnhealthyNode record is updated in place.
        existing = {(a["kind"], a["metadata"]["name"]): a for a in self.attachments}
        self.attachments = [copy.deepcopy(a) if a["kind"] != fencing_names.REQUEST_KIND else
                            existing.get((a["kind"], a["metadata"]["name"]), copy.deepcopy(a))
                            for a in response["attachments"]]
        return response

    def fencing_request(self) -> dict | None:
        return next((a for a in self.attachments if a["kind"] == fencing_names.REQUEST_KIND), None)

    def set_request_status(self, status: dict) -> None:
        self.fencing_request()["status"] = status

    def condition(self, ctype: str) -> dict | None:
        return next((c for c in self.node["status"]["conditions"] if c["type"] == ctype), None)


def _policy(node_names=("node-a",), holds=False) -> dict:
    return {"apiVersion": fencing_names.API_VERSION, "kind": fencing_names.POLICY_KIND,
            "metadata": {"name": "workers", "generation": 1},
            "spec": {"nodeSelector": {"matchLabels": {"pool": "workers"}},
                     "unhealthyConditions": [{"type": "Ready", "status": "Unknown", "duration": "30s"}]},
            "status": {"observedGeneration": 1, "unhealthyNodeNames": list(node_names),
                       "conditions": [{"type": "StormGuard", "status": "True" if holds else "False"}]}}


def test_node_timeline_conditions_then_taints_then_request_then_failover(make_ctx, kube):
    h = NodeHarness(make_ctx, kube, unready_node("i-0123456789abcdef0", since=T0), _policy())
    kube.add_pod({"metadata": {"name": "web-1", "namespace": "default", "uid": "u-web",
                               "labels": {fencing_names.FAILOVER_LABEL: fencing_names.FAILOVER_IMMEDIATE}},
                  "spec": {"nodeName": "node-a", "volumes": []}, "status": {"phase": "Running"}})
    kube.add_pod({"metadata": {"name": "db-0", "namespace": "default", "uid": "u-db",
                               "labels": {fencing_names.FAILOVER_LABEL: fencing_names.FAILOVER_IMMEDIATE}},
                  "spec": {"nodeName": "node-a", "volumes": [{"name": "d", "persistentVolumeClaim": {
                      "claimName": "data-db-0"}}]}, "status": {"phase": "Running"}})
    kube.claims["default/data-db-0"] = {"spec": {"accessModes": ["ReadWriteOnce"]}}

    h.call(after=5)
    assert h.condition(fencing_names.TRIAGED)["status"] == "True"
    assert not any(t["key"] == fencing_names.TRIAGED_TAINT for t in kube.taints("node-a")), "conditions first"
    r = h.call(after=1)
    assert {"key": fencing_names.TRIAGED_TAINT, "effect": "PreferNoSchedule"} in kube.taints("node-a")
    assert r["resyncAfterSeconds"] == pytest.approx(24, abs=1)
    assert not any(c[0] == "list" and c[1] == "Pod" for c in kube.calls), "no pod listing before the duration"

    h.call(after=r["resyncAfterSeconds"])
    assert h.condition(fencing_names.REQUIRED)["status"] == "True"
    assert h.fencing_request()["metadata"]["name"] == "fence-node-a"
    record = next(a for a in h.attachments if a["kind"] == "UnhealthyNode")
    assert {c["type"]: c["status"] for c in record["spec"]["conditions"]}[fencing_names.REQUIRED] == "True", \
        "the record carries the conditions this very call wrote"
    assert list(kube.pods) == ["default/db-0"], "the labelled pod without a single-writer volume failed over"
    h.call(after=1)
    assert {"key": fencing_names.REQUIRED_TAINT, "effect": "NoSchedule"} in kube.taints("node-a")
    assert list(kube.pods) == ["default/db-0"], "the RWO pod waits for FencingComplete"

    h.set_request_status({"phase": "Recovering", "conditions": [{"type": fencing_names.FENCING_SUCCEEDED, "status": "True",
                                                                 "lastTransitionTime": fmt(h.now)}]})
    h.call(after=5)
    assert h.condition(fencing_names.COMPLETE)["status"] == "True"
    assert kube.pods == {}, "fenced: now the RWO pod may go"
    assert kube.reasons().count("FailedOver") == 2

    _set_ready(kube, "node-a", "True", h.now)
    h.set_request_status({"phase": "Succeeded", "recovery": {"outOfServiceTaint": "Removed"}})
    h.call(after=1)
    assert {c["type"] for c in h.node["status"]["conditions"]} == {"Ready"}
    assert h.attachments == []
    h.call(after=1)
    assert not any(t["key"] in fencing_names.OUR_TAINTS for t in kube.taints("node-a"))
    # Healthy and clean: the next call writes nothing at all.
    quiet = h.call(after=300)
    assert quiet["status"] is None and quiet["annotations"] == {} and quiet["labels"] == {}
    assert "FencingCleared" in kube.reasons()


def _admitted(make_ctx, kube, *, since=60, holds=False, node_names=("node-a",)):
    """node-a Unknown for ``since`` seconds under a policy whose fresh count (on the API server) admits it."""
    kube.add_node(unready_node("i-0123456789abcdef0", since=T0 - dt.timedelta(seconds=since)))
    policy = _policy(node_names, holds=holds)
    policy["metadata"]["uid"] = "uid-policy"
    policy["status"]["countedAt"] = fmt(T0 - dt.timedelta(seconds=2))
    kube.add_object(policy)
    ctx = make_ctx({}, kube=kube)
    ctx.clock = lambda: T0
    return ctx, policy


def test_an_admitted_node_gets_its_fencing_request_without_waiting_for_its_own_sync(make_ctx, kube):
    """What the policy controller does for each node its written count admits: node-fencing's own decision,
    on the API server's objects, makes the request, as the Node decorator's attachment; the Node's next
    sync takes it for fencing in flight."""
    from hooks import actuators
    from hooks.contract import DECORATOR_CLAIM

    ctx, policy = _admitted(make_ctx, kube)
    assert actuators.start_fencing(ctx, "node-a", "uid-node-a", "node") == "fence-node-a"
    [fr] = kube.fencing_requests
    assert fr["metadata"]["namespace"] == NS and fr["metadata"]["annotations"][DECORATOR_CLAIM] == "node"
    assert fr["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Node", "name": "node-a",
                                                  "uid": "uid-node-a", "controller": True,
                                                  "blockOwnerDeletion": True}]
    assert fr["spec"]["nodeRef"] == {"name": "node-a", "uid": "uid-node-a"}
    assert actuators.start_fencing(ctx, "node-a", "uid-node-a", "node") is None, "one request per spell"
    assert len(kube.fencing_requests) == 1

    # The Node's own sync, with the request as its attachment (Metacontroller claims it by owner and
    # annotation): fencing in flight, the request kept as it is.
    h = NodeHarness(make_ctx, kube, kube.nodes["node-a"], policy)
    h.now = T0
    h.attachments = [copy.deepcopy(fr)]
    response = h.call()
    assert h.condition(fencing_names.REQUIRED)["status"] == "True"
    assert [a["metadata"]["name"] for a in response["attachments"] if a["kind"] == fencing_names.REQUEST_KIND] == \
        ["fence-node-a"]
    assert h.fencing_request()["spec"] == fr["spec"]


@pytest.mark.parametrize("case", ["guard holds", "not admitted", "not due yet", "healthy again", "another node"])
def test_a_node_its_own_sync_would_not_fence_gets_no_early_request(make_ctx, kube, case):
    from hooks import actuators
    from hooks.kube import fresh

    ctx, _ = _admitted(make_ctx, kube, holds=case == "guard holds", since=10 if case == "not due yet" else 60,
                       node_names=() if case == "not admitted" else ("node-a",))
    if case == "healthy again":
        _set_ready(kube, "node-a", "True", T0)
    if case == "another node":  # re-created under the same name since the count saw it
        with pytest.raises(fresh.Unverified):
            actuators.start_fencing(ctx, "node-a", "uid-the-old-one", "node")
    else:
        assert actuators.start_fencing(ctx, "node-a", "uid-node-a", "node") is None
    assert kube.fencing_requests == []


def test_a_failed_force_delete_is_reported_on_the_node(make_ctx, kube):
    h = NodeHarness(make_ctx, kube, unready_node("i-0123456789abcdef0", since=T0 - dt.timedelta(seconds=60)), _policy())
    kube.add_pod({"metadata": {"name": "web-1", "namespace": "default", "uid": "u-web",
                               "labels": {fencing_names.FAILOVER_LABEL: fencing_names.FAILOVER_IMMEDIATE}},
                  "spec": {"nodeName": "node-a", "volumes": []}, "status": {"phase": "Running"}})
    original = kube.delete_with_options

    def refuse(*args, **kw):
        raise __import__("worlds.fake_kube", fromlist=["api_error"]).api_error(403, "forbidden")

    kube.delete_with_options = refuse
    response = h.call()
    assert "403" in response["annotations"][fencing_names.ERROR_ANNOTATION]
    assert response["resyncAfterSeconds"] >= 5
    assert "FencingActionFailed" in kube.reasons() and "FailedOver" not in kube.reasons()
    kube.delete_with_options = original
    h.call(after=5)
    assert kube.pods == {} and fencing_names.ERROR_ANNOTATION not in h.node["metadata"]["annotations"]


# ------------------------------------------------- node-fencing: failover only on fresh proof


def _failover_pod(kube, name="web-1", uid="u-web", claim=None):
    volumes = [{"name": "d", "persistentVolumeClaim": {"claimName": claim}}] if claim else []
    kube.add_pod({"metadata": {"name": name, "namespace": "default", "uid": uid,
                               "labels": {fencing_names.FAILOVER_LABEL: fencing_names.FAILOVER_IMMEDIATE}},
                  "spec": {"nodeName": "node-a", "volumes": volumes}, "status": {"phase": "Running"}})


def _forged_call(h: NodeHarness, node: dict, policy: dict | None = None, attachments: list | None = None) -> dict:
    body = hook_request("node-fencing", node, children=attachments or [], related=[policy or h.policy])
    return serve("node-fencing", "sync", json.loads(json.dumps(body)), h.ctx)


def _unreachable(res, name, namespace=None):
    from hooks.kube.client import KubeUnavailable

    raise KubeUnavailable("Kubernetes API unreachable (test)")


def _fresh_policy(now: dt.datetime) -> dict:
    policy = _policy()
    policy["status"]["countedAt"] = fmt(now)
    return policy


def test_a_forged_unhealthy_node_fails_no_pod_over(make_ctx, kube):
    """The API server's node-a is Ready; a body saying it has been NotReady for minutes deletes nothing."""
    h = NodeHarness(make_ctx, kube, unready_node("i-0123456789abcdef0", ready="True"), _policy())
    _failover_pod(kube)
    h.kube.add_object(_fresh_policy(h.now))
    lying = unready_node("i-0123456789abcdef0", since=T0 - dt.timedelta(seconds=600))
    _forged_call(h, lying, _fresh_policy(h.now))
    assert "default/web-1" in kube.pods
    assert not any(c[0] == "delete_with_options" for c in kube.calls)


def test_failover_waits_for_a_fresh_count_on_the_api_server(make_ctx, kube):
    """The body's policy count is fresh, the API server's is an hour old (its sync stopped): no force delete."""
    h = NodeHarness(make_ctx, kube, unready_node("i-0123456789abcdef0", since=T0 - dt.timedelta(seconds=600)), _policy())
    _failover_pod(kube)
    stale = _policy()
    stale["status"]["countedAt"] = fmt(h.now - dt.timedelta(hours=1))
    kube.add_object(stale)
    response = _forged_call(h, h.node, _fresh_policy(h.now))
    assert "default/web-1" in kube.pods
    assert response["status"] is None or all(
        c.get("status") != "True" for c in response["status"]["conditions"] if c["type"] == fencing_names.REQUIRED)


def test_a_single_writer_pod_waits_for_the_power_off_the_api_server_confirms(make_ctx, kube):
    """The body's FencingRequest claims FencingSucceeded; the API server's does not: the RWO pod stays."""
    h = NodeHarness(make_ctx, kube, unready_node("i-0123456789abcdef0", since=T0 - dt.timedelta(seconds=600)), _policy())
    _failover_pod(kube, "db-0", "u-db", claim="data-db-0")
    kube.claims["default/data-db-0"] = {"spec": {"accessModes": ["ReadWriteOnce"]}}
    kube.add_object(_fresh_policy(h.now))
    request = {"apiVersion": fencing_names.API_VERSION, "kind": fencing_names.REQUEST_KIND,
               "metadata": {"name": "fence-node-a", "namespace": NS, "uid": "uid-fr"},
               "spec": {"nodeRef": {"name": "node-a"}}, "status": {"phase": "PoweringOff"}}
    kube.put_fencing_request(request)
    claimed = json.loads(json.dumps(request))
    claimed["status"] = {"phase": "Recovering", "conditions": [{"type": fencing_names.FENCING_SUCCEEDED, "status": "True"}]}
    _forged_call(h, h.node, _fresh_policy(h.now), [claimed])
    assert "default/db-0" in kube.pods


def _in_flight(node: dict, required_since: dt.datetime) -> dict:
    """The node with FencingRequired=True: fencing is in flight."""
    node = copy.deepcopy(node)
    node["status"]["conditions"].append({"type": fencing_names.REQUIRED, "status": "True", "reason": "FencingRequested",
                                         "message": "x", "lastTransitionTime": fmt(required_since)})
    return node


def test_fencing_in_flight_fails_no_pod_over_on_a_fresh_blip(make_ctx, kube):
    """The body says Ready=Unknown for 10 minutes; the API server's node came back and went Unknown 2s ago.

    Its FencingRequest is still in flight, which carries the request on, but
    no pod fails over until Ready=Unknown itself has held its 30s.
    """
    blip = _in_flight(unready_node("i-0123456789abcdef0", since=T0 - dt.timedelta(seconds=2)), T0 - dt.timedelta(seconds=300))
    h = NodeHarness(make_ctx, kube, blip, _policy())
    _failover_pod(kube)
    kube.add_object(_fresh_policy(h.now))
    kube.put_fencing_request({"apiVersion": fencing_names.API_VERSION, "kind": fencing_names.REQUEST_KIND,
                              "metadata": {"name": "fence-node-a", "namespace": NS, "uid": "uid-fr"},
                              "spec": {"nodeRef": {"name": "node-a", "uid": "uid-node-a"}},
                              "status": {"phase": "PoweringOff"}})
    lying = _in_flight(unready_node("i-0123456789abcdef0", since=T0 - dt.timedelta(seconds=600)),
                       T0 - dt.timedelta(seconds=300))
    response = _forged_call(h, lying, _fresh_policy(h.now))
    assert "default/web-1" in kube.pods
    assert not any(c[0] == "delete_with_options" for c in kube.calls)
    assert response["attachments"], "the FencingRequest in flight is kept"


def test_an_unverified_failover_is_reported_once_and_retried(make_ctx, kube):
    """API unreachable for the fresh reads: the annotation once, and no Event (nothing is said on a body the API
    server did not confirm); the same failure again writes nothing."""
    h = NodeHarness(make_ctx, kube, unready_node("i-0123456789abcdef0", since=T0 - dt.timedelta(seconds=600)), _policy())
    _failover_pod(kube)
    kube.add_object(_fresh_policy(h.now))
    original_get = kube.get
    kube.get = _unreachable  # reads fail; the force delete itself would still go through
    first = _forged_call(h, h.node, _fresh_policy(h.now))
    assert "not verified" in first["annotations"][fencing_names.ERROR_ANNOTATION]
    assert first["resyncAfterSeconds"] >= 1
    assert kube.reasons() == []
    h.node["metadata"]["annotations"] = {fencing_names.ERROR_ANNOTATION: first["annotations"][fencing_names.ERROR_ANNOTATION]}
    again = _forged_call(h, h.node, _fresh_policy(h.now))
    assert fencing_names.ERROR_ANNOTATION not in again["annotations"], "the same error is not written again"
    assert kube.reasons() == []
    assert "default/web-1" in kube.pods
    kube.get = original_get
    done = _forged_call(h, h.node, _fresh_policy(h.now))
    assert "default/web-1" not in kube.pods
    assert done["annotations"] == {fencing_names.ERROR_ANNOTATION: None}, "a verified call clears the error"


def test_failover_needs_the_governing_policy_the_request_was_decided_on(make_ctx, kube):
    """The policy was deleted and recreated under the same name since the body was built: no force delete this call."""
    h = NodeHarness(make_ctx, kube, unready_node("i-0123456789abcdef0", since=T0 - dt.timedelta(seconds=600)), _policy())
    _failover_pod(kube)
    recreated = _fresh_policy(h.now)
    recreated["metadata"]["uid"] = "uid-policy-new"
    kube.add_object(recreated)
    seen = _fresh_policy(h.now)
    seen["metadata"]["uid"] = "uid-policy-old"
    response = _forged_call(h, h.node, seen)
    assert "default/web-1" in kube.pods
    assert "uid-policy-new" in response["annotations"][fencing_names.ERROR_ANNOTATION]
    _forged_call(h, h.node, recreated)
    assert "default/web-1" not in kube.pods, "decided on the policy the API server has: the pod fails over"


# ------------------------------------------- authority and ownership: who may order a power-off, of what


def test_a_request_outside_the_controllers_namespace_powers_nothing_off(aws, make_ctx, kube):
    """Anyone who may create FencingRequests in a namespace of their own could make this one."""
    ec2, instance, h = _one_request(aws, make_ctx, kube)
    h.fr["metadata"]["namespace"] = "team-a"
    kube.add_pod(_pod("db-0", "uid-db-0"))
    h.call()
    assert h.status["phase"] == fencing_names.FAILED and h.status["errorReason"] == "NotHonouredHere"
    assert NS in h.status["errorMessage"]
    h.call(after=30)
    assert instance_state(ec2, instance) == "running" and "default/db-0" in kube.pods
    assert not any(c[0] in ("json_patch", "delete_with_options", "table") for c in kube.calls)
    assert not any(c[0] == "list" for c in kube.calls), "nothing is even read for it"


def test_a_providerid_naming_another_clusters_instance_stops_nothing(aws, make_ctx, kube):
    """A node may claim any instance: only this cluster's tag makes it ours to power off."""
    ec2 = aws("ec2")
    theirs = launch(ec2, tags=({"Key": "kubernetes.io/cluster/other", "Value": "owned"},))
    kube.add_node(unready_node(theirs))
    h = RequestHarness(make_ctx, kube, {})
    h.call()
    assert h.status["phase"] == fencing_names.FAILED and h.status["errorReason"] == "NotClusterInstance"
    assert instance_state(ec2, theirs) == "running"
    untagged = launch(ec2, tags=())
    kube.add_node(unready_node(untagged, name="node-b"))
    other = RequestHarness(make_ctx, kube, {})
    other.fr["metadata"].update(name="fence-node-b", uid="uid-fr-b")
    other.fr["spec"]["nodeRef"]["name"] = "node-b"
    other.call()
    assert other.status["errorReason"] == "NotClusterInstance" and instance_state(ec2, untagged) == "running"


def test_no_cluster_name_means_no_power_action(aws, make_ctx, kube):
    ec2 = aws("ec2")
    instance = launch(ec2)
    kube.add_node(unready_node(instance))
    h = RequestHarness(make_ctx, kube, {}, env={"NODEWARDEN_CLUSTER_NAME": ""})
    h.call()
    assert h.status["errorReason"] == "ClusterNameUnset" and instance_state(ec2, instance) == "running"


def test_the_cluster_tag_is_read_again_right_before_the_stop(aws, make_ctx, kube):
    """Tagged when the call looked, untagged by the time StopInstances would go: no stop."""
    ec2, instance, h = _one_request(aws, make_ctx, kube)
    client = h.ctx.aws.client("ec2", "us-east-1")
    looks = []

    def untag_after_the_look(**_):
        looks.append(1)
        if len(looks) == 2:  # gather's look on the body, then on the API server's copy: the tag goes now
            ec2.delete_tags(Resources=[instance], Tags=[CLUSTER_TAG])

    client.meta.events.register("after-call.ec2.DescribeInstances", untag_after_the_look)
    try:
        h.call()
    finally:
        client.meta.events.unregister("after-call.ec2.DescribeInstances", untag_after_the_look)
    assert instance_state(ec2, instance) == "running"
    assert "not tagged for cluster" in h.status["providerStatus"]["lastStopError"]


def test_a_worker_claiming_a_control_plane_instance_is_not_powered_off(aws, make_ctx, kube):
    """The Node has no control-plane label, but its providerID names the instance that serves the API
    server (its address is in the API server's own EndpointSlice): refused without the opt-in."""
    ec2, instance, h = _one_request(aws, make_ctx, kube)
    address = ec2.describe_instances(InstanceIds=[instance])["Reservations"][0]["Instances"][0]["PrivateIpAddress"]
    kube.add_object({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                     "metadata": {"name": "kubernetes", "namespace": "default"},
                     "addressType": "IPv4", "endpoints": [{"addresses": [address]}]})
    h.call()
    assert h.status["phase"] == fencing_names.FAILED and h.status["errorReason"] == "ControlPlaneNode"
    assert address in h.status["errorMessage"] and instance_state(ec2, instance) == "running"
    allowed = RequestHarness(make_ctx, kube, {"allowControlPlane": True})
    allowed.fr["metadata"].update(name="fence-node-a-allowed", uid="uid-fr-allowed")
    allowed.call()
    assert allowed.status["phase"] == fencing_names.POWERING_OFF and instance_state(ec2, instance) == "stopped"


# ------------------------------------------- node-fencing: a node that dies again is fenced again


def test_a_node_that_dies_again_is_fenced_again(aws, make_ctx, kube):
    """Fenced (Off); an admin starts it; Ready again while its request waits in aftercare (a
    VolumeAttachment that never goes); then it dies again. The earlier request proves nothing now: it
    goes (its finalize takes its taint off), and the new spell gets a new request that powers it off."""
    ec2 = aws("ec2")
    instance = launch(ec2)
    h = NodeHarness(make_ctx, kube, unready_node(instance, since=T0 - dt.timedelta(seconds=60)), _policy())
    kube.volume_attachments["csi-stuck"] = {"metadata": {"name": "csi-stuck"}, "spec": {"nodeName": "node-a"},
                                            "status": {"attached": True}}
    env = {"NODEWARDEN_FENCING_RECOVERY_TIMEOUT_SECONDS": "30"}

    def drive(uid: str) -> RequestHarness:
        """The fencing-request hook on the node's FencingRequest as node-fencing made it, to Succeeded."""
        made = h.fencing_request()
        made["metadata"]["uid"] = uid
        r = RequestHarness(make_ctx, kube, {}, env=env)
        r.fr = {"apiVersion": fencing_names.API_VERSION, "kind": fencing_names.REQUEST_KIND,
                "metadata": {**made["metadata"], "generation": 1}, "spec": copy.deepcopy(made["spec"])}
        r.now = h.now
        r.run_until(lambda: r.status.get("phase") == fencing_names.SUCCEEDED, step=5)
        h.now = r.now
        h.set_request_status(copy.deepcopy(r.status))
        return r

    h.call()
    first = drive("uid-fr-1")
    h.call(after=1)
    assert instance_state(ec2, instance) == "stopped" and h.condition(fencing_names.COMPLETE)["status"] == "True"

    ec2.start_instances(InstanceIds=[instance])  # an admin starts it; the kubelet is back
    _set_ready(kube, "node-a", "True", h.now)
    first.now = h.now
    first.call(after=10)
    assert first.status["recovery"]["outOfServiceTaint"] == fencing_names.TAINT_APPLIED, "aftercare waits for the VA"
    h.set_request_status(copy.deepcopy(first.status))
    h.call(after=1)
    assert h.fencing_request() is not None, "kept while its aftercare is not done"

    _set_ready(kube, "node-a", "Unknown", h.now)  # dies again
    h.call(after=1)
    complete = h.condition(fencing_names.COMPLETE)
    assert complete is None or complete["status"] != "True", "the earlier power-off proves nothing now"
    assert h.fencing_request() is None, "the earlier request goes"
    first.now = h.now
    assert first.call("finalize")["finalized"] is True  # Metacontroller deletes it: finalize untaints
    assert OOS not in kube.taints("node-a"), "no out-of-service taint on a node not proven off"
    kube.fencing_requests.clear()

    h.call(after=31)  # this spell's duration: a new request
    assert h.condition(fencing_names.REQUIRED)["status"] == "True" and h.fencing_request() is not None
    drive("uid-fr-2")
    assert instance_state(ec2, instance) == "stopped", "powered off again"
    h.call(after=1)
    assert h.condition(fencing_names.COMPLETE)["status"] == "True"


def test_a_forged_node_body_taints_nothing_and_orders_nothing(make_ctx, kube):
    """The API server's node-a is Ready. A body saying it has been NotReady for ten minutes, its conditions
    settled (so taints would follow): no taint, no condition, no FencingRequest, whatever the body's uid."""
    h = NodeHarness(make_ctx, kube, unready_node("i-0123456789abcdef0", ready="True"), _policy())
    h.kube.add_object(_fresh_policy(h.now))
    lying = _in_flight(unready_node("i-0123456789abcdef0", since=T0 - dt.timedelta(seconds=600)),
                       T0 - dt.timedelta(seconds=590))
    lying["status"]["conditions"][-1]["message"] = f"FencingRequest {NS}/fence-node-a powers the node off"
    lying["status"]["conditions"] += [
        {"type": fencing_names.TRIAGED, "status": "True", "reason": "UnhealthyCondition",
         "message": f"Ready=Unknown since {fmt(T0 - dt.timedelta(seconds=600))}", "lastTransitionTime": fmt(T0)},
        {"type": fencing_names.COMPLETE, "status": "False", "reason": "FencingInProgress",
         "message": "waiting for the power-off to be confirmed", "lastTransitionTime": fmt(T0)}]
    for uid in ("uid-node-a", "uid-made-up"):  # the real uid (verified: the Ready node decides), or not (unverified)
        lying["metadata"]["uid"] = uid
        response = _forged_call(h, lying, _fresh_policy(h.now))
        assert response["status"] is None, uid
        assert not any(a["kind"] == fencing_names.REQUEST_KIND for a in response["attachments"]), uid
    assert not any(c[0] in ("json_patch", "merge_patch") and c[1] == "Node" for c in kube.calls)
    assert kube.taints("node-a") == [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]
    assert not any(c[0] == "list" and c[1] == "Pod" for c in kube.calls), "no pods listed for a body alone"


def test_the_power_off_skips_the_os_shutdown(aws):
    """StopInstances with Force alone first attempts a graceful OS shutdown and forces the stop only after
    EC2's timeout: the fence sends SkipOsShutdown too. moto ignores both flags, so the request as serialised
    for the wire is what is checked."""
    from hooks.aws import ec2_power

    ec2 = aws("ec2")
    instance = launch(ec2)
    sent = []
    ec2.meta.events.register("before-call.ec2.StopInstances", lambda params=None, **_: sent.append(params["body"]))
    ec2_power.stop(ec2, instance)
    assert sent and sent[0].get("SkipOsShutdown") == "true" and sent[0].get("Force") == "true"
    assert instance_state(ec2, instance) == "stopped"
