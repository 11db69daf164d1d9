"""Worlds the tests and the benchmarks both run the hooks in, without a local stack.

The in-memory Kubernetes API (fake_kube), hook requests as Metacontroller sends them (envelope), EC2's
interruption events (ec2_events), and the worlds of cluster-gc (cluster_gc), of a Machine (machines) and of a
NodePool (pools). Never part of the image.
"""
