"""Deletes that can only ever remove the object that was verified: the uid is a precondition."""
from __future__ import annotations

from hooks.kube.client import is_missing


def precondition_failed(exc: BaseException) -> bool:
    """409 with a uid precondition: the object of that uid is gone, a namesake took its place."""
    status = getattr(exc, "status", None)
    return getattr(status, "code", None) == 409 and "precondition" in (getattr(status, "message", "") or "").lower()


def delete_exact(kube, res, name: str, uid: str | None, namespace: str | None = None,
                 grace_period: int | None = None) -> bool:
    """Delete the object named ``name`` only if it is still uid ``uid``; False when it is gone already."""
    options: dict = {}
    if grace_period is not None:
        options["gracePeriodSeconds"] = grace_period
    if uid:
        options["preconditions"] = {"uid": uid}
    try:
        kube.delete_with_options(res, name, options, namespace=namespace)
        return True
    except Exception as exc:  # noqa: BLE001 - gone already (or never served) is success; the rest is reported
        if is_missing(exc) or precondition_failed(exc):
            return False
        raise
