"""A Node handed over from the two DecoratorControllers the ``node`` controller replaces: pure decisions.

node-detacher and node-fencing were two DecoratorControllers on every Node.
What they leave behind once they are deleted:

- node-detacher's finalizer, ``metacontroller.io/decoratorcontroller-node-detacher``,
  on every Node. Metacontroller takes a decorator's finalizer off only
  through that decorator's own finalize, so with the controller gone nothing
  would, and every Node deletion would hang on it.
- their attachments (the Attachment, the FencingRequest, the UnhealthyNode
  record), which Metacontroller knows as a decorator's own only by the
  annotation ``metacontroller.k8s.io/decorator-controller`` naming it.
  Unclaimed, the new controller would not see them (a FencingRequest in
  flight among them) and could not create its own under the same names.

One module per phase: ``claim`` (on a sync: the attachments claimed for the
new controller, then the old finalizers off) and ``release`` (the old
finalizers off a Node deleted before the hand-over, once the answer lets it
go). Their actions run through hooks.pipeline (hooks/controllers/node_handover.py).
"""
