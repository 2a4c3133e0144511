"""The message source: receives job messages from an SQS queue and deletes or releases them.

MessageSource is the seam; SqsSource is the SQS implementation (any SQS-compatible endpoint).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from botocore.exceptions import ClientError

from .aws import error_code
from .errors import ResourceMissingError

log = logging.getLogger("sqsjkr.sqs")

#: SQS accepts at most ten messages per ReceiveMessage and per batch call.
MAX_BATCH = 10


@dataclass(frozen=True)
class Message:
    """One received queue message."""

    message_id: str
    receipt_handle: str
    body: str
    sent_at: float  # unix seconds (SQS SentTimestamp is in milliseconds)
    receive_count: int = 1


class MessageSource(Protocol):
    """Where jobs come from."""

    def receive(self, max_messages: int) -> list[Message]:
        """Up to max_messages messages; may block for a long poll and return none."""

    def delete(self, messages: Sequence[Message]) -> None:
        """Remove handled messages from the queue for good."""

    def release(self, messages: Sequence[Message]) -> None:
        """Make received but unstarted messages visible again at once."""


def _chunks(messages: Sequence[Message]) -> list[Sequence[Message]]:
    return [messages[i : i + MAX_BATCH] for i in range(0, len(messages), MAX_BATCH)]


def resolve_queue_url(client: Any, queue_name: str, account_id: str) -> str:
    """The queue URL from GetQueueUrl, as the Go daemon did; a missing queue is named clearly."""
    try:
        response = client.get_queue_url(QueueName=queue_name, QueueOwnerAWSAccountId=account_id)
    except ClientError as exc:
        if "NonExistentQueue" in error_code(exc) or "QueueDoesNotExist" in error_code(exc):
            raise ResourceMissingError(
                f"SQS queue {queue_name!r} of account {account_id} does not exist "
                "(check [sqs] queue_name, [account] id and region)"
            ) from exc
        raise
    return str(response["QueueUrl"])


class SqsSource:
    """Receives from one SQS queue with long polling."""

    def __init__(
        self,
        client: Any,
        queue_url: str,
        *,
        wait_time_seconds: int = 10,
        visibility_timeout: int = 30,
    ) -> None:
        self._client = client
        self.queue_url = queue_url
        self._wait_time_seconds = wait_time_seconds
        self._visibility_timeout = visibility_timeout

    def receive(self, max_messages: int) -> list[Message]:
        response = self._client.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=max(1, min(MAX_BATCH, max_messages)),
            WaitTimeSeconds=self._wait_time_seconds,
            VisibilityTimeout=self._visibility_timeout,
            AttributeNames=["All"],
        )
        return [_to_message(raw) for raw in response.get("Messages", [])]

    def delete(self, messages: Sequence[Message]) -> None:
        for chunk in _chunks(messages):
            entries = [
                {"Id": str(i), "ReceiptHandle": m.receipt_handle} for i, m in enumerate(chunk)
            ]
            response = self._client.delete_message_batch(QueueUrl=self.queue_url, Entries=entries)
            self._log_failures("delete", chunk, response)

    def release(self, messages: Sequence[Message]) -> None:
        for chunk in _chunks(messages):
            entries = [
                {"Id": str(i), "ReceiptHandle": m.receipt_handle, "VisibilityTimeout": 0}
                for i, m in enumerate(chunk)
            ]
            response = self._client.change_message_visibility_batch(
                QueueUrl=self.queue_url, Entries=entries
            )
            self._log_failures("release", chunk, response)

    def retention_seconds(self) -> int:
        """The queue's MessageRetentionPeriod: how long a dedupe record must outlive its message."""
        response = self._client.get_queue_attributes(
            QueueUrl=self.queue_url, AttributeNames=["MessageRetentionPeriod"]
        )
        return int(response["Attributes"]["MessageRetentionPeriod"])

    @staticmethod
    def _log_failures(action: str, chunk: Sequence[Message], response: dict[str, Any]) -> None:
        for failure in response.get("Failed", []):
            message = chunk[int(failure["Id"])]
            log.error(
                "could not %s message %s: %s: %s",
                action,
                message.message_id,
                failure.get("Code"),
                failure.get("Message", ""),
            )


def _to_message(raw: dict[str, Any]) -> Message:
    attributes = raw.get("Attributes", {})
    return Message(
        message_id=raw["MessageId"],
        receipt_handle=raw["ReceiptHandle"],
        body=raw.get("Body", ""),
        sent_at=int(attributes.get("SentTimestamp", 0)) / 1000.0,
        receive_count=int(attributes.get("ApproximateReceiveCount", 1)),
    )
