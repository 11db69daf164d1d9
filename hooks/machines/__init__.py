"""Machines and NodePools: in-flight capacity that never leaks an instance.

Pure decisions, one module per phase of a Machine's life (launch,
registration, initialization, liveness, termination), plus the NodePool's
replica, disruption and leaked-instance decisions. The AWS side is hooks.aws.instances; the
names Machines share with Nodes, EC2 and users are vocabulary: hooks/machine_names.py.
"""
