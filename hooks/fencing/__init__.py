"""Fencing's rules (pure).

  node, node_phases/    the Node Fencing KEP's timeline on one node (node-fencing)
  request_rules,
  request_phases/       the FencingRequest state machine (fencing-request)
  policy, selectors     NodeFencingPolicies: parsing, and which nodes a policy governs
  policy_count          a policy's count, its storm guard, and the admitted Nodes told (node-fencing-policy)
  health                which NodeConditions make a node unhealthy, and since when
  storm, records        the storm guard's counts, and the UnhealthyNode records they count
  failover              the pods fast failover force-deletes
  control_plane         whether a node is control plane

The names the KEP and we use are vocabulary: hooks/fencing_names.py.
"""
