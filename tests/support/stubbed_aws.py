"""AWS clients for botocore's Stubber: AWS behaviour moto does not have, answered call by call."""
from __future__ import annotations

import boto3

ACCOUNT = "arn:aws:elasticloadbalancing:us-east-1:123456789012"


def stubbed_client(service):
    return boto3.client(service, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")


class StubbedClients:
    """AwsClients' one method, over the stubbed clients of a test."""

    def __init__(self, **clients):
        self.clients = clients

    def client(self, service, region=None):
        return self.clients[service]
