"""Node heartbeats without a kubelet: each live Node's Lease renewed on a timer.

Since node leases, the node lifecycle controller takes a renewed Lease in
kube-node-lease as the kubelet's heartbeat: a Node whose Ready condition was
posted once stays Ready while its Lease is renewed, and turns Unknown after
the grace period once renewals stop, exactly as when a kubelet goes silent.
The fencing scenarios (devcluster/failover.py) and the kubelet stand-in
(devcluster/kubelet.py) both keep their Nodes alive with this one class.
"""
from __future__ import annotations

import datetime as dt
import threading

from .api import AdminApi, ApiError

LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"


def now_rfc3339() -> str:
    """Now, with microseconds (a Lease's renewTime is a MicroTime)."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def now_stamp() -> str:
    """Now, to the second (a condition's heartbeat and transition times)."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Heartbeats:
    """Renews each live node's Lease every ``period`` seconds, like a kubelet."""

    def __init__(self, api: AdminApi, period: float = 5.0):
        self.api, self.period = api, period
        self._nodes: dict[str, str] = {}  # name -> uid
        self._lock = threading.Lock()
        # Held through each renewal, so once silence() returns no beat of that node is in flight.
        self._beating = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="node-heartbeats", daemon=True)

    def start(self) -> "Heartbeats":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)

    def add(self, name: str, uid: str) -> None:
        """Start renewing the node's Lease (the first renewal happens now)."""
        with self._lock:
            self._nodes[name] = uid
        self._renew(name, uid)

    def silence(self, name: str) -> None:
        """Stop renewing the node's Lease; the Lease itself stays. No renewal
        of it happens after this returns."""
        with self._beating, self._lock:
            self._nodes.pop(name, None)

    def beating(self, name: str) -> bool:
        with self._lock:
            return name in self._nodes

    def _renew(self, name: str, uid: str) -> None:
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": name, "namespace": "kube-node-lease",
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": uid}]},
                "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": now_rfc3339()}}
        try:
            self.api.patch(f"{LEASES}/{name}", {"spec": {"renewTime": now_rfc3339()}})
        except ApiError as exc:
            if exc.status != 404:
                raise
            self.api.create(LEASES, body)

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            with self._lock:
                nodes = dict(self._nodes)
            for name, uid in nodes.items():
                if self._stop.is_set():
                    return
                with self._beating:
                    with self._lock:
                        if self._nodes.get(name) != uid:  # silenced since the copy
                            continue
                    try:
                        self._renew(name, uid)
                    except Exception:  # noqa: BLE001 - a missed beat is retried next period
                        pass
