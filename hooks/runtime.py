"""What a hook needs besides the request: settings, clients and the clock.

One Context per process; tests build their own. Clients are created lazily
so the server starts, and answers, with no AWS or Kubernetes API reachable.
"""
from __future__ import annotations

import datetime as dt
import threading
from dataclasses import dataclass, field
from typing import Callable

from hooks.aws.clients import AwsClients
from hooks.aws.instance_view import ClusterInstances
from hooks.config import Settings, load_settings
from hooks.kube.client import Kube
from hooks.kube.event_recorder import Recorder


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


@dataclass
class Context:
    settings: Settings
    clock: Callable[[], dt.datetime] = utcnow
    _aws: AwsClients | None = field(default=None, repr=False)
    _kube: Kube | None = field(default=None, repr=False)
    # Events are sent by a background thread; inline sends them in the caller's (tests, CLI).
    events_inline: bool = False
    _events: Recorder | None = field(default=None, repr=False)
    _instances: ClusterInstances | None = field(default=None, repr=False)

    @property
    def aws(self):
        if self._aws is None:
            self._aws = AwsClients(self.settings)
        return self._aws

    @property
    def instances(self) -> ClusterInstances:
        """The process's view of the cluster's instances, and its batched fresh reads."""
        if self._instances is None:
            self._instances = ClusterInstances(lambda region: self.aws.client("ec2", region or None),
                                               self.settings.cluster_name, self.settings.instance_view_seconds,
                                               self.settings.instance_read_window_seconds)
        return self._instances

    @property
    def kube(self):
        if self._kube is None:
            self._kube = Kube()
        return self._kube

    @property
    def events(self):
        if self._events is None:
            self._events = Recorder(lambda: self.kube, inline=self.events_inline, utcnow=utcnow)
        return self._events

    def now(self) -> dt.datetime:
        return self.clock()


_lock = threading.Lock()
_current: Context | None = None


def current() -> Context:
    global _current
    with _lock:
        if _current is None:
            _current = Context(load_settings())
        return _current


def install(ctx: Context | None) -> None:
    """Replace the process context (the app factory and tests do this)."""
    global _current
    with _lock:
        _current = ctx
