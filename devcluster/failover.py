"""The node-failure scenario of fencing, on the local control plane.

A StatefulSet pod with a ReadWriteOnce volume (a CSI PersistentVolume and the
VolumeAttachment an external attacher would have made) and a Deployment pod
run on a node backed by a moto instance. The node dies: it leaves kwok's
selector, so its Lease stops being renewed, exactly what the node lifecycle
controller sees when a kubelet goes silent, and after its grace period the
node lifecycle controller turns Ready Unknown. From that transition we time
how long the StatefulSet's replacement takes to be bound to a healthy node by
the real scheduler, with a NodeFencingPolicy selecting the node (nodewarden
fences it) or without one (the baseline: Kubernetes alone).

There is no kubelet: Nodes are API objects that kwok keeps alive
(devcluster/kwok.py), Ready with their Leases renewed and their pods Running.
The e2e test (tests/e2e/test_fencing.py) and the benchmark
(bench/fencing_failover.py) both drive this module.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import time
import uuid
from dataclasses import dataclass, field

from . import fleet, kwok
from .api import AdminApi, ApiError, wait_for
from .kubelet import ADC_ANNOTATION

POLICIES = "/apis/nodewarden.io/v1alpha1/nodefencingpolicies"
REQUESTS = "/apis/nodewarden.io/v1alpha1/namespaces/nodewarden-system/fencingrequests"
VOLUME_ATTACHMENTS = "/apis/storage.k8s.io/v1/volumeattachments"
CSI_DRIVER = "ebs.csi.aws.com"
SCENARIO_LABEL = "nodewarden.io/e2e-scenario"
# Every node of these scenarios carries it and every pod selects it, so nothing
# lands on another test's nodes.
POOL_LABEL = "nodewarden.io/e2e-pool"
POOL = "fencing"
PAUSE = "registry.k8s.io/pause:3.10"


def create_node(api: AdminApi, name: str, instance_id: str, *,
                labels: dict | None = None, unschedulable: bool = False) -> dict:
    """A Node as a kubelet would register it; returned once it is Ready and takes pods."""
    manifest = fleet.node_manifest(name, instance_id, {POOL_LABEL: POOL, **(labels or {})})
    manifest["metadata"]["annotations"] = {ADC_ANNOTATION: "true"}
    if unschedulable:
        manifest["spec"]["unschedulable"] = True
    api.create("/api/v1/nodes", manifest)
    return wait_schedulable(api, name)


# Taints the node lifecycle controller keeps on a Node until it has seen it Ready.
LIFECYCLE_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def wait_schedulable(api: AdminApi, name: str, timeout: float = 600) -> dict:
    """Until kwok has posted the Node Ready and the node lifecycle controller has
    taken its not-ready taints off (a loaded kube-controller-manager can be tens of
    seconds behind kwok; until then the scheduler places nothing there). Returns
    the Node. Beside thousands of Nodes this can take minutes: kwok re-posts every
    Node's status every 10 minutes, all together when they were made together."""
    def check() -> dict | None:
        node = api.get_or_none(f"/api/v1/nodes/{name}")
        taints = ((node or {}).get("spec") or {}).get("taints") or []
        ready = kwok.ready(node).get("status") == "True"
        return node if ready and not any(t.get("key") in LIFECYCLE_TAINTS for t in taints) else None
    return wait_for(check, f"Node {name} Ready and free of the not-ready taints", timeout=timeout, interval=0.2)


def kill(api: AdminApi, names: list[str], heartbeat: kwok.Heartbeat = kwok.FAST) -> dict[str, float]:
    """The nodes die together (out of kwok's selector); returns when the node
    lifecycle controller turned each one's Ready Unknown (epoch seconds, whole:
    the condition's lastTransitionTime, which the fencing durations run from too)."""
    for name in names:
        kwok.release(api, name)
    return {name: epoch(kwok.wait_unknown(api, name, heartbeat)["lastTransitionTime"]) for name in names}


def scenario_nodes(api: AdminApi, cloud: fleet.Aws, prefix: str,
                   count: int) -> tuple[str, list[str], list[str]]:
    """``count`` Ready Nodes backed by moto instances, labelled with a scenario of their own (a policy's
    selector): (the scenario, the Node names, their instance ids)."""
    scenario = f"{prefix}-{fleet.launch_instances(cloud, 1)[0][-6:]}"
    names = [f"{scenario}-{i}" for i in range(count)]
    instances = fleet.launch_instances(cloud, count)
    for name, instance_id in zip(names, instances):
        create_node(api, name, instance_id, labels={SCENARIO_LABEL: scenario})
    return scenario, names, instances


