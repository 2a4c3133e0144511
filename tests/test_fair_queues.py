"""Queues on local mode's endpoint (sqsjkr/local/queues.py): the counts and receives of moto's own,
with one clock read per count of a queue's messages, not one per message.

The HTTP test runs both servers in processes of their own (moto_servers.serve); the
others use moto's backend in this process, where conftest.py installs the fair queues.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto.core import DEFAULT_ACCOUNT_ID
from moto.core import utils as moto_utils
from moto.sqs.models import SQSBackend, sqs_backends

from sqsjkr.local.queues import install_fair_queues
from tests.moto_servers import serve


@pytest.fixture(scope="module", params=["fair", "stock"])
def any_endpoint(request: pytest.FixtureRequest) -> Iterator[str]:
    """Both servers: the fair queues answer as moto's own do."""
    yield from serve(request.param)


def test_a_queues_counts_and_receives_are_moto_s(any_endpoint: str) -> None:
    sqs = boto3.client(
        "sqs",
        endpoint_url=any_endpoint,
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
    )
    url = sqs.create_queue(QueueName=f"q-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    for index in range(5):
        sqs.send_message(QueueUrl=url, MessageBody=f"ready {index}")
    for index in range(3):
        sqs.send_message(QueueUrl=url, MessageBody=f"later {index}", DelaySeconds=60)
    taken = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=2, VisibilityTimeout=60)
    assert [m["Body"] for m in taken["Messages"]] == ["ready 0", "ready 1"]

    names = [
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesDelayed",
        "ApproximateNumberOfMessagesNotVisible",
    ]
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
    assert [attributes[name] for name in names] == ["3", "3", "2"]
    rest = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)
    assert sorted(m["Body"] for m in rest["Messages"]) == ["ready 2", "ready 3", "ready 4"]


def backend() -> SQSBackend:
    install_fair_queues()  # conftest's server has them already; idempotent
    return sqs_backends[DEFAULT_ACCOUNT_ID]["us-east-1"]


def test_a_message_past_its_queues_retention_is_not_received() -> None:
    sqs = backend()
    name = f"retention-{uuid.uuid4().hex[:8]}"
    sqs.create_queue(name, MessageRetentionPeriod="60")
    sqs.send_message(name, "fresh")
    stale = sqs.send_message(name, "stale")
    stale.sent_timestamp = int((time.time() - 61) * 1000)  # type: ignore[assignment]

    received = sqs.receive_message(name, 10, 0, 30)

    assert [m.body for m in received] == ["fresh"]


def test_a_message_costs_moto_a_few_clock_reads_however_long_its_queue(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """moto's own read its clock a few times per message in the queue, for each message sent or
    received: 300 waiting messages cost it thousands of reads per message."""
    sqs = backend()
    name = f"long-{uuid.uuid4().hex[:8]}"
    sqs.create_queue(name)
    for index in range(300):
        sqs.send_message(name, f"job {index}")
    reads = 0
    clock = moto_utils.utcnow

    def counted() -> Any:
        nonlocal reads
        reads += 1
        return clock()

    monkeypatch.setattr(moto_utils, "utcnow", counted)
    sqs.send_message(name, "one more")
    assert [m.body for m in sqs.receive_message(name, 1, 0, 30)] == ["job 0"]

    # Each walk of the queue reads the clock once; moto's own: 3 x 300 x 2 for each message.
    assert reads < 40, reads
