"""A local control plane: etcd, the Kubernetes control plane, Metacontroller,
kwok, moto, the hook server, the kubelet stand-in and Prometheus, started in order, each
waited for, all stopped on exit.

    with Cluster(Layout(workdir=...)) as cluster:
        cluster.kubectl("get", "nodes")

`make up` and the e2e tests both use this class.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Mapping

import requests
import yaml

from hooks import credentials

from . import components, kubeconfig, kwok, manifests, pki, prometheus, throttling
from . import metacontroller as mc
from .api import AdminApi
from .components import Ports
from .hook_endpoint import HookEndpoint
from .kubelet import LOG_NAME as KUBELET_LOG, KubeletStandin
from .layout import Layout
from .procs import Supervisor
from .waits import free_port, http_ok, wait_until

log = logging.getLogger("devcluster")

REGION = "us-east-1"
CLUSTER_NAME = "devcluster"


class MissingBinaries(RuntimeError):
    pass


class KubectlFailed(RuntimeError):
    pass


@dataclass
class Cluster:
    layout: Layout = field(default_factory=Layout)
    # "preferred": the well-known ports when free (make up); "dynamic": any free port (tests).
    port_mode: str = "dynamic"
    # Extra environment for the hook server (NODEWARDEN_* settings).
    hook_env: Mapping[str, str] = field(default_factory=dict)
    ports: Ports | None = None
    hooks_namespace: str = "nodewarden-system"
    hooks_service_account: str = "nodewarden"
    timings: dict[str, float] = field(default_factory=dict)
    # The kubelet stand-in (devcluster/kubelet.py): seconds a Machine's instance
    # runs before its Node registers.
    kubelet_boot_delay: float = 1.0
    # kwok's Lease and kube-controller-manager's grace period (devcluster/kwok.py).
    heartbeat: kwok.Heartbeat = kwok.FAST
    # kube-scheduler's NodeResourcesFit scoring: LeastAllocated (its default) or MostAllocated (bin packing).
    scheduler_scoring: str = components.LEAST_ALLOCATED
    # moto behind AWS's token buckets (devcluster/throttling.py), on unless NODEWARDEN_DEV_AWS_THROTTLING=off;
    # throttling_control turns them off and on while the stack runs.
    aws_throttling: bool = field(default_factory=throttling.wanted_by_environment)

    def __post_init__(self) -> None:
        self.supervisor = Supervisor(self.layout.logs)
        self._children: dict[str, object] = {}
        self.kubelet_standin: KubeletStandin | None = None
        # Set when the running Metacontroller can authenticate itself (v4.16+): HTTPS and a token.
        self.hook_credentials: pki.HookCredentials | None = None
        self._second_hook_server: HookEndpoint | None = None

    # -- public ------------------------------------------------------------
    @property
    def kubeconfig(self) -> Path:
        return self.layout.kubeconfig

    @property
    def api_server(self) -> str:
        return f"https://127.0.0.1:{self.ports.apiserver}"

    @property
    def moto_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports.moto}"

    @property
    def throttling_control(self) -> throttling.ThrottlingControl:
        """The control API of the throttling in front of moto (with ``aws_throttling``): buckets off and on,
        faults, bucket counts."""
        return throttling.ThrottlingControl(self.moto_endpoint)

    @property
    def hook_server(self) -> HookEndpoint:
        """The stack's own hook server, the one Metacontroller calls."""
        return HookEndpoint(self.ports.hooks, self.ports.hooks_metrics, self.hook_credentials)

    @property
    def prometheus_url(self) -> str:
        """Prometheus' HTTP API; it scrapes the hook server and Metacontroller, with the alerts loaded."""
        return f"http://127.0.0.1:{self.ports.prometheus}"

    def authenticated_hook_server(self) -> HookEndpoint:
        """A hook server behind the door Metacontroller v4.16+ passes (HTTPS, a bearer token): the
        stack's own where it authenticates; otherwise a second one beside it, started once, set up as
        the stack sets its own up for v4 (the same API server identity, AWS and settings) and called
        by nobody but the caller, so both lines in front of the hooks can be tested on any release."""
        if self.hook_credentials:
            return self.hook_server
        if self._second_hook_server is None:
            credentials = pki.hook_credentials(self.layout.workdir / "second-hook-credentials")
            endpoint = HookEndpoint(free_port(), free_port(), credentials)
            self._run_hook_server("hooks-authenticated", endpoint, self.layout.workdir / "second-hook-metrics")
            self._second_hook_server = endpoint
        return self._second_hook_server

    def aws_env(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.moto_endpoint,
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
        }

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                kubeconfig_path: Path | None = None) -> subprocess.CompletedProcess:
        argv = [str(self.layout.binary("kubectl")),
                f"--kubeconfig={kubeconfig_path or self.kubeconfig}", *args]
        result = subprocess.run(argv, input=input, capture_output=True, text=True)
        if check and result.returncode != 0:
            raise KubectlFailed(f"kubectl {' '.join(args)} exited {result.returncode}: {result.stderr.strip()}")
        return result

    def __enter__(self) -> "Cluster":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        missing = self.layout.missing_binaries()
        if missing:
            raise MissingBinaries(
                f"missing in {self.layout.bin_dir}: {', '.join(missing)}; run `make controlplane-bins`"
            )
        self.metacontroller = mc.read(self.layout.bin_dir)
        log.info("%s", self.metacontroller.describe())
        self.kwok = kwok.read(self.layout.bin_dir)
        self._fresh_workdir()
        self.ports = self._allocate_ports()
        self._pki = pki.generate(self.layout.pki_dir)

        self._step("etcd", self._start_etcd)
        self._step("kube-apiserver", self._start_apiserver)
        self._step("moto", self._start_moto)
        # Every kind a controller watches exists before Metacontroller starts and
        # before its controllers are applied: a controller created before its
        # kinds exist fails and is retried with a growing backoff.
        self._step("manifests", self._apply_manifests)
        self._step("metacontroller", self._start_metacontroller)
        self._step("metacontroller controllers", self._apply_controllers)
        # After the CRDs: kube-controller-manager's garbage collector looks for
        # new resource types only every 30 s, and Attachments are owned by Nodes.
        self._step("controllers", self._start_kcm_and_scheduler)
        self._step("kwok", self._start_kwok)
        self._step("hook server", self._start_hooks)
        self._step("kubelet stand-in", self._start_kubelet_standin)
        self._step("prometheus", self._start_prometheus)
        self._step("health", self._wait_all_healthy)
        self._write_state()

    def stop(self) -> None:
        # First, while the API server and moto still answer its last calls.
        if self.kubelet_standin is not None:
            self.kubelet_standin.stop()
            self.kubelet_standin = None
        self.supervisor.stop_all()
        for path in (self.layout.state_file,):
            path.unlink(missing_ok=True)

    def check_running(self) -> None:
        """Raise if any component has exited."""
        self.supervisor.check_all()
        if self.kubelet_standin is not None:
            self.kubelet_standin.check()

    # -- steps ---------------------------------------------------------------
    def _step(self, name: str, fn) -> None:
        started = time.monotonic()
        log.info("starting %s", name)
        fn()
        self.timings[name] = round(time.monotonic() - started, 2)
        log.info("%s ready in %.1fs", name, self.timings[name])

    def _fresh_workdir(self) -> None:
        self.layout.workdir.mkdir(parents=True, exist_ok=True)
        for stale in (self.layout.etcd_data, self.layout.pki_dir, self.layout.logs,
                      self.layout.workdir / "metrics", self.layout.prometheus_dir):
            shutil.rmtree(stale, ignore_errors=True)
        self.layout.logs.mkdir(parents=True)

    def _allocate_ports(self) -> Ports:
        chosen: dict[str, int] = {}
        for name, preferred in Ports.PREFERRED.items():
            port = free_port(preferred if self.port_mode == "preferred" else None)
            while port in chosen.values():
                port = free_port()
            chosen[name] = port
        return Ports(**chosen)

    def _start(self, name: str, argv: list[str], **kwargs):
        child = self.supervisor.start(name, argv, **kwargs)
        self._children[name] = child
        return child

    def _start_etcd(self) -> None:
        child = self._start("etcd", components.etcd(self.layout, self.ports))
        wait_until(http_ok(f"http://127.0.0.1:{self.ports.etcd_client}/health", expect='"true"'),
                   "etcd", timeout=30, watch=[child])

    def _admin_tls(self) -> dict:
        return {"verify": str(self._pki.ca_cert),
                "cert": (str(self._pki.admin_cert), str(self._pki.admin_key))}

    def _start_apiserver(self) -> None:
        child = self._start("kube-apiserver", components.kube_apiserver(self.layout, self.ports, self._pki))
        wait_until(http_ok(f"{self.api_server}/readyz", **self._admin_tls()),
                   "kube-apiserver", timeout=90, watch=[child])
        kubeconfig.write_admin(self.layout.kubeconfig, self.api_server, self._pki.ca_cert,
                               self._pki.admin_cert, self._pki.admin_key)

    def _start_kcm_and_scheduler(self) -> None:
        # Their health is checked at the end, so they start while the rest comes up.
        self._start("kube-controller-manager",
                    components.kube_controller_manager(self.layout, self.ports, self._pki, self.heartbeat))
        self._start("kube-scheduler", components.kube_scheduler(self.layout, self.ports, self.scheduler_scoring))

    def _start_kwok(self) -> None:
        source = manifests.module_source_dir(self.layout, self.kwok.source, self.kwok.module,
                                             self.layout.record("kwok"))
        # kwok also reads ~/.kwok/kwok.yaml when it exists; its work dir is ours instead.
        env = {**os.environ, "KWOK_WORKDIR": str(self.layout.workdir / "kwok")}
        argv = components.kwok(self.layout, self.ports, kwok.stage_files(source), self.heartbeat)
        child = self._start("kwok", argv, env=env)
        wait_until(http_ok(f"http://127.0.0.1:{self.ports.kwok}/healthz"), "kwok", timeout=60, watch=[child])

    def _start_moto(self) -> None:
        child = self._start("moto", components.moto(self.ports, self.aws_throttling))
        wait_until(http_ok(f"{self.moto_endpoint}/moto-api/"), "moto", timeout=60, watch=[child])

    def _start_metacontroller(self) -> None:
        child = self._start("metacontroller",
                            components.metacontroller(self.layout, self.ports, self.metacontroller))
        # Both releases serve /metrics where the launcher told them to
        # (--debug-addr in v1, --metrics-address in v4); v4 also has /readyz.
        wait_until(http_ok(f"http://127.0.0.1:{self.ports.metacontroller_metrics}/metrics"),
                   "metacontroller", timeout=60, watch=[child])
        if not self.metacontroller.legacy_flags:
            wait_until(http_ok(f"http://127.0.0.1:{self.ports.metacontroller_health}/readyz"),
                       "metacontroller /readyz", timeout=60, watch=[child])

    def _apply_manifests(self) -> None:
        """Metacontroller's CRDs, CAPA's, and ours with everything else; the controllers wait for _apply_controllers."""
        crds = manifests.metacontroller_crds(self.layout, self.metacontroller)
        docs = manifests.kustomize_build(self.layout)
        # Our controllers ship `version: v2` hooks and endpointConfigs (a token,
        # and the CA to verify the hook server with); v1.5.20's CRDs have
        # neither (they would reject them), so they go only where the CRDs lack them.
        dropped = manifests.drop_unknown_fields(docs, crds)
        if dropped:
            fields = sorted({d.split(" ", 1)[1].split(".")[-1] for d in dropped})
            log.warning("Metacontroller %s's CRDs lack %s; dropped from the controllers (%d places; "
                        "docs/local-stack.md)", self.metacontroller.release, ", ".join(fields), len(dropped))
        accounts = [d for d in docs if d.get("kind") == "ServiceAccount"]
        if accounts:
            self.hooks_service_account = accounts[0]["metadata"]["name"]
            self.hooks_namespace = accounts[0]["metadata"].get("namespace", self.hooks_namespace)
        secrets = self._hook_auth(docs)
        manifests.point_hooks_at(docs, self.hook_server.url)
        (self.layout.workdir / "manifests.yaml").write_text(manifests.to_yaml(docs))
        rest, self._controllers = manifests.split_controllers(docs)
        rest = crds + manifests.upstream_crds(self.layout, manifests.CAPA_CRDS) + rest + secrets
        self.kubectl("apply", "--server-side", "--field-manager=devcluster", "-f", "-",
                     input=manifests.to_yaml(rest))
        names = [f"crd/{d['metadata']['name']}" for d in rest if d.get("kind") == "CustomResourceDefinition"]
        if names:
            self.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names)

    def _hook_auth(self, docs: list[dict]) -> list[dict]:
        """Authenticated HTTPS hooks when the controllers kept their endpointConfigs (Metacontroller
        v4.16+), as the base ships them; the Secrets those name, made as `nodewarden credentials` does."""
        if not any((d.get("spec") or {}).get("endpointConfigs") for d in docs
                   if d.get("kind") in manifests.CONTROLLER_KINDS):
            log.warning("hook authentication is off: Metacontroller %s cannot send credentials to a hook, "
                        "so the hook server takes plain HTTP from anyone on 127.0.0.1 (docs/local-stack.md)",
                        self.metacontroller.release)
            return []
        self.hook_credentials = pki.hook_credentials(self.layout.workdir / "hook-credentials")
        log.info("hook authentication is on: HTTPS, and Metacontroller sends a bearer token")
        creds = self.hook_credentials
        return [credentials.token_secret(self.hooks_namespace, creds.token.read_text().strip()),
                credentials.tls_secret(self.hooks_namespace, {"tls.crt": creds.serving_cert.read_bytes(),
                                                              "tls.key": creds.serving_key.read_bytes(),
                                                              "ca.crt": creds.ca_cert.read_bytes()})]

    def _apply_controllers(self) -> None:
        self.kubectl("apply", "--server-side", "--field-manager=devcluster", "-f", "-",
                     input=manifests.to_yaml(self._controllers))

    def _start_hooks(self) -> None:
        token = self.kubectl("create", "token", self.hooks_service_account,
                             f"--namespace={self.hooks_namespace}", "--duration=720h").stdout.strip()
        kubeconfig.write_token(self.layout.hooks_kubeconfig, self.api_server, self._pki.ca_cert,
                               f"system:serviceaccount:{self.hooks_namespace}:{self.hooks_service_account}",
                               token)
        self._run_hook_server("hooks", self.hook_server, self.layout.workdir / "metrics")

    def _run_hook_server(self, name: str, endpoint: HookEndpoint, metrics_dir: Path) -> None:
        env = {
            **os.environ,
            **self.aws_env(),
            "NODEWARDEN_CLUSTER_NAME": CLUSTER_NAME,
            "NODEWARDEN_NAMESPACE": self.hooks_namespace,
            "KUBECONFIG": str(self.layout.hooks_kubeconfig),
            # As in the image: /metrics adds up every gunicorn worker.
            "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
            "PYTHONUNBUFFERED": "1",
            # The hooks package from this checkout, installed or not.
            "PYTHONPATH": os.pathsep.join(filter(None, [str(self.layout.repo), os.environ.get("PYTHONPATH")])),
            "NODEWARDEN_METRICS_PORT": str(endpoint.metrics_port),
            # The stack's one hook server is all the processes that share the account's buckets.
            "NODEWARDEN_AWS_RATE_PROCESSES": os.environ.get("NODEWARDEN_WORKERS", "2"),
            **(endpoint.credentials.server_env() if endpoint.credentials else {}),
            **self.hook_env,
        }
        argv = components.hook_server(self.layout.repo, f"127.0.0.1:{endpoint.port}",
                                      f"127.0.0.1:{endpoint.metrics_port}")
        child = self._start(name, argv, env=env, cwd=self.layout.workdir)
        wait_until(http_ok(f"{endpoint.metrics_url}/readyz"), name, timeout=60, watch=[child])

    def _start_kubelet_standin(self) -> None:
        self.kubelet_standin = KubeletStandin.for_env(
            AdminApi(self.kubeconfig), self.aws_env(), CLUSTER_NAME,
            boot_delay=self.kubelet_boot_delay, log_path=self.layout.logs / KUBELET_LOG).start()

    def _start_prometheus(self) -> None:
        where = self.layout.prometheus_dir
        rules = prometheus.write_rules(where / "rules.yaml")
        config = prometheus.config(rules, {
            "nodewarden": f"127.0.0.1:{self.hook_server.metrics_port}",
            "metacontroller": f"127.0.0.1:{self.ports.metacontroller_metrics}",
        })
        config_file = where / "prometheus.yml"
        config_file.write_text(yaml.safe_dump(config, sort_keys=False))
        child = self._start("prometheus", prometheus.command(
            self.layout.binary("prometheus"), config_file, where / "data", self.ports.prometheus))
        wait_until(http_ok(f"{self.prometheus_url}/-/ready"), "prometheus", timeout=60, watch=[child])

    def _wait_all_healthy(self) -> None:
        for name, port in (("kube-controller-manager", self.ports.controller_manager),
                           ("kube-scheduler", self.ports.scheduler)):
            wait_until(http_ok(f"https://127.0.0.1:{port}/healthz", verify=False), name,
                       timeout=60, watch=[self._children[name]])
        self.check_running()

    def _write_state(self) -> None:
        state = {
            "launcher_pid": os.getpid(),
            "metacontroller": self.metacontroller.release,
            "kwok": self.kwok.release,
            "ports": asdict(self.ports),
            "kubeconfig": str(self.kubeconfig),
            "moto": self.moto_endpoint,
            "aws_throttling": "on" if self.aws_throttling else "off",
            "hooks": self.hook_server.url,
            "hooks_metrics": self.hook_server.metrics_url,
            "hooks_auth": "bearer token over TLS" if self.hook_credentials else "off",
            "prometheus": self.prometheus_url,
            "children": {c.name: c.pid for c in self.supervisor.children},
        }
        self.layout.state_file.write_text(json.dumps(state, indent=2))


def configure_logging() -> None:
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s devcluster %(message)s", datefmt="%H:%M:%S")