def fence_by_hand(api: AdminApi, name: str) -> None:
    """An operator's FencingRequest for the Node; returns once the out-of-service taint is on it."""
    api.create(REQUESTS, {"apiVersion": "nodewarden.io/v1alpha1", "kind": "FencingRequest",
                          "metadata": {"name": name}, "spec": {"nodeRef": {"name": name}}})
    wait_for(lambda: any(t["key"] == "node.kubernetes.io/out-of-service"
                         for t in api.get(f"/api/v1/nodes/{name}")["spec"].get("taints") or []),
             "out-of-service taint", timeout=30, interval=0.5)


def epoch(stamp: str) -> float:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def cordon(api: AdminApi, name: str, unschedulable: bool) -> None:
    api.patch(f"/api/v1/nodes/{name}", {"spec": {"unschedulable": unschedulable}})


def attachment_name(volume_handle: str, node: str) -> str:
    """The name the CSI attacher gives a VolumeAttachment, so the attach/detach controller adopts ours."""
    return "csi-" + hashlib.sha256(f"{volume_handle}{CSI_DRIVER}{node}".encode()).hexdigest()


def policy_manifest(name: str, scenario: str, duration: str = "30s", max_unhealthy=1,
                    selector: dict | None = None) -> dict:
    """A policy over the scenario's nodes (or over the nodes with the labels ``selector`` names)."""
    return {"apiVersion": "nodewarden.io/v1alpha1", "kind": "NodeFencingPolicy",
            "metadata": {"name": name},
            "spec": {"nodeSelector": {"matchLabels": selector or {SCENARIO_LABEL: scenario}},
                     "unhealthyConditions": [{"type": "Ready", "status": "Unknown", "duration": duration},
                                             {"type": "Ready", "status": "False", "duration": duration}],
                     "maxUnhealthy": max_unhealthy, "action": "Off", "recoveryStrategy": "OutOfServiceTaint"}}


