"""What docs/interruptions.md asks an operator to set up, made in moto: an SQS queue and the EventBridge
rules that send EC2's interruption events to it; and EC2's side, an event put on the bus.

moto's EventBridge delivers an event matching a rule to the rule's SQS
target in EventBridge's envelope, and accepts the ``aws.ec2`` and
``aws.health`` sources AWS keeps for itself, so ``put`` stands in for EC2.
"""
from __future__ import annotations

import json

SPOT_WARNING = "EC2 Spot Instance Interruption Warning"
REBALANCE = "EC2 Instance Rebalance Recommendation"
STATE_CHANGE = "EC2 Instance State-change Notification"
HEALTH = "AWS Health Event"

# One rule per kind of event, as docs/interruptions.md gives them.
RULES = {
    "spot-interruption": {"source": ["aws.ec2"], "detail-type": [SPOT_WARNING]},
    "rebalance": {"source": ["aws.ec2"], "detail-type": [REBALANCE]},
    "state-change": {"source": ["aws.ec2"], "detail-type": [STATE_CHANGE],
                     "detail": {"state": ["stopping", "stopped", "shutting-down", "terminated"]}},
    "scheduled-change": {"source": ["aws.health"], "detail-type": [HEALTH],
                         "detail": {"service": ["EC2"], "eventTypeCategory": ["scheduledChange"]}},
}


def create_queue(sqs, events, name: str) -> str:
    """An SQS queue with every rule of RULES sending to it; returns the queue URL."""
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    for rule, pattern in RULES.items():
        events.put_rule(Name=f"{name}-{rule}", EventPattern=json.dumps(pattern))
        events.put_targets(Rule=f"{name}-{rule}", Targets=[{"Id": "queue", "Arn": arn}])
    return url


def put(events, event: dict) -> None:
    """Put an EventBridge-shaped event (``source``, ``detail-type``, ``detail``, ``resources``) on the default
    bus as EC2 or AWS Health would; moto sets its ``time``, ``id`` and ``region``."""
    entry = {"Source": event["source"], "DetailType": event["detail-type"], "Detail": json.dumps(event["detail"]),
             "Resources": event["resources"]}
    response = events.put_events(Entries=[entry])
    if response.get("FailedEntryCount"):
        raise RuntimeError(f"EventBridge refused the event: {response.get('Entries')}")
