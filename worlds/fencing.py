"""FencingRequests against moto, with Metacontroller played by the test.

Shared by tests/fencing/test_fencing_moto.py, test_fencing_reads.py,
test_fencing_aws_faults.py and tests/replacement/test_replacement_moto.py:

- ``launch``: a moto instance of this cluster (its tag, as make_ctx names the
  cluster), ``instance_state``: its state as EC2 answers now;
- ``unready_node``: a NotReady Node on an instance, as fencing finds it;
- ``RequestHarness``: one FencingRequest stored in a FakeKube (the API
  server) and synced or finalized through the hook, its related Node sent
  and each response's status applied the way Metacontroller does; the clock
  is the test's: ``now`` is T0 plus the seconds of its ``ManualClock`` (one
  of its own, or one several requests share).
"""
from __future__ import annotations

import copy
import datetime as dt
import json
from typing import Callable

from hooks import fencing_names
from hooks.dispatch import serve
from worlds.clock import ManualClock
from worlds.fake_kube import FakeKube

NS = "nodewarden-system"
T0 = dt.datetime(2026, 11, 21, 12, 0, 0, tzinfo=dt.timezone.utc)
CLUSTER_TAG = {"Key": "kubernetes.io/cluster/test-cluster", "Value": "owned"}  # make_ctx's NODEWARDEN_CLUSTER_NAME


def fmt(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def launch(ec2, tags=(CLUSTER_TAG,)) -> str:
    """An instance of this cluster (its tag), unless ``tags`` says otherwise."""
    spec = [{"ResourceType": "instance", "Tags": list(tags)}] if tags else []
    return ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1, TagSpecifications=spec,
                             Placement={"AvailabilityZone": "us-east-1a"})["Instances"][0]["InstanceId"]


def instance_state(ec2, instance_id: str) -> str:
    return ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]["State"]["Name"]


def unready_node(instance_id: str, name: str = "node-a", ready: str = "Unknown", since: dt.datetime = T0,
                 uid: str = "uid-node-a") -> dict:
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": uid, "labels": {"pool": "workers"}, "annotations": {}},
        "spec": {"providerID": f"aws:///us-east-1a/{instance_id}",
                 "taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]},
        "status": {"conditions": [{"type": "Ready", "status": ready, "reason": "NodeStatusUnknown",
                                   "lastHeartbeatTime": fmt(since), "lastTransitionTime": fmt(since)}]},
    }


class RequestHarness:
    """Plays Metacontroller for one FencingRequest: related Node, status applied, the clock moved.

    ``ctx`` and ``clock`` shared by several harnesses make them one hook process on one clock;
    ``answer(hook, body)`` is how a call is answered (the hook's own ``serve`` unless given).
    """

    def __init__(self, make_ctx, kube: FakeKube, spec: dict, env: dict | None = None, *,
                 name: str = "fence-node-a", node: str = "node-a", uid: str = "uid-fr", ctx=None,
                 clock: ManualClock | None = None, answer: Callable[[str, dict], dict] | None = None):
        self.kube = kube
        self._clock = clock or ManualClock(0.0)
        self.ctx = ctx or make_ctx(env or {}, kube=kube)
        self.ctx.clock = lambda: self.now
        self._answer = answer or (lambda hook, body: serve("fencing-request", hook, body, self.ctx))
        self.fr = {"apiVersion": fencing_names.API_VERSION, "kind": fencing_names.REQUEST_KIND,
                   "metadata": {"name": name, "namespace": NS, "uid": uid, "generation": 1},
                   "spec": {"nodeRef": {"name": node}, **spec}}
        self.responses: list[dict] = []

    @property
    def now(self) -> dt.datetime:
        return T0 + dt.timedelta(seconds=self._clock())

    @now.setter
    def now(self, moment: dt.datetime) -> None:
        self._clock.advance((moment - self.now).total_seconds())

    def call(self, hook: str = "sync", after: float = 0) -> dict:
        self._clock.advance(after)
        if hook == "finalize":  # Metacontroller finalizes only what the API server is deleting
            self.fr["metadata"].setdefault("deletionTimestamp", fmt(self.now))
        self.kube.put_fencing_request(self.fr)  # the API server has the request the body names
        node = self.kube.nodes.get(self.fr["spec"]["nodeRef"]["name"])
        hooks = {h: {"version": "v2"} for h in ("sync", "finalize", "customize")}
        body = {"controller": {"spec": {"hooks": hooks}}, "parent": self.fr, "children": {},
                "related": {"Node.v1": {node["metadata"]["name"]: node}} if node else {},
                "finalizing": hook == "finalize"}
        response = self._answer(hook, json.loads(json.dumps(body)))
        self.fr["status"] = copy.deepcopy(response["status"])
        self.kube.put_fencing_request(self.fr)  # Metacontroller writes the status back
        self.responses.append(response)
        return response

    @property
    def status(self) -> dict:
        return self.fr.get("status") or {}

    def condition(self, ctype: str) -> dict | None:
        return next((c for c in self.status.get("conditions") or [] if c["type"] == ctype), None)

    def run_until(self, done, *, step: float | None = None, limit: int = 40) -> None:
        """Call again after each response's resyncAfterSeconds until ``done()``."""
        for _ in range(limit):
            if done():
                return
            wait = step if step is not None else self.responses[-1].get("resyncAfterSeconds", 1) if self.responses else 0
            self.call(after=wait)
        raise AssertionError(f"not done after {limit} calls; status: {json.dumps(self.status, indent=1)}")