@dataclass
class Workloads:
    """One StatefulSet (RWO volume) and one Deployment in a namespace, pinned to a node at first."""

    api: AdminApi
    namespace: str
    node: str
    prefix: str
    statefulset: str = ""
    deployment: str = ""
    pv: str = ""
    volume_handle: str = ""
    va_name: str = ""
    original_uids: dict = field(default_factory=dict)

    def create(self, failover_label: bool = True) -> None:
        ns = self.namespace
        self.statefulset, self.deployment = f"{self.prefix}-db", f"{self.prefix}-web"
        self.pv = f"pv-{self.prefix}-{uuid.uuid4().hex[:4]}"
        self.volume_handle = f"vol-{uuid.uuid4().hex[:17]}"
        claim = f"data-{self.statefulset}-0"
        # Bound both ways, as the PV controller would leave them (no binder runs here):
        # the attach/detach controller only acts on a Bound claim whose volume names it by uid.
        pvc = self.api.create(f"/api/v1/namespaces/{ns}/persistentvolumeclaims", {
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim, "labels": {"app": self.statefulset},
                         "annotations": {"pv.kubernetes.io/bind-completed": "yes",
                                         "pv.kubernetes.io/bound-by-controller": "yes"}},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": self.pv,
                     "resources": {"requests": {"storage": "1Gi"}}}})
        self.api.create("/api/v1/persistentvolumes", {
            "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": self.pv},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                     "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                     "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": ns,
                                  "name": claim, "uid": pvc["metadata"]["uid"]},
                     "csi": {"driver": CSI_DRIVER, "volumeHandle": self.volume_handle, "fsType": "ext4"}}})
        self.api.patch(f"/api/v1/persistentvolumes/{self.pv}/status", {"status": {"phase": "Bound"}})
        self.api.patch(f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{claim}/status", {"status": {
            "phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"}}})
        container = {"name": "app", "image": PAUSE, "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}
        pool = {POOL_LABEL: POOL}
        self.api.create(f"/apis/apps/v1/namespaces/{ns}/statefulsets", {
            "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": self.statefulset},
            "spec": {"replicas": 1, "serviceName": self.statefulset,
                     "selector": {"matchLabels": {"app": self.statefulset}},
                     "template": {"metadata": {"labels": {"app": self.statefulset}},
                                  "spec": {"nodeSelector": pool, "containers": [{**container, "volumeMounts": [
                                      {"name": "data", "mountPath": "/data"}]}]}},
                     "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
                         "accessModes": ["ReadWriteOnce"], "storageClassName": "",
                         "resources": {"requests": {"storage": "1Gi"}}}}]}})
        labels = {"app": self.deployment}
        if failover_label:
            labels["nodewarden.io/failover"] = "immediate"
        self.api.create(f"/apis/apps/v1/namespaces/{ns}/deployments", {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": self.deployment},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": self.deployment}},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"nodeSelector": pool, "containers": [container]}}}})

    def pods(self, app: str) -> list[dict]:
        return self.api.get(f"/api/v1/namespaces/{self.namespace}/pods",
                            params={"labelSelector": f"app={app}"})["items"]

    def bound(self, app: str) -> dict | None:
        """The app's live pod bound to a node (not terminating), if any."""
        for pod in self.pods(app):
            if pod["spec"].get("nodeName") and not pod["metadata"].get("deletionTimestamp"):
                return pod
        return None

    def wait_placed(self, timeout: float = 60) -> None:
        for app in (self.statefulset, self.deployment):
            pod = wait_for(lambda a=app: self.bound(a), f"{app} bound", timeout=timeout)
            assert pod["spec"]["nodeName"] == self.node, f"{app} landed on {pod['spec']['nodeName']}"
            self.original_uids[app] = pod["metadata"]["uid"]

    def attach_volume(self) -> None:
        """What the external attacher would leave behind: an attached VolumeAttachment."""
        self.va_name = attachment_name(self.volume_handle, self.node)
        try:
            self.api.create(VOLUME_ATTACHMENTS, {
                "apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment", "metadata": {"name": self.va_name},
                "spec": {"attacher": CSI_DRIVER, "nodeName": self.node,
                         "source": {"persistentVolumeName": self.pv}}})
        except ApiError as exc:  # the attach/detach controller may have made it first
            if exc.status != 409:
                raise
        self.api.patch(f"{VOLUME_ATTACHMENTS}/{self.va_name}/status", {"status": {"attached": True}})

    def volume_attachment(self) -> dict | None:
        return self.api.get_or_none(f"{VOLUME_ATTACHMENTS}/{self.va_name}")

    def replaced_elsewhere(self, app: str) -> dict | None:
        """The app's replacement: a new pod, bound to a node other than the dead one."""
        pod = self.bound(app)
        if pod and pod["metadata"]["uid"] != self.original_uids.get(app) and pod["spec"]["nodeName"] != self.node:
            return pod
        return None

    def cleanup(self) -> None:
        for pod in self.pods(self.statefulset) + self.pods(self.deployment):
            self.api.delete(f"/api/v1/namespaces/{self.namespace}/pods/{pod['metadata']['name']}",
                            body={"gracePeriodSeconds": 0})
        if self.va_name:
            self.api.delete(f"{VOLUME_ATTACHMENTS}/{self.va_name}")
        if self.pv:
            self.api.delete(f"/api/v1/persistentvolumes/{self.pv}")


