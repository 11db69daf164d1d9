"""node-detacher's rules (pure), hooks/controllers/node_detacher.py and node_detacher_pods.py run them.

  assess       where a node stands: the phase of this call (Situation)
  idle         skip, idle: nothing to detach
  exclude      a detach begins: the exclude label, then background deregistrations
  deregister   one batched call per load balancer for what is left
  drain        NodeBeingDetached, and the wait for every target to drain
  shutdown     ordered pod shutdown on a detached node
  reattach     schedulable again: register what was deregistered, ours comes off
  rejoin       registered once more when no deregistration can still land
  step         what the phases share: clocks, failure, writes before calls, batched calls
  attachment   the desired Attachment of a detaching node
  pod_trigger  a managed DaemonSet's terminating pod as a detach trigger
  triggers     what starts a detach
  targets      a node's load-balancer memberships and how they are written down

The annotations, labels and kinds are vocabulary: hooks/detacher_names.py.
"""
