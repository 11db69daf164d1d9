"""cluster-gc's rules: what a deleted cluster's teardown collects, and what each finalize call answers.

  tasks      GC tasks (CAPA's names, plus ours: ``instance``,
             ``network-interface``, ``elastic-ip``, ``volume``), their order,
             and the resource kinds of each
  ownership  which resource a controller of the workload cluster made, from
             its tags: only that is collected
  plan       the verdict on each resource (delete now, wait for it, or keep
             it and why), and the plan of every resource tagged for a cluster
  scope      whether this call collects at all (switch, opt-out, move, tasks),
             and the cluster's name and region
  targets    what of discovery's answer is deleted, in task order, within the
             work budget
  progress   the answer while the cluster is held: what remains, the last
             error, the backoff while nothing moves, and the wait limit
  decision   one finalize call's plan, from the request and what discovery found

The annotations, labels and finalizer CAPA, clusterctl and we use are
vocabulary: hooks/teardown_names.py. hooks/controllers/cluster_gc.py wires
these rules to the API server and to AWS (hooks/aws/gc/: discovery, the
delete calls and their runner); everything here is pure.
"""
