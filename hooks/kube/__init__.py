"""Kubernetes actuators: what a decorator's response cannot do (spec, events, pods)."""
