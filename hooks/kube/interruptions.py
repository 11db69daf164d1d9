"""The interruption signal on a Machine: written only on that Machine, only over none or a weaker signal (or a
stop EC2 no longer agrees with), and retired only while it is still the one judged outlived."""
from __future__ import annotations

from lightkube.core.exceptions import ApiError

from hooks import machine_names
from hooks.kube import fresh
from hooks.kube.taints import pointer
from hooks.machines import signals

_ATTEMPTS = 4


class MachineReplaced(RuntimeError):
    """The Machine under that name is not the one the signal was decided for."""


def record(kube, name: str, uid: str, value: str, replaces: str | None = None) -> bool:
    """Set the interruption annotation to ``value`` on the Machine of ``uid``; True when written.

    Read, checked and patched with a test of the resourceVersion read (and
    of the uid), so the signal already there is the one compared: a signal
    that does not supersede it (``signals.supersedes``) writes nothing,
    unless it is exactly ``replaces`` (a stop EC2 was found to no longer agree
    with), and a concurrent writer makes it read again. A Machine that is
    gone or another under the name raises: the message stays on the queue.
    """
    new = signals.parse(value, signals.INTERRUPTIONS)
    if new is None:
        raise ValueError(f"not an interruption signal: {value[:200]!r}")
    res = fresh.resource(machine_names.MACHINE_KIND)
    for attempt in range(_ATTEMPTS):
        machine = fresh.as_dict(kube.get(res, name))
        meta = machine.get("metadata") or {}
        if meta.get("uid") != uid:
            raise MachineReplaced(f"Machine {name} is now uid {meta.get('uid')}, not {uid}: not written")
        annotations = meta.get("annotations")
        there = annotations.get(signals.INTERRUPTION_ANNOTATION) if isinstance(annotations, dict) else None
        if not (replaces is not None and there == replaces) and \
                not signals.supersedes(new, signals.of(machine, signals.INTERRUPTION_ANNOTATION)):
            return False
        ops = [{"op": "test", "path": "/metadata/uid", "value": uid}]
        if meta.get("resourceVersion"):
            ops.append({"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]})
        if not isinstance(annotations, dict):
            ops.append({"op": "add", "path": "/metadata/annotations", "value": {}})
        ops.append({"op": "add", "path": f"/metadata/annotations/{pointer(signals.INTERRUPTION_ANNOTATION)}",
                    "value": value})
        try:
            kube.json_patch(res, name, ops)
            return True
        except ApiError as exc:
            # 409 Conflict / 422 failed test: somebody else wrote first; read again.
            if exc.status.code not in (409, 422) or attempt == _ATTEMPTS - 1:
                raise
    return False


def retire(kube, name: str, uid: str, value: str) -> bool:
    """Take the interruption annotation off the Machine of ``uid`` if it is still ``value``; True when removed.

    One JSON patch that tests the uid and the annotation's text: a Machine
    replaced under the name, or a signal written since, stays as it is (the
    next call judges it). A Machine that is gone counts as done.
    """
    path = f"/metadata/annotations/{pointer(signals.INTERRUPTION_ANNOTATION)}"
    ops = [{"op": "test", "path": "/metadata/uid", "value": uid}, {"op": "test", "path": path, "value": value},
           {"op": "remove", "path": path}]
    try:
        kube.json_patch(fresh.resource(machine_names.MACHINE_KIND), name, ops)
    except ApiError as exc:
        # 422: a test failed (another Machine, or another signal now); 404: the Machine is gone.
        if exc.status.code in (404, 422):
            return False
        raise
    return True
