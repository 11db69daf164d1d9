"""`python -m devcluster up|down|status` — the local stack behind `make up`/`make down`."""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time

from . import kwok, throttling
from .cluster import Cluster, configure_logging
from .layout import Layout

log = logging.getLogger("devcluster")


def _running_launcher(layout: Layout) -> int | None:
    try:
        pid = int(layout.pid_file.read_text().strip())
        # A pid file left by a killed launcher may name a recycled pid.
        cmdline = open(f"/proc/{pid}/cmdline", "rb").read()
    except (OSError, ValueError):
        return None
    return pid if b"devcluster" in cmdline else None


def up(args: argparse.Namespace) -> int:
    layout = Layout()
    other = _running_launcher(layout)
    if other:
        log.error("a devcluster already runs (pid %s); `make down` stops it", other)
        return 1
    def request_stop(_signum, _frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGHUP, request_stop)
    layout.workdir.mkdir(parents=True, exist_ok=True)
    layout.pid_file.write_text(str(os.getpid()))
    from . import demo
    cluster = Cluster(layout, port_mode="preferred", hook_env={} if args.no_demo else demo.HOOK_ENV)
    try:
        cluster.start()
        if not args.no_demo:
            demo.create(cluster)
        _write_env_file(cluster)
        _print_summary(cluster, with_demo=not args.no_demo)
        while True:
            time.sleep(1)
            cluster.check_running()
    except KeyboardInterrupt:
        log.info("stopping")
        return 0
    except Exception as exc:
        log.error("%s", exc)
        return 1
    finally:
        # A second Ctrl-C must not cut the clean-up short.
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        cluster.stop()
        layout.pid_file.unlink(missing_ok=True)
        log.info("stopped; logs kept in %s", layout.logs)


def down(_args: argparse.Namespace) -> int:
    layout = Layout()
    pid = _running_launcher(layout)
    if pid is None:
        print("devcluster: not running")
        layout.pid_file.unlink(missing_ok=True)
        return 0
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if _running_launcher(layout) is None:
            print("devcluster: stopped")
            return 0
        time.sleep(0.3)
    print(f"devcluster: launcher {pid} did not stop within 60s", file=sys.stderr)
    return 1


def status(_args: argparse.Namespace) -> int:
    layout = Layout()
    if _running_launcher(layout) is None or not layout.state_file.exists():
        print("devcluster: not running")
        return 1
    print(json.dumps(json.loads(layout.state_file.read_text()), indent=2))
    return 0


def targets(_args: argparse.Namespace) -> int:
    layout = Layout()
    if _running_launcher(layout) is None or not layout.state_file.exists():
        print("devcluster: not running")
        return 1
    from . import demo
    state = json.loads(layout.state_file.read_text())
    env = {"AWS_ENDPOINT_URL": state["moto"], "AWS_REGION": "us-east-1"}
    print(demo.show_targets(layout.workdir, env))
    return 0


def _write_env_file(cluster: Cluster) -> None:
    lines = [f"export KUBECONFIG={cluster.kubeconfig}"]
    lines += [f"export {k}={v}" for k, v in cluster.aws_env().items()]
    lines.append(f"export PROMETHEUS_URL={cluster.prometheus_url}")
    lines.append(f"export PATH={cluster.layout.bin_dir}:$PATH")
    cluster.layout.env_file.write_text("\n".join(lines) + "\n")


def _print_summary(cluster: Cluster, *, with_demo: bool) -> None:
    kc = os.path.relpath(cluster.kubeconfig)
    kubectl = os.path.relpath(cluster.layout.binary("kubectl"))
    env = os.path.relpath(cluster.layout.env_file)
    print(f"""
devcluster is up (Ctrl-C or `make down` stops it); logs in {os.path.relpath(cluster.layout.logs)}/
  API server   {cluster.api_server}   kubeconfig {kc}
  moto (AWS)   {cluster.moto_endpoint}   {_throttling_line(cluster)}
  hook server  {cluster.hook_server.url}   metrics {cluster.hook_server.metrics_url}/metrics
  Prometheus   {cluster.prometheus_url}   (API; scrapes the hook server and Metacontroller, nodewarden's alerts loaded:
               {cluster.prometheus_url}/api/v1/alerts, promtool query instant {cluster.prometheus_url} 'nodewarden_events_total')
  {cluster.metacontroller.describe()}
  kwok {cluster.kwok.release} keeps the Nodes labelled {kwok.SELECTOR} alive (docs/local-stack.md)
  `source {env}` sets KUBECONFIG, AWS_* and PATH (kubectl, kustomize) for this shell.
""", flush=True)
    if with_demo:
        from . import demo
        print(demo.hints(cluster, kubectl=kubectl, kubeconfig=kc), flush=True)


def _throttling_line(cluster: Cluster) -> str:
    if cluster.aws_throttling:
        return (f"throttles like AWS: the token buckets of hooks/aws_rate_buckets.py, faults on "
                f"{throttling.CONTROL_PATH} (docs/local-stack.md)")
    return f"never throttles ({throttling.ENVIRONMENT_SWITCH}=off)"


def main(argv: list[str] | None = None) -> int:
    configure_logging()
    parser = argparse.ArgumentParser(prog="python -m devcluster", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    up_parser = sub.add_parser("up", help="start the local stack and keep it running")
    up_parser.add_argument("--no-demo", action="store_true", help="skip the demo nodes and load balancers")
    up_parser.set_defaults(func=up)
    sub.add_parser("down", help="stop a running `up`").set_defaults(func=down)
    sub.add_parser("status", help="print ports and pids of a running `up`").set_defaults(func=status)
    sub.add_parser("targets", help="show the demo load balancers' members").set_defaults(func=targets)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
