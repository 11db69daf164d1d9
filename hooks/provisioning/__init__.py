"""Provisioning: where pending pods go, and the Machines to create for those existing capacity cannot take.

Pure decisions, one module per phase: resources (amounts), requirements
(node-selector algebra), pods (what is read of a pod), catalog (instance
types and offerings), slots (a Node and its pods as room), residents (the
pods on Slots, indexed for spread and anti-affinity), scheduling (placing
pods on Slots and new claims), placements (the placement the pools' rounds
share over equal inputs), batching (when a round may start), rounds (one
pool's part of a round). Which Machines a pool no longer needs is its
decision's (hooks.nodepools). The label
keys and annotations they share with Nodes and users are vocabulary:
hooks/provisioning_names.py.
"""
