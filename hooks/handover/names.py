"""The old DecoratorControllers, their finalizers, and the actions of a hand-over."""
from __future__ import annotations

from hooks.contract import decorator_finalizer

OLD_CONTROLLERS = ("node-detacher", "node-fencing")
OLD_FINALIZERS = tuple(decorator_finalizer(c) for c in OLD_CONTROLLERS)

# Action kinds (hooks/actuators.py).
CLAIM_ATTACHMENT = "kube.claim-attachment"
REMOVE_FINALIZERS = "kube.remove-finalizers"
