"""Idempotent AWS actuators and look-ups (boto3)."""
