"""gunicorn settings for the hook server (used by the image and `make up`)."""
import faulthandler
import os
import pathlib
import ssl
import sys

from hooks import serving
from hooks.config import load_settings

_settings = load_settings()  # a wrong value stops the server here, naming the variable

bind = [os.environ.get("NODEWARDEN_BIND", "0.0.0.0:8080")]
# A second listener for /metrics alone (the app refuses hooks there), so a
# NetworkPolicy can admit Prometheus without admitting it to the hooks.
if _settings.metrics_port:
    bind.append(f"0.0.0.0:{_settings.metrics_port}")
workers = int(os.environ.get("NODEWARDEN_WORKERS", "2"))
threads = int(os.environ.get("NODEWARDEN_THREADS", "4"))
# gthread, whose threads get a connection only with its whole request head: a client that stalls its TLS
# handshake or its head holds no thread, and is closed after NODEWARDEN_CLIENT_TIMEOUT_SECONDS (hooks/serving.py).
worker_class = "hooks.serving.HookWorker"
# TLS on the hook port when a certificate is given (hooks/serving.py): the files
# are read again when they change, and the metrics listener stays plain HTTP.
if _settings.tls_cert_file:
    certfile = _settings.tls_cert_file
    keyfile = _settings.tls_key_file
    ssl_context = serving.ssl_context
    if _settings.tls_client_ca_file:
        ca_certs = _settings.tls_client_ca_file
        cert_reqs = ssl.CERT_OPTIONAL  # a presented certificate must verify; none falls to the token check
# Metacontroller's hook timeout is 10 s; a hook taking longer is already lost.
timeout = 30
graceful_timeout = 20
keepalive = 30
accesslog = None  # the app logs each request as JSON itself
worker_tmp_dir = "/dev/shm" if pathlib.Path("/dev/shm").is_dir() else None


def on_starting(server):
    # prometheus-client multiprocess mode needs an empty directory at start.
    metrics_dir = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if metrics_dir:
        path = pathlib.Path(metrics_dir)
        path.mkdir(parents=True, exist_ok=True)
        for stale in path.glob("*.db"):
            stale.unlink()


def post_worker_init(worker):
    # A native crash (SIGSEGV in a C extension) leaves every thread's Python stack in the log.
    faulthandler.enable()
    from hooks import runtime, warmup
    from hooks.aws import lb_discovery

    # The app, made before this, has imported every controller. On a thread: the AWS clients, the API
    # server connection and the policies' copy (/readyz waits for them); and the load-balancer index kept
    # fresh for the first step of every detach.
    warmup.start()
    lb_discovery.keep_fresh(runtime.current())


def worker_exit(server, worker):
    # Deregistrations carried on after their call answered record themselves when they succeed; a worker
    # that stops lets them finish, within its graceful timeout (one left undone is redone by the next call).
    # Nothing is imported here: a process that has not loaded the actuators (the master, or a worker whose
    # app was not made) has nothing in the background.
    drain_background = getattr(sys.modules.get("hooks.actuators"), "drain_background", None)
    if drain_background is not None:
        drain_background(max(1.0, graceful_timeout - 5))


def child_exit(server, worker):
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
