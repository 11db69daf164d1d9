"""Command lines of the control-plane components, all bound to 127.0.0.1."""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from . import kwok as kwok_nodes
from .layout import Layout
from .metacontroller import Build
from .pki import Pki

# What kube-controller-manager runs: what pods and nodes need to behave as in
# a real cluster (ownership, namespaces, tokens, pod GC, evictions and PDBs),
# plus node lifecycle and attach/detach for the out-of-service taint.
KCM_CONTROLLERS = (
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "clusterrole-aggregation-controller",
    "pod-garbage-collector-controller",
    "taint-eviction-controller",
    "node-lifecycle-controller",
    "persistentvolume-attach-detach-controller",
    "disruption-controller",
    "replicaset-controller",
    "deployment-controller",
    "statefulset-controller",
)

SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"


@dataclass(frozen=True)
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int
    metacontroller_metrics: int
    moto: int
    hooks: int
    # The hook server's /metrics, /healthz and /readyz, plain HTTP (hooks may be HTTPS).
    hooks_metrics: int
    # Metacontroller v4's /healthz and /readyz (v1.5.20 has none).
    metacontroller_health: int
    # kwok's server: /healthz once its controllers run.
    kwok: int
    # Prometheus: its API (and /-/ready); it scrapes the hook server and Metacontroller.
    prometheus: int = 0

    # `make up` prefers these, so a user's AWS_ENDPOINT_URL or bookmarks keep working.
    PREFERRED = {
        "etcd_client": 2379, "etcd_peer": 2380, "apiserver": 6443,
        "controller_manager": 10257, "scheduler": 10259,
        "metacontroller_metrics": 9999, "moto": 5000, "hooks": 8080, "hooks_metrics": 8082,
        "metacontroller_health": 8081, "kwok": 10247, "prometheus": 9090,
    }


def etcd(layout: Layout, ports: Ports) -> list[str]:
    client = f"http://127.0.0.1:{ports.etcd_client}"
    peer = f"http://127.0.0.1:{ports.etcd_peer}"
    return [
        str(layout.binary("etcd")),
        "--name=devcluster",
        f"--data-dir={layout.etcd_data}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=devcluster={peer}",
        # A throw-away cluster: durability buys nothing, fsync costs latency.
        "--unsafe-no-fsync",
        "--log-level=warn",
    ]


def kube_apiserver(layout: Layout, ports: Ports, pki: Pki) -> list[str]:
    return [
        str(layout.binary("kube-apiserver")),
        f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={ports.apiserver}",
        f"--tls-cert-file={pki.serving_cert}",
        f"--tls-private-key-file={pki.serving_key}",
        f"--client-ca-file={pki.ca_cert}",
        "--authorization-mode=RBAC",
        f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
        f"--service-account-key-file={pki.sa_pub}",
        f"--service-account-signing-key-file={pki.sa_key}",
        "--service-cluster-ip-range=10.96.0.0/16",
        # No kubelet or Service traffic here, and loopback is not a valid
        # endpoint for the `kubernetes` Service.
        "--endpoint-reconciler-type=none",
        "--allow-privileged=true",
        "--profiling=false",
        "--v=1",
    ]


def _kube_component(layout: Layout, binary: str, port: int) -> list[str]:
    """Flags kube-controller-manager and kube-scheduler share: admin kubeconfig, loopback, no election."""
    kubeconfig = str(layout.kubeconfig)
    return [
        str(layout.binary(binary)),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        "--leader-elect=false",
        "--v=1",
    ]


def kube_controller_manager(layout: Layout, ports: Ports, pki: Pki,
                            heartbeat: kwok_nodes.Heartbeat = kwok_nodes.FAST) -> list[str]:
    return _kube_component(layout, "kube-controller-manager", ports.controller_manager) + [
        f"--controllers={','.join(KCM_CONTROLLERS)}",
        # Its default of 20 QPS holds back the node lifecycle controller when
        # thousands of Nodes change at once (taints, Unknown conditions);
        # large clusters raise it, and so do we.
        "--kube-api-qps=100",
        "--kube-api-burst=200",
        # How long a Node's Lease may go unrenewed before it turns Unknown
        # (kwok renews them: devcluster/kwok.py Heartbeat).
        f"--node-monitor-grace-period={heartbeat.grace_seconds}s",
        f"--node-monitor-period={heartbeat.monitor_period_seconds}s",
        f"--service-account-private-key-file={pki.sa_key}",
        f"--root-ca-file={pki.ca_cert}",
    ]


LEAST_ALLOCATED, MOST_ALLOCATED = "LeastAllocated", "MostAllocated"
SCHEDULER_SCORINGS = (LEAST_ALLOCATED, MOST_ALLOCATED)


