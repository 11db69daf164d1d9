"""Locate: the Node the request names, still the one it was made for, and the instance behind it.

The request fails only on proof (the API server's 404, another uid under
the name, a providerID that names no AWS instance or another instance than
the one being fenced). A Node that cannot be read is waited for, but a power
operation not for ever.
"""
from __future__ import annotations

from hooks import fields, providerid
from hooks.fencing.request_phases.state import Step, node_gone, recorded


def locate(step: Step) -> bool:
    """Instance and region from the node; False when it cannot be located (Failed only when proven)."""
    if step.node is None:
        if node_gone(step.observed):
            step.fail("NodeNotFound", f"Node {step.spec.node_name} does not exist")
        else:  # missing from this request is not proof: the API server is asked again next time
            step.provider["lastDescribeError"] = step.observed.get("nodeError") or \
                f"Node {step.spec.node_name} was not in the request and could not be looked up"
            unlocated(step)
        return False
    uid = step.node["metadata"].get("uid")
    for expected in (step.spec.node_uid, recorded(step.status, "providerStatus").get("nodeUID")):
        if expected and uid != expected:
            step.fail("NodeReplaced", f"Node {step.spec.node_name} is now uid {uid}, not the {expected} "
                                      "this request was made for")
            return False
    try:
        pid = providerid.parse(fields.string(step.node, "spec", "providerID", where="related.Node"))
    except providerid.ProviderIDError as exc:
        step.fail("InvalidProviderID", str(exc))
        return False
    known = step.provider.get("instanceID")
    if known and known != pid.instance_id:
        step.fail("NodeReplaced", f"Node {step.spec.node_name} now runs on instance {pid.instance_id}, "
                                  f"not the {known} this request fences")
        return False
    step.provider["instanceID"] = pid.instance_id
    step.provider["region"] = pid.region or step.settings.aws_region
    if uid:
        step.provider["nodeUID"] = uid
    return True


def unlocated(step: Step) -> None:
    """Wait for the Node to be readable (bounded, see Step.cannot_tell)."""
    step.cannot_tell("NodeUnavailable", f"Node {step.spec.node_name} could not be read",
                     step.provider.get("lastDescribeError"))
