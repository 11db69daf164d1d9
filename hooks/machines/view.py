"""What every phase of a Machine reads (``MachineView``) and writes (``Progress``) in one call (pure)."""
from __future__ import annotations

import copy
import datetime as dt
from dataclasses import dataclass, field

from hooks import conditions, fields, machine_names, providerid, timefmt
from hooks.events import Event
from hooks.machines.spec import MachineSpec
from hooks.plan import Action, Gate

# Status fields of ours and the type each must have; a wrong one is dropped, never trusted.
_STATUS_TYPES = {
    "providerID": str, "instanceID": str, "instanceType": str, "zone": str, "nodeName": str, "nodeUID": str,
    "imageId": str, "launchRequestedAt": str, "launchedAt": str, "lastError": str,
    "capacity": dict, "allocatable": dict, "termination": dict, "conditions": list, "launchRefusals": list,
}


def own_status(parent: dict) -> dict:
    status = copy.deepcopy(fields.mapping(parent, "status"))
    for key, kind in _STATUS_TYPES.items():
        if key in status and not isinstance(status[key], kind):
            del status[key]
    status.pop("observedGeneration", None)
    return status


def read_status(request) -> dict:
    """The Machine's status as this call read it once (gather only reads it; decide works on its own copy):
    ``request`` is the call's HookRequest."""
    return request.reading("status", lambda: own_status(request.parent))


@dataclass
class MachineView:
    obj: dict
    spec: MachineSpec
    status: dict  # a working copy: phases write their progress into it
    observed: dict
    now: dt.datetime
    verified: bool

    @property
    def name(self) -> str:
        return self.obj["metadata"]["name"]

    @property
    def uid(self) -> str:
        return self.obj["metadata"].get("uid") or ""

    @property
    def pool(self) -> str:
        return fields.mapping(self.obj, "metadata", "labels").get(machine_names.POOL_LABEL) or ""

    @property
    def created(self) -> dt.datetime:
        return timefmt.parse(self.obj["metadata"].get("creationTimestamp")) or self.now

    @property
    def instance_id(self) -> str:
        return self.status.get("instanceID") or ""

    @property
    def instance(self) -> dict | None:
        return self.observed.get("instance")

    def since(self, key: str, within: dict | None = None) -> float | None:
        """Seconds since one of our timestamps (None when it is missing or unreadable)."""
        return timefmt.seconds_since((within if within is not None else self.status).get(key), self.now)


def node_instance_id(node: dict) -> str | None:
    try:
        return providerid.parse(fields.string(node, "spec", "providerID", where="node")).instance_id
    except (providerid.ProviderIDError, ValueError):
        return None


@dataclass
class Progress:
    """What one call decides: status changes go into the view's status; actions, Events, the next look."""

    view: MachineView
    actions: list[Action] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    resync: float | None = None
    finalized: bool = False
    verify: bool = False  # a conclusion that only the API server can confirm (see pipeline.by_plan)
    gate: Gate | None = None  # sequencing for the actions (a launch's candidates)

    def condition(self, ctype: str, value: str, reason: str, message: str) -> bool:
        """Set a condition; True when its status changed (a transition worth an Event)."""
        before = (conditions.find(self.view.status, ctype) or {}).get("status")
        status, _ = conditions.set(self.view.status, ctype, value, reason, message, timefmt.fmt(self.view.now))
        self.view.status["conditions"] = status["conditions"]
        return before != value

    def again_in(self, seconds: float) -> None:
        self.resync = seconds if self.resync is None else min(self.resync, seconds)

    def error(self, message: str, retry: float) -> None:
        self.errors.append(message)
        self.again_in(retry)

    def stamp(self, key: str, within: dict | None = None) -> str:
        """Our timestamp ``key``, set to now if it is not there yet."""
        target = within if within is not None else self.view.status
        if not timefmt.parse(target.get(key)):
            target[key] = timefmt.fmt(self.view.now)
        return target[key]
