"""SQS: receive a bounded batch of messages, delete one once what it caused is recorded."""
from __future__ import annotations

from botocore.exceptions import ClientError

from hooks.aws.clients import error_code

# Longer than one hook call (Metacontroller's timeout is 10 s): a message received by a call
# that then crashed comes back after this, and the next call decides it again.
VISIBILITY_TIMEOUT = 15
# The receipt no longer names a message: deleted already (by a call that crashed before answering).
GONE = ("ReceiptHandleIsInvalid",)


def receive(sqs, queue_url: str, max_messages: int, wait_seconds: int) -> list[dict]:
    """Up to ``max_messages`` messages, long-polled at most ``wait_seconds``: ``{"id", "receipt", "body"}``."""
    response = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=max_messages,
                                   WaitTimeSeconds=wait_seconds, VisibilityTimeout=VISIBILITY_TIMEOUT,
                                   MessageSystemAttributeNames=["ApproximateReceiveCount"])
    out = []
    for m in (response.get("Messages") or [])[:max_messages]:
        out.append({"id": m.get("MessageId"), "receipt": m.get("ReceiptHandle"), "body": m.get("Body"),
                    "receiveCount": (m.get("Attributes") or {}).get("ApproximateReceiveCount")})
    return out


def delete(sqs, queue_url: str, receipt: str) -> bool:
    """Delete the message received with ``receipt``; False when SQS no longer has it that way."""
    try:
        sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=receipt)
    except ClientError as exc:
        if error_code(exc) in GONE:
            return False
        raise
    return True
