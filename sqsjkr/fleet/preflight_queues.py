"""The preflight's checks of a queue: that it exists, its retention, its RedrivePolicy and its
dead-letter queue's retention.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from sqsjkr.backends.sqs import dead_letter_queue_url, resolve_queue_url
from sqsjkr.contract.config import Config
from sqsjkr.errors import ResourceMissingError
from sqsjkr.fleet.preflight_results import Result, fail, failure, ok, unchecked_or_failure, warn
from sqsjkr.fleet.wording import format_span

#: A queue keeps a job while no host can run it (the fleet down, a deploy gone wrong). Under a
#: day, the jobs of an outage overnight are gone, unrun and unlogged, by the time anyone looks.
MIN_RETENTION_SECONDS = 86400


#: A message is received again after a crash, when a stopping daemon gives it back unstarted,
#: and for each duplicate delivery: a job should survive two such mishaps before SQS moves it.
MIN_MAX_RECEIVE_COUNT = 3


def queue_checks(sqs: Any, config: Config, name: str) -> Iterator[Result]:
    """The queue, its retention and its dead-letter queue."""
    subject = f"queue {name}"
    try:
        url = resolve_queue_url(sqs, name, config.account.id)
    except ResourceMissingError:
        yield fail(
            subject,
            f"not found in account {config.account.id}, region {config.account.region} "
            "(check its name in [sqs] or [[queues]], [account] id and region)",
            stop=True,
        )
        return
    except (BotoCoreError, ClientError) as exc:
        yield failure(subject, "sqs:GetQueueUrl", exc)
        return
    yield ok(subject, url)
    try:
        attributes = queue_attributes(sqs, url)
    except (BotoCoreError, ClientError) as exc:
        yield failure(subject, "sqs:GetQueueAttributes", exc)
        return
    yield check_retention(subject, attributes)
    yield from check_redrive(sqs, subject, attributes)


def queue_attributes(sqs: Any, url: str) -> dict[str, str]:
    response = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])
    return dict(response["Attributes"])


def check_retention(subject: str, attributes: Mapping[str, str]) -> Result:
    retention = int(attributes["MessageRetentionPeriod"])
    text = f"retention {format_span(retention)}"
    if retention < MIN_RETENTION_SECONDS:
        return warn(
            subject,
            f"{text}, under {format_span(MIN_RETENTION_SECONDS)}: jobs that wait out an outage "
            "of every host are deleted unrun by the time anyone looks",
        )
    return ok(subject, text)


def check_redrive(sqs: Any, subject: str, attributes: Mapping[str, str]) -> Iterator[Result]:
    """The RedrivePolicy: present, naming a queue that exists, with room for a few receives."""
    if not attributes.get("RedrivePolicy"):
        yield warn(
            subject,
            "no RedrivePolicy: malformed messages are logged and dropped, and a message that "
            "keeps coming back cycles until its retention ends",
        )
        return
    policy = json.loads(attributes["RedrivePolicy"])
    arn = str(policy.get("deadLetterTargetArn", ""))
    count = int(policy.get("maxReceiveCount", 0))
    try:
        dlq_url = dead_letter_queue_url(sqs, arn)
    except ResourceMissingError as exc:
        yield fail(subject, str(exc))
        return
    except (BotoCoreError, ClientError) as exc:
        yield failure(subject, f"sqs:GetQueueUrl of the dead-letter queue {arn}", exc)
        return
    dlq_name = arn.rsplit(":", 1)[-1]
    text = f"dead-letter queue {dlq_name} after {count} receives"
    if count < MIN_MAX_RECEIVE_COUNT:
        yield warn(
            subject,
            f"{text}: a job given back by a stopping daemon, or delivered again after a crash, "
            f"may be dead-lettered unrun (allow at least {MIN_MAX_RECEIVE_COUNT})",
        )
    else:
        yield ok(subject, text)
    yield check_dlq_retention(sqs, dlq_name, dlq_url, attributes)


def check_dlq_retention(
    sqs: Any, name: str, url: str, source_attributes: Mapping[str, str]
) -> Result:
    """A standard queue's message keeps its first enqueue time in the DLQ: a DLQ retention
    shorter than the queue's can drop a dead-lettered message at once. A FIFO queue's restarts."""
    subject = f"dead-letter queue {name}"
    source_retention = int(source_attributes["MessageRetentionPeriod"])
    fifo = source_attributes.get("FifoQueue") == "true"
    try:
        retention = int(queue_attributes(sqs, url)["MessageRetentionPeriod"])
    except (BotoCoreError, ClientError) as exc:
        # The hosts' policy may grant no reads of the DLQ: the daemon only sends to it.
        return unchecked_or_failure(subject, "sqs:GetQueueAttributes", exc, "retention")
    text = f"retention {format_span(retention)}"
    if retention < source_retention and not fifo:
        return warn(
            subject,
            f"{text}, shorter than the queue's {format_span(source_retention)}: a message SQS "
            "moves there keeps its first enqueue time and may expire at once",
        )
    return ok(subject, text)
