"""Authority: who may order a power-off, and of which node.

A FencingRequest is an order to power a machine off. It is honoured only in
the controller's own namespace (NODEWARDEN_NAMESPACE), where only cluster
operators can write, as node-fencing's own requests are; one anywhere else
is refused (Failed, ``NotHonouredHere``) and nothing is read or done for it.
A control-plane node, on any evidence (hooks/fencing/control_plane.py), is
fenced only when the request opts in with ``spec.allowControlPlane: true``.
"""
from __future__ import annotations

from hooks import fencing_names
from hooks.fencing import control_plane
from hooks.fencing.request_phases.state import Step

NOT_HONOURED = "NotHonouredHere"


def honoured_here(request_namespace: str | None, settings) -> bool:
    return request_namespace == settings.namespace


def refuse_elsewhere(step: Step) -> None:
    """Failed once with the reason; a finished request is left as it is."""
    if step.status.get("phase") in fencing_names.FINISHED_PHASES:
        return
    step.fail(NOT_HONOURED, f"FencingRequests are honoured only in namespace {step.settings.namespace}, where only "
                            f"cluster operators create them; this one in {step.request.meta.get('namespace')} was "
                            "refused and nothing was done")


def may_fence(step: Step) -> bool:
    """Not a control-plane node, or the request opts in. Fails the request on evidence; when the API
    server's addresses are not known yet, asks for them (a verified call reads them) and waits."""
    if step.spec.allow_control_plane:
        return True
    instance = step.observed.get("instance") if isinstance(step.observed.get("instance"), dict) else {}
    servers = step.observed.get("apiServers")
    found = ", ".join(filter(None, (control_plane.of_node(step.node),
                                    control_plane.of_instance(instance, servers if isinstance(servers, list) else []))))
    if found:
        step.fail("ControlPlaneNode", f"node {step.spec.node_name} is control plane ({found}): fenced only by a "
                                      "request with spec.allowControlPlane: true")
        return False
    if isinstance(servers, list):
        return True
    if not step.request.verified:
        step.verify = True  # gather reads the API server's addresses on the verified call
        return False
    detail = str(step.observed.get("apiServersError") or "not read")
    step.provider["lastDescribeError"] = f"the API server's addresses could not be read: {detail}"[:1000]
    step.cannot_tell("ControlPlaneUnknown", "the API server's addresses could not be read", detail)
    return False
