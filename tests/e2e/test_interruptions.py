"""Interruptions through the real API server and Metacontroller, moto as SQS, EventBridge and EC2.

The ``interruption_queue`` fixture makes what docs/interruptions.md asks of
an operator: an SQS queue, one EventBridge rule per kind of event sending to
it, and an InterruptionQueue naming it. ``send`` puts an event on the
default bus as EC2 or AWS Health would (moto accepts ``aws.*`` sources from
a caller, AWS does not), and moto's EventBridge delivers it to the queue.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import email.utils

import pytest

from devcluster import fleet, interruptions
from devcluster.api import ApiError, wait_for
from hooks.machines import names, signals
from tests.e2e.conftest import unique
from worlds import ec2_events as ev

pytestmark = pytest.mark.e2e

QUEUES = "/apis/nodewarden.io/v1alpha1/interruptionqueues"
POOLS = "/apis/nodewarden.io/v1alpha1/nodepools"
MACHINES = "/apis/nodewarden.io/v1alpha1/machines"


@dataclasses.dataclass
class Queue:
    name: str  # the InterruptionQueue's, and the SQS queue's
    url: str
    cloud: fleet.Aws

    def on_queue(self) -> int:
        attrs = self.cloud.sqs.get_queue_attributes(QueueUrl=self.url, AttributeNames=[
            "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
        return int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"])


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def send(queue: Queue, event: dict) -> None:
    """Put an EventBridge-shaped event on the bus; the queue's rules deliver it."""
    interruptions.put(queue.cloud.events, event)


def send_spot_warning(queue: Queue, instance_id: str) -> None:
    """A spot interruption warning for ``instance_id``, as EC2 sends it two minutes before reclaiming it."""
    send(queue, ev.spot_warning(instance_id, now()))


@pytest.fixture
def interruption_queue(api, cloud):
    """An SQS queue fed by the EventBridge rules of docs/interruptions.md, and an InterruptionQueue polling it."""
    name = unique("iq")
    url = interruptions.create_queue(cloud.sqs, cloud.events, name)
    api.create(QUEUES, {"apiVersion": names.API_VERSION, "kind": "InterruptionQueue", "metadata": {"name": name},
                        "spec": {"queueURL": url, "statusCheckInterval": "5s"}})
    wait_for(lambda: (api.get(f"{QUEUES}/{name}").get("status") or {}).get("lastPoll"), "the queue polled",
             timeout=30)
    yield Queue(name, url, cloud)
    api.delete(f"{QUEUES}/{name}")


def _subnet(cloud: fleet.Aws) -> str:
    return next(s["SubnetId"] for s in cloud.ec2.describe_subnets()["Subnets"] if s["AvailabilityZone"] == fleet.ZONE)


@pytest.fixture
def launched_machine(api, cloud):
    """A NodePool of one Machine whose instance is launched: (the Machine as the API server has it)."""
    pool = unique("ipool")
    api.create(POOLS, {"apiVersion": names.API_VERSION, "kind": names.NODEPOOL_KIND, "metadata": {"name": pool},
                       "spec": {"replicas": 1, "registrationTTL": "5m", "drainTimeout": "30s",
                                "template": {"spec": {"instanceTypes": ["m5.large"], "subnets": [_subnet(cloud)],
                                                      "imageId": fleet.IMAGE_ID}}}})

    def launched():
        found = api.get(f"{MACHINES}?labelSelector={names.POOL_LABEL}%3D{pool}")["items"]
        return next((m for m in found if (m.get("status") or {}).get("instanceID")), None)
    yield wait_for(launched, "a Machine with its instance", timeout=60)
    api.delete(f"{POOLS}/{pool}")


def test_a_message_for_a_machines_instance_ends_as_its_annotation(api, interruption_queue, launched_machine):
    name, instance_id = launched_machine["metadata"]["name"], launched_machine["status"]["instanceID"]
    start = dt.datetime.now(dt.timezone.utc).replace(microsecond=0) + dt.timedelta(days=8)
    send(interruption_queue, ev.scheduled_change([instance_id], now(), email.utils.format_datetime(start, usegmt=True)))

    def recorded():
        machine = api.get_or_none(f"{MACHINES}/{name}")
        return machine and signals.of(machine, signals.INTERRUPTION_ANNOTATION)
    signal = wait_for(recorded, "the interruption annotation on the Machine", timeout=15)
    assert signal.reason == signals.SCHEDULED_CHANGE
    assert signal.deadline == start
    wait_for(lambda: interruption_queue.on_queue() == 0, "the message deleted once recorded", timeout=10)
    wait_for(lambda: (api.get(f"{QUEUES}/{interruption_queue.name}")["status"].get("messages") or {})
             .get("recorded", 0) >= 1, "counted as recorded", timeout=10)
    status = api.get(f"{QUEUES}/{interruption_queue.name}")["status"]
    assert status["conditions"][0]["status"] == "True"


def test_a_foreign_message_is_dropped_and_counted(api, cloud, interruption_queue):
    [stranger] = fleet.launch_instances(cloud, 1)  # tagged for this cluster, recorded by no Machine
    [elsewhere] = fleet.launch_instances(cloud, 1, cluster_name="another-cluster")
    send_spot_warning(interruption_queue, stranger)
    send_spot_warning(interruption_queue, elsewhere)

    wait_for(lambda: interruption_queue.on_queue() == 0, "both messages deleted", timeout=15)
    wait_for(lambda: (api.get(f"{QUEUES}/{interruption_queue.name}")["status"].get("messages") or {})
             .get("foreign", 0) == 2, "both counted foreign", timeout=10)
    spot = [m["metadata"]["name"] for m in api.get(MACHINES)["items"]
            if (signals.of(m, signals.INTERRUPTION_ANNOTATION) or signals.Signal("", None)).reason
            == signals.SPOT_INTERRUPTION]
    assert spot == []


@pytest.mark.parametrize("spec, field", [
    ({"queueURL": "file:///etc/passwd"}, "queueURL"),
    ({"queueURL": "https://sqs.us-east-1.amazonaws.com/123456789012/q", "waitSeconds": 20}, "waitSeconds"),
    ({"queueURL": "https://sqs.us-east-1.amazonaws.com/123456789012/q", "pollInterval": "0s"}, "pollInterval"),
    ({"queueURL": "https://sqs.us-east-1.amazonaws.com/123456789012/q", "statusCheckInterval": "1s"},
     "statusCheckInterval"),
    ({}, "queueURL"),
])
def test_the_api_server_refuses_a_queue_the_hook_could_not_poll(api, spec, field):
    with pytest.raises(ApiError) as refused:
        api.create(QUEUES, {"apiVersion": names.API_VERSION, "kind": "InterruptionQueue",
                            "metadata": {"name": unique("bad-iq")}, "spec": spec})
    assert refused.value.status == 422 and field in str(refused.value), refused.value
