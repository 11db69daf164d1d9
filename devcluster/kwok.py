"""kwok (sigs.k8s.io/kwok, "Kubernetes WithOut Kubelet") plays the kubelet of the local stack's Nodes.

No kubelet runs here: Nodes are API objects. kwok, built by `make
controlplane-bins` and run by Cluster, keeps every Node labelled
``kwok.x-k8s.io/node=fake`` alive the way a kubelet would: it renews the
Node's Lease in kube-node-lease (every quarter of its duration), posts its
conditions (Ready and the pressure conditions, from the node Stages in
devcluster/kwok_node_stages.yaml) and plays the pods bound to it (kwok's
pod/fast Stages, read from the kwok module in the Go module cache: a pod
becomes Running and Ready, a pod marked for deletion is deleted).

Every Node devcluster makes carries the label: the demo's, the tests' (their
worlds, the fencing scenarios) and those the kubelet stand-in registers for
Machines' instances. A Node dies the way kwok allows: :func:`release` takes it
out of kwok's selector, its Lease is no longer renewed, and the node lifecycle
controller turns Ready to Unknown after its grace period
(the cluster's Heartbeat), exactly as for a kubelet gone silent. kwok
leaves that Node's pods as they were. :func:`manage` puts the label back: kwok
takes the Lease again and posts Ready=True. A kubelet alive but NotReady is
:func:`post_ready`: the Node's status posted as its kubelet posts it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import yaml

from .api import STRATEGIC, AdminApi, ApiError, wait_for
from .layout import RECORDS, REPO, parse_record

# The label kwok's --manage-nodes-with-label-selector selects.
LABEL = "kwok.x-k8s.io/node"
VALUE = "fake"
SELECTOR = f"{LABEL}={VALUE}"


@dataclass(frozen=True)
class Heartbeat:
    """How a Node proves it lives, and how soon its silence shows.

    ``lease_seconds`` is kwok's --node-lease-duration-seconds (it renews each
    Lease every quarter of it); ``grace_seconds`` is kube-controller-manager's
    --node-monitor-grace-period (a Node whose Lease went unrenewed this long
    turns Unknown), checked every ``monitor_period_seconds``
    (--node-monitor-period).
    """

    lease_seconds: int
    grace_seconds: int
    monitor_period_seconds: int = 5

    @property
    def renewal_seconds(self) -> float:
        return self.lease_seconds / 4


# The local stack's: four missed renewals and a Node turns Unknown, within
# about 25 s of its last one, so tests of dead Nodes stay short.
FAST = Heartbeat(lease_seconds=20, grace_seconds=20)
# A real cluster's: the kubelet's 40 s Lease (renewed every 10 s) and
# kube-controller-manager's default 50 s grace period: half the Lease writes
# of FAST.
KUBELET_DEFAULTS = Heartbeat(lease_seconds=40, grace_seconds=50)
# Lease renewals a second the local stack keeps up with beside everything
# else on two cores. At 5,000 Nodes a kubelet's pace asks for 500; measured,
# renewals fell 20-30 s behind and Nodes flapped NotReady.
MAX_RENEWALS_PER_SECOND = 100


def heartbeat_for(nodes: int) -> Heartbeat:
    """A real kubelet's pace, with the Lease (and the grace period with it) made
    only as much longer as ``nodes`` renewals need to stay within MAX_RENEWALS_PER_SECOND."""
    lease = math.ceil(nodes * 4 / MAX_RENEWALS_PER_SECOND)  # renewed every quarter of it
    if lease <= KUBELET_DEFAULTS.lease_seconds:
        return KUBELET_DEFAULTS
    return Heartbeat(lease_seconds=lease, grace_seconds=lease + KUBELET_DEFAULTS.grace_seconds
                     - KUBELET_DEFAULTS.lease_seconds)


# Labelled true, a managed Node reports Ready=False (the node-not-ready Stage).
NOT_READY_LABEL = "node-not-ready.stage.kwok.x-k8s.io"
# The reason of a Ready=False its kubelet posted (post_ready), which kwok leaves as it is.
KUBELET_NOT_READY = "KubeletNotReady"
# Pod IPs kwok hands out, and the InternalIP of a managed Node that has none.
POD_CIDR = "10.244.0.0/16"
NODE_IP = "127.0.0.1"

NODE_STAGES = REPO / "devcluster" / "kwok_node_stages.yaml"
# kwok's KwokConfiguration: how many Leases and Stages it works on at a time.
CONFIGURATION = REPO / "devcluster" / "kwok_configuration.yaml"
POD_STAGES = Path("kustomize") / "stage" / "pod" / "fast"
RECORD = RECORDS["kwok"]
LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
NODES = "/api/v1/nodes"


class NoRecord(FileNotFoundError):
    pass


@dataclass(frozen=True)
class Build:
    """What build.sh recorded in .bin/kwok.version."""

    release: str
    module: str = ""  # "sigs.k8s.io/kwok@v0.8.0"
    source: Path | None = None  # that module's directory in the Go module cache


def read(bin_dir: Path) -> Build:
    path = Path(bin_dir) / RECORD
    try:
        fields = parse_record(path.read_text())
    except FileNotFoundError:
        raise NoRecord(f"{path} is missing; run `make controlplane-bins`") from None
    if not fields.get("release"):
        raise ValueError(f"{path} names no release")
    return Build(release=fields["release"], module=fields.get("module", ""),
                 source=Path(fields["source"]) if fields.get("source") else None)


def pod_stage_files(source: Path) -> list[Path]:
    """kwok's pod/fast Stages in the module at ``source``, as its kustomization lists them."""
    directory = source / POD_STAGES
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    files = [directory / name for name in kustomization.get("resources") or []]
    if not files or not all(f.is_file() for f in files):
        raise FileNotFoundError(f"no pod Stages in {directory}")
    return files