@dataclass
class Trial:
    """One node failure, timed from Ready turning Unknown."""

    api: AdminApi
    aws: fleet.Aws
    namespace: str
    healthy: list[str]
    fenced: bool  # a NodeFencingPolicy selects the node
    duration: str = "30s"
    # A zone of its own keeps the node lifecycle controller's zone disruption
    # logic (it stops evicting in a zone mostly NotReady) out of a baseline.
    zone: str | None = None
    # Labels the node shares with other nodes: its policy then selects all of them.
    shared_labels: dict | None = None
    name: str = field(default_factory=lambda: f"fo-{uuid.uuid4().hex[:6]}")
    instance_id: str = ""
    workloads: Workloads | None = None
    failed_at: float = 0.0  # epoch seconds when Ready turned Unknown
    timings: dict = field(default_factory=dict)

    @property
    def node(self) -> str:
        return f"{self.name}-node"

    def create_node(self) -> None:
        """The node (cordoned until its workloads are placed) and, when fenced, its policy.

        The policy comes once the node is Ready: a node kwok is slow to bring
        up sits Unknown meanwhile, and a policy already there would rightly
        fence it before the trial began.
        """
        (self.instance_id,) = fleet.launch_instances(self.aws, 1)
        labels = {SCENARIO_LABEL: self.name, **(self.shared_labels or {})}
        if self.zone:
            labels["topology.kubernetes.io/zone"] = self.zone
        create_node(self.api, self.node, self.instance_id, labels=labels, unschedulable=True)
        if self.fenced:
            self.api.create(POLICIES, policy_manifest(self.name, self.name, self.duration,
                                                      selector=self.shared_labels))

    def place(self) -> None:
        """Workloads on this node only, and the attached volume."""
        cordon(self.api, self.node, False)
        self.workloads = Workloads(self.api, self.namespace, self.node, self.name)
        self.workloads.create()
        self.workloads.wait_placed()
        self.workloads.attach_volume()
        cordon(self.api, self.node, True)

    def instance_state(self) -> str:
        reservations = self.aws.ec2.describe_instances(InstanceIds=[self.instance_id])["Reservations"]
        return reservations[0]["Instances"][0]["State"]["Name"]

    def node_taints(self) -> list[dict]:
        return (self.api.get(f"/api/v1/nodes/{self.node}").get("spec") or {}).get("taints") or []

    def observe(self) -> None:
        """Record when each milestone is first seen (call it in a polling loop).

        Each mark is the time of the look that saw it, so a slow look at one
        thing never shifts the time of another.
        """
        marks, wl = self.timings, self.workloads

        def mark(name: str, seen) -> None:
            if name not in marks and seen():
                marks[name] = round(time.time() - self.failed_at, 2)

        mark("statefulset_bound_elsewhere", lambda: wl.replaced_elsewhere(wl.statefulset))
        mark("deployment_bound_elsewhere", lambda: wl.replaced_elsewhere(wl.deployment))
        # Looked at in the order fencing takes the steps (stop confirmed, then the taint, then the pod goes), so a
        # later step seen in this loop was looked at after every earlier one.
        if self.fenced:
            stopped = lambda: self.instance_state() in ("stopped", "terminated")  # noqa: E731
            tainted = lambda: any(t["key"] == "node.kubernetes.io/out-of-service"  # noqa: E731
                                  for t in self.node_taints())
            mark("instance_stopped", stopped)
            mark("out_of_service_taint", tainted)
        mark("statefulset_pod_gone", lambda: not any(
            p["metadata"]["uid"] == wl.original_uids[wl.statefulset] for p in wl.pods(wl.statefulset)))
        if self.fenced:
            # Two steps can both land between one loop's looks, and be seen in the wrong order. Fencing takes
            # them in order (stop confirmed, then the taint, then the pod goes): a step seen only right after
            # the one it comes before is dated with that one, never after it; one not there at all stays unmarked.
            for first, then, seen in (("out_of_service_taint", "statefulset_pod_gone", tainted),
                                      ("instance_stopped", "out_of_service_taint", stopped)):
                if then in marks and first not in marks and seen():
                    marks[first] = marks[then]
        mark("volume_attachment_gone", lambda: wl.volume_attachment() is None)

    def fencing_request(self) -> dict | None:
        return self.api.get_or_none(f"{REQUESTS}/fence-{self.node}")

    def cleanup(self) -> None:
        if self.workloads:
            self.workloads.cleanup()
        if self.fenced:
            self.api.delete(f"{POLICIES}/{self.name}")
        self.api.delete(f"/api/v1/nodes/{self.node}")


def run_trials(api: AdminApi, healthy: list[str], trials: list[Trial], *, timeout: float,
               stop_when=None, poll: float = 0.25, delay: float = 0.0,
               heartbeat: kwok.Heartbeat = kwok.FAST) -> None:
    """Prepare every trial with the healthy nodes cordoned, kill their nodes at once, then watch.

    Each trial's clock (``failed_at``) starts when its node turned Unknown.
    Watching ends at ``timeout`` seconds after the last of those, or earlier
    once ``stop_when(trials)`` holds (by default: every StatefulSet pod moved).
    ``delay`` seconds pass between the placement and the kill.
    """
    stop_when = stop_when or (lambda ts: all("statefulset_bound_elsewhere" in t.timings for t in ts))
    for node in healthy:
        cordon(api, node, True)
    try:
        for trial in trials:
            trial.create_node()
        for trial in trials:
            trial.place()
    finally:
        for node in healthy + [t.node for t in trials]:
            cordon(api, node, False)
    # A delay before the failure samples kube-controller-manager's periodic loops
    # (pod GC runs every 20 s) at a random phase instead of the same one each trial.
    time.sleep(delay)
    failed = kill(api, [t.node for t in trials], heartbeat)
    for trial in trials:
        trial.failed_at = failed[trial.node]
    deadline = max(failed.values()) + timeout
    while time.time() < deadline and not stop_when(trials):
        for trial in trials:
            trial.observe()
        time.sleep(poll)
