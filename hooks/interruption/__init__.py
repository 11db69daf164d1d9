"""Interruptions: what EC2 says is about to happen to an instance, read from an SQS queue (pure rules).

``messages`` reads one EventBridge event into what it claims, ``queue`` reads
an InterruptionQueue's spec, ``judge`` decides what each claim means for this
cluster's Machines once EC2 and the API server have been asked.
"""