def stage_files(source: Path) -> list[Path]:
    """Every file kwok gets with --config: its settings, our Stages for Nodes, kwok's for pods."""
    return [CONFIGURATION, NODE_STAGES, *pod_stage_files(source)]


def labels() -> dict[str, str]:
    """What a Node needs for kwok to keep it alive."""
    return {LABEL: VALUE}


def manage(api: AdminApi, name: str) -> None:
    """Hand the Node to kwok: its Lease is renewed and it is posted Ready."""
    api.patch(f"{NODES}/{name}", {"metadata": {"labels": labels()}})


def release(api: AdminApi, name: str) -> None:
    """Take the Node out of kwok's selector: its heartbeat stops, as a dead kubelet's
    does. A Node already gone is fine."""
    try:
        api.patch(f"{NODES}/{name}", {"metadata": {"labels": {LABEL: None}}})
    except ApiError as exc:
        if exc.status != 404:
            raise


def post_ready(api: AdminApi, name: str, ready: bool) -> None:
    """Post the Node's Ready condition as its kubelet does: one status write, now as its heartbeat and its
    transition time. NotReady is posted with the reason a kubelet gives (``KubeletNotReady``), which kwok's
    ``node-kubelet-not-ready`` Stage leaves alone (the Lease still renewed, a kubelet alive but NotReady);
    Ready brings kwok's usual Stages back. A storm of kubelets, each a write of its own, as in a cluster."""
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    condition = {"type": "Ready", "status": "True" if ready else "False",
                 "reason": "KubeletReady" if ready else KUBELET_NOT_READY,
                 "message": "kubelet is posting ready status" if ready else "container runtime is down",
                 "lastHeartbeatTime": now, "lastTransitionTime": now}
    api.patch(f"{NODES}/{name}/status", {"status": {"conditions": [condition]}}, content_type=STRATEGIC)


def ready(node: dict | None) -> dict:
    """The Node's Ready condition ({} when it has none)."""
    conditions = ((node or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == "Ready"), {})


def wait_ready(api: AdminApi, name: str, timeout: float = 30) -> dict:
    """Until kwok has posted the Node Ready; returns the Node."""
    def check() -> dict | None:
        node = api.get_or_none(f"{NODES}/{name}")
        return node if ready(node).get("status") == "True" else None
    return wait_for(check, f"Node {name} Ready", timeout=timeout, interval=0.2)


def wait_released(api: AdminApi, name: str, heartbeat: Heartbeat = FAST, timeout: float = 30) -> None:
    """Until kwok has let go of the released Node: its Lease has gone one renewal
    interval plus a second without renewal. kwok renews the
    Lease of every Node it manages and plays its pods from the same list, so after
    this a pod bound to the Node stays Pending."""
    interval = heartbeat.renewal_seconds + 1

    def stale() -> bool:
        lease = api.get_or_none(f"{LEASES}/{name}") or {}
        renewed = (lease.get("spec") or {}).get("renewTime")
        if not renewed:
            return True
        at = datetime.fromisoformat(renewed.replace("Z", "+00:00"))
        return (datetime.now(timezone.utc) - at).total_seconds() > interval
    wait_for(stale, f"kwok to let go of Node {name}", timeout=timeout, interval=0.5)


def wait_unknown(api: AdminApi, name: str, heartbeat: Heartbeat = FAST) -> dict:
    """Until the node lifecycle controller has turned the released Node's Ready
    Unknown; returns that condition.

    kwok can miss a Node leaving its selector when its watch restarts under
    load, and then renews the Lease as if nothing happened: a Lease renewed
    after the release is taken back into kwok's hands and released again,
    which kwok sees as two fresh events."""
    released = datetime.now(timezone.utc)
    kicked = [released]

    def check() -> dict | None:
        condition = ready(api.get_or_none(f"{NODES}/{name}"))
        if condition.get("status") == "Unknown":
            return condition
        now = datetime.now(timezone.utc)
        # A renewal more than a moment after the last release (one in flight at that time is not one).
        settled = kicked[-1] + timedelta(seconds=2)
        if (now - kicked[-1]).total_seconds() > heartbeat.renewal_seconds + 2 and _renewed_since(api, name, settled):
            manage(api, name)
            release(api, name)
            kicked.append(now)
        return None
    # A deadline, not a measurement: slack for a kube-controller-manager slowed by a busy machine.
    timeout = heartbeat.grace_seconds + heartbeat.monitor_period_seconds + 60
    return wait_for(check, f"Node {name} Ready=Unknown", timeout=timeout, interval=0.5)


def _renewed_since(api: AdminApi, name: str, since: datetime) -> bool:
    renewed = ((api.get_or_none(f"{LEASES}/{name}") or {}).get("spec") or {}).get("renewTime")
    return bool(renewed) and datetime.fromisoformat(renewed.replace("Z", "+00:00")) > since