def kube_scheduler(layout: Layout, ports: Ports, scoring: str = LEAST_ALLOCATED) -> list[str]:
    """kube-scheduler as it ships, or with the bin-packing profile: NodeResourcesFit scores a Node by how
    much of its cpu and memory would be allocated (MostAllocated), so pods fill the Nodes there are before
    spreading onto new ones (docs/machines.md says why a provisioning pool wants it)."""
    if scoring not in SCHEDULER_SCORINGS:
        raise ValueError(f"kube-scheduler scoring {scoring!r} is not one of {SCHEDULER_SCORINGS}")
    flags = _kube_component(layout, "kube-scheduler", ports.scheduler)
    if scoring == LEAST_ALLOCATED:
        return flags
    config = layout.workdir / "kube-scheduler.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps(bin_packing_profile(str(layout.kubeconfig)), indent=2))
    # With --config, the component's kubeconfig and leader election come from the file.
    return [f for f in flags if not f.startswith(("--kubeconfig=", "--leader-elect="))] + [f"--config={config}"]


def bin_packing_profile(kubeconfig: str) -> dict:
    """A KubeSchedulerConfiguration whose default profile scores Nodes MostAllocated on cpu and memory."""
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": kubeconfig}, "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": "default-scheduler", "pluginConfig": [{
            "name": "NodeResourcesFit", "args": {"scoringStrategy": {
                "type": MOST_ALLOCATED, "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]}}}]}],
    }


def metacontroller(layout: Layout, ports: Ports, build: Build) -> list[str]:
    """The flags of the release that was built (``build``, from .bin/metacontroller.version)."""
    qps = _whole_env("NODEWARDEN_DEV_METACONTROLLER_QPS", 100)
    common = [
        # New controllers and CRDs are found within a couple of seconds.
        "--discovery-interval=2s",
        # The client-go default (5 QPS) would queue the writes of a busy test
        # and add latency that a real deployment tunes away.
        f"--client-go-qps={qps}",
        f"--client-go-burst={2 * qps}",
        f"--workers={_whole_env('NODEWARDEN_DEV_METACONTROLLER_WORKERS', 5)}",
    ]
    # 4 logs Metacontroller's calls to the API server (what the e2e tests are debugged with); a benchmark
    # sets 0, a production install's level.
    verbosity = _whole_env("NODEWARDEN_DEV_METACONTROLLER_VERBOSITY", 4)
    if build.legacy_flags:
        return [
            str(layout.binary("metacontroller")),
            # v1.5.20 overwrites --kubeconfig with this (deprecated) flag's
            # value even when unset, so this is the one that works.
            f"--client-config-path={layout.kubeconfig}",
            f"--debug-addr=127.0.0.1:{ports.metacontroller_metrics}",
            *common,
            f"--v={verbosity}",
        ]
    return [
        str(layout.binary("metacontroller")),
        f"--kubeconfig={layout.kubeconfig}",
        f"--metrics-address=127.0.0.1:{ports.metacontroller_metrics}",
        # Its default, :8081 on every interface, would collide between stacks.
        f"--health-probe-bind-address=127.0.0.1:{ports.metacontroller_health}",
        *common,
        # Metacontroller's calls to the API server at 4, as --v=4 in v1; "info" at 0.
        f"--zap-log-level={verbosity if verbosity else 'info'}",
    ]


def _whole_env(name: str, default: int) -> int:
    """A small whole number from the environment (a local-stack knob), or the default when unset."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) > 1000:
        raise ValueError(f"{name}={raw!r} is not a whole number from 0 to 1000")
    return int(raw)


def kwok(layout: Layout, ports: Ports, stages: list[Path],
         heartbeat: kwok_nodes.Heartbeat = kwok_nodes.FAST) -> list[str]:
    """kwok keeps the Nodes labelled kwok.x-k8s.io/node=fake alive (devcluster/kwok.py)."""
    return [
        str(layout.binary("kwok")),
        f"--kubeconfig={layout.kubeconfig}",
        f"--manage-nodes-with-label-selector={kwok_nodes.SELECTOR}",
        f"--node-lease-duration-seconds={heartbeat.lease_seconds}",
        f"--cidr={kwok_nodes.POD_CIDR}",
        f"--node-ip={kwok_nodes.NODE_IP}",
        # Its /healthz; with no address kwok serves nothing.
        f"--server-address=127.0.0.1:{ports.kwok}",
        *(f"--config={path}" for path in stages),
    ]


def moto(ports: Ports, throttled: bool) -> list[str]:
    """moto's server, its routing remembered per host, behind AWS's throttling when ``throttled``
    (devcluster/moto_server.py)."""
    return moto_argv(ports.moto, throttled)


def moto_argv(port: int, throttled: bool | None = None) -> list[str]:
    """Run by path, whatever the working directory; ``throttled`` None leaves it to the environment
    (NODEWARDEN_DEV_AWS_THROTTLING)."""
    argv = [sys.executable, str(Path(__file__).with_name("moto_server.py")), "-H", "127.0.0.1", "-p", str(port)]
    if throttled is not None:
        argv.append("--throttling" if throttled else "--no-throttling")
    return argv


def hook_server(repo: Path, *binds: str) -> list[str]:
    """gunicorn with the image's settings (gunicorn.conf.py), listening on ``binds`` instead."""
    argv = [sys.executable, "-m", "gunicorn"]
    config = repo / "gunicorn.conf.py"
    if config.exists():
        argv.append(f"--config={config}")
    return argv + [
        *(f"--bind={bind}" for bind in binds),
        # Its default control socket lives in $HOME: two stacks would collide.
        "--no-control-socket",
        "hooks.app:create_app()",
    ]
