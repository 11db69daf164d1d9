"""Provisioning: where pending pods go, and the Machines to create for those existing capacity cannot take.

Pure decisions, one module per phase: resources (amounts), requirements
(node-selector algebra), pods (what is read of a pod), catalog (instance
types and offerings), scheduling (placing pods on Slots and new claims),
batching (when a round may start). The label keys and annotations they share
with Nodes and users are vocabulary: hooks/provisioning_names.py.
"""
