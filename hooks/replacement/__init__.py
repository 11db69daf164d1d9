"""Replacement of a fenced node by its owner (pure).

  spec     spec.replacement of a NodeFencingPolicy and of the FencingRequest it makes
  owners   which owner a node has, proven from what the owner holds (a label is only a hint)
  guard    whether a replacement may start: the storm guard, the group's share of unhealthy
           members, the per-group budget

The phase that runs them is hooks/fencing/request_phases/replacement.py; the
names are vocabulary: hooks/owner_names.py.
"""
