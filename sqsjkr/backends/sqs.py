"""The message source: receives job messages from an SQS queue, hides, deletes or dead-letters them.

MessageSource is the seam; SqsSource is the SQS implementation (any SQS-compatible endpoint).
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from botocore.exceptions import ClientError

from sqsjkr.backends.aws import error_code
from sqsjkr.errors import ResourceMissingError, quote

log = logging.getLogger("sqsjkr.sqs")

#: SQS accepts at most ten messages per ReceiveMessage and per batch call.
MAX_BATCH = 10
#: SQS allows ten message attributes; a dead-lettered message gets one more saying why, if room.
_MAX_MESSAGE_ATTRIBUTES = 10
REJECT_REASON_ATTRIBUTE = "sqsjkr_error"
#: The id and receive count the message had on the source queue, to match it with the log.
ORIGINAL_ID_ATTRIBUTE = "sqsjkr_message_id"
RECEIVE_COUNT_ATTRIBUTE = "sqsjkr_receive_count"
#: Who sent a message with `sqsjkr trigger` (user@host), and why: the run record notes both.
TRIGGERED_BY_ATTRIBUTE = "sqsjkr_triggered_by"
TRIGGER_REASON_ATTRIBUTE = "sqsjkr_reason"
#: The longest trigger note a run record keeps of each: any sender can set these attributes.
_MAX_TRIGGER_NOTE = 1000
#: How much of an invalid body is logged when there is no dead-letter queue to keep it.
_LOGGED_BODY_BYTES = 4096
#: What SQS requires a FIFO queue's name to end in.
FIFO_SUFFIX = ".fifo"
#: The group of a message sent to a FIFO queue that had none (a standard queue's message).
FALLBACK_GROUP_ID = "sqsjkr"


def is_fifo(queue: str) -> bool:
    """Whether a queue (its name, URL or ARN) is a FIFO queue: SQS requires the suffix of those."""
    return queue.endswith(FIFO_SUFFIX)


#: What SQS allows in a MessageGroupId or MessageDeduplicationId: 1 to 128 letters, digits and
#: punctuation, which is printable ASCII without the space.
_FIFO_ID = re.compile(r"[!-~]{1,128}")
_NOT_FIFO_ID_CHARACTER = re.compile(r"[^!-~]")


def fifo_id_error(value: str) -> str | None:
    """Why SQS would refuse value as a MessageGroupId or MessageDeduplicationId; None if not."""
    if _FIFO_ID.fullmatch(value):
        return None
    return (
        f"{quote(value)} is not a valid FIFO id: SQS takes 1 to 128 letters, digits and "
        "punctuation (no spaces or other characters)"
    )


def group_id_of(event_id: str | None) -> str:
    """The message group of a job sent without one: its event_id, with what SQS does not take
    in a group id replaced by "_" and cut to 128 characters; FALLBACK_GROUP_ID without one."""
    if not event_id:
        return FALLBACK_GROUP_ID
    return _NOT_FIFO_ID_CHARACTER.sub("_", event_id)[:128]


def fifo_send_parameters(group_id: str | None, deduplication_id: str) -> dict[str, str]:
    """SendMessage parameters for a FIFO queue: the message's group (kept in order behind the
    rest of it), and an explicit deduplication id, so that a send retried after a lost answer is
    dropped by SQS within its five minutes whether or not the queue has content-based
    deduplication. FIFO queues take no per-message DelaySeconds: never pass one with these."""
    return {
        "MessageGroupId": group_id or FALLBACK_GROUP_ID,
        "MessageDeduplicationId": deduplication_id,
    }


def trigger_attributes(by: str, reason: str) -> dict[str, dict[str, str]]:
    """The message attributes of a message sent by `sqsjkr trigger` (SQS refuses an empty one)."""
    attributes = {TRIGGERED_BY_ATTRIBUTE: {"DataType": "String", "StringValue": by}}
    if reason:
        attributes[TRIGGER_REASON_ATTRIBUTE] = {"DataType": "String", "StringValue": reason}
    return attributes


def send_noted(
    sqs: Any,
    url: str,
    body: str,
    note: tuple[str, str] | None,
    group_id: str,
    deduplication_id: str,
) -> str:
    """Send body to the queue with a note of who sent it and why (trigger_attributes; None: no
    note), on a FIFO queue in group_id and deduplicated by deduplication_id; its message id."""
    request: dict[str, Any] = {"QueueUrl": url, "MessageBody": body}
    if note is not None:
        request["MessageAttributes"] = trigger_attributes(*note)
    if is_fifo(url):
        request.update(fifo_send_parameters(group_id, deduplication_id))
    return str(sqs.send_message(**request)["MessageId"])


def trigger_note(attributes: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """(who triggered, why) from a received message's attributes; (None, None) for a message a
    schedule sent."""

    def text(name: str) -> str | None:
        value = attributes.get(name)
        found = value.get("StringValue") if isinstance(value, Mapping) else None
        return found[:_MAX_TRIGGER_NOTE] if isinstance(found, str) else None

    by = text(TRIGGERED_BY_ATTRIBUTE)
    return (by, text(TRIGGER_REASON_ATTRIBUTE) or "") if by is not None else (None, None)


def sendable_attributes(attributes: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Received message attributes as SendMessage takes them: each one's type and value only
    (a receive may add the empty lists SQS reserves for later)."""
    return {
        name: {k: v for k, v in value.items() if k in ("DataType", "StringValue", "BinaryValue")}
        for name, value in attributes.items()
    }


@dataclass(frozen=True)
class Message:
    """One received queue message."""

    message_id: str
    receipt_handle: str
    body: str
    sent_at: float  # unix seconds (SQS SentTimestamp is in milliseconds)
    receive_count: int = 1
    #: SQS message attributes as received, passed on unchanged to a dead-letter queue.
    attributes: Mapping[str, Any] = field(default_factory=dict)
    #: The MessageGroupId of a FIFO queue's message; None on a standard queue.
    group_id: str | None = None


class MessageSource(Protocol):
    """Where jobs come from."""

    def receive(self, max_messages: int) -> list[Message]:
        """Up to max_messages messages; may block for a long poll and return none."""

    def delete(self, messages: Sequence[Message]) -> None:
        """Remove handled messages from the queue for good."""

    def set_visibility(self, messages: Sequence[Message], seconds: int) -> None:
        """Hide received messages for seconds from now; 0 makes them visible again at once."""

    def reject(self, message: Message, reason: str) -> None:
        """Take a message that is not a valid job off the queue, keeping it as evidence."""


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


@dataclass(frozen=True)
class QueueSettings:
    """What the daemon reads of its queue at start."""

    retention_seconds: int  # how long a dedupe record must outlive its message
    dead_letter_arn: str | None  # from the RedrivePolicy, if there is one
    max_receive_count: int | None = None  # likewise


def queue_settings(client: Any, queue_url: str) -> QueueSettings:
    """What the daemon needs of its queue's attributes, read in one call."""
    response = client.get_queue_attributes(
        QueueUrl=queue_url, AttributeNames=["MessageRetentionPeriod", "RedrivePolicy"]
    )
    attributes = response["Attributes"]
    redrive = json.loads(attributes.get("RedrivePolicy") or "{}")
    return QueueSettings(
        retention_seconds=int(attributes["MessageRetentionPeriod"]),
        dead_letter_arn=redrive.get("deadLetterTargetArn"),
        max_receive_count=max_receive_count(attributes),
    )


def max_receive_count(attributes: Mapping[str, str]) -> int | None:
    """The RedrivePolicy's maxReceiveCount among a queue's attributes, if it has one."""
    count = json.loads(attributes.get("RedrivePolicy") or "{}").get("maxReceiveCount")
    return None if count is None else int(count)


@dataclass(frozen=True)
class SendSettings:
    """What a sender needs to know of the queue it sends to."""

    fifo: bool
    content_based_deduplication: bool  # a FIFO queue that deduplicates by the body's SHA-256
    max_receive_count: int | None  # from the RedrivePolicy, if there is one


def send_settings(client: Any, queue_url: str) -> SendSettings:
    """The queue's kind, deduplication and maxReceiveCount, read in one call."""
    attributes = client.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["All"])[
        "Attributes"
    ]
    return SendSettings(
        fifo=attributes.get("FifoQueue") == "true",
        content_based_deduplication=attributes.get("ContentBasedDeduplication") == "true",
        max_receive_count=max_receive_count(attributes),
    )


def queue_of_arn(arn: str | None) -> tuple[str, str] | None:
    """(account, queue name) of an SQS queue's ARN (arn:aws:sqs:REGION:ACCOUNT:NAME); None for
    anything else."""
    parts = (arn or "").split(":")
    if len(parts) != 6 or parts[2] != "sqs":
        return None
    return parts[4], parts[5]


def dead_letter_queue_url(client: Any, arn: str) -> str:
    """The URL of the queue an ARN names (arn:aws:sqs:REGION:ACCOUNT:NAME)."""
    queue = queue_of_arn(arn)
    if queue is None:
        raise ResourceMissingError(f"the queue's RedrivePolicy names {quote(arn)}, not an SQS ARN")
    account, name = queue
    try:
        return resolve_queue_url(client, name, account)
    except ResourceMissingError as exc:
        raise ResourceMissingError(
            f"the dead-letter queue {quote(arn)} named by the queue's RedrivePolicy does not "
            "exist (fix the RedrivePolicy or create the queue)"
        ) from exc


class SqsSource:
    """Receives from one SQS queue with long polling."""

    def __init__(
        self,
        client: Any,
        queue_url: str,
        *,
        wait_time_seconds: int = 10,
        visibility_timeout: int = 30,
        dead_letter_url: str | None = None,
    ) -> None:
        self._client = client
        self.queue_url = queue_url
        self.dead_letter_url = dead_letter_url
        self._wait_time_seconds = wait_time_seconds
        self._visibility_timeout = visibility_timeout

    def receive(self, max_messages: int) -> list[Message]:
        response = self._client.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=max(1, min(MAX_BATCH, max_messages)),
            WaitTimeSeconds=self._wait_time_seconds,
            VisibilityTimeout=self._visibility_timeout,
            # Every system attribute: SentTimestamp and ApproximateReceiveCount, and on a FIFO
            # queue MessageGroupId, MessageDeduplicationId and SequenceNumber.
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        return [_to_message(raw) for raw in response.get("Messages", [])]

    def delete(self, messages: Sequence[Message]) -> None:
        for chunk in _chunks(messages):
            entries = [
                {"Id": str(i), "ReceiptHandle": m.receipt_handle} for i, m in enumerate(chunk)
            ]
            response = self._client.delete_message_batch(QueueUrl=self.queue_url, Entries=entries)
            self._log_failures("delete", chunk, response)

    def set_visibility(self, messages: Sequence[Message], seconds: int) -> None:
        for chunk in _chunks(messages):
            entries = [
                {"Id": str(i), "ReceiptHandle": m.receipt_handle, "VisibilityTimeout": seconds}
                for i, m in enumerate(chunk)
            ]
            response = self._client.change_message_visibility_batch(
                QueueUrl=self.queue_url, Entries=entries
            )
            self._log_failures("change the visibility of", chunk, response)

    def reject(self, message: Message, reason: str) -> None:
        if self.dead_letter_url is None:
            log.error(
                "invalid message %s deleted (the queue has no dead-letter queue): %s; body: %s",
                message.message_id,
                reason,
                quote(message.body.encode()[:_LOGGED_BODY_BYTES].decode(errors="ignore")),
            )
        else:
            attributes = dict(message.attributes)
            ours = {
                REJECT_REASON_ATTRIBUTE: {"DataType": "String", "StringValue": reason},
                ORIGINAL_ID_ATTRIBUTE: {"DataType": "String", "StringValue": message.message_id},
                RECEIVE_COUNT_ATTRIBUTE: {
                    "DataType": "Number",
                    "StringValue": str(message.receive_count),
                },
            }
            # As many of ours as there is room for, in this order, after the message's own.
            for name, value in ours.items():
                if len(attributes) < _MAX_MESSAGE_ATTRIBUTES:
                    attributes[name] = value
            request: dict[str, Any] = {
                "QueueUrl": self.dead_letter_url,
                "MessageBody": message.body,
                "MessageAttributes": attributes,
            }
            if is_fifo(self.dead_letter_url):
                # A FIFO queue's dead-letter queue is FIFO too. The source message id as the
                # deduplication id: a reject retried after a lost answer is not kept twice.
                request.update(fifo_send_parameters(message.group_id, message.message_id))
            self._client.send_message(**request)
            log.error(
                "invalid message %s moved to the dead-letter queue: %s",
                message.message_id,
                reason,
            )
        self.delete([message])

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


class QueueForwarder:
    """Sends received messages on to other queues of the account, named as routes name them: the
    same body and message attributes; on a FIFO queue, the same group (the event's, for a message
    from a standard queue) and the source message's id as the deduplication id, so that a forward
    retried after a lost answer is kept once."""

    def __init__(self, client: Any, account_id: str) -> None:
        self._client = client
        self._account_id = account_id
        self._mutex = threading.Lock()
        self._urls: dict[str, str] = {}  # GetQueueUrl once per queue, when first routed to

    def forward(self, message: Message, queue: str, event_id: str) -> str:
        """Send message to the queue named queue; the id of the message sent."""
        url = self._url(queue)
        request: dict[str, Any] = {"QueueUrl": url, "MessageBody": message.body}
        if message.attributes:
            request["MessageAttributes"] = sendable_attributes(message.attributes)
        if is_fifo(url):
            group = message.group_id or group_id_of(event_id)
            request.update(fifo_send_parameters(group, message.message_id))
        return str(self._client.send_message(**request)["MessageId"])

    def send(self, body: str, queue: str, event_id: str, deduplication_id: str) -> str:
        """Send a new message of body to the queue named queue (a pipeline's step); on a FIFO
        queue, in event_id's group, kept once per deduplication_id. The id of the message sent."""
        url = self._url(queue)
        return send_noted(self._client, url, body, None, group_id_of(event_id), deduplication_id)

    def _url(self, queue: str) -> str:
        with self._mutex:
            known = self._urls.get(queue)
        if known is None:
            known = resolve_queue_url(self._client, queue, self._account_id)
            with self._mutex:
                self._urls[queue] = known
        return known


def _to_message(raw: dict[str, Any]) -> Message:
    attributes = raw.get("Attributes", {})
    return Message(
        message_id=raw["MessageId"],
        receipt_handle=raw["ReceiptHandle"],
        body=raw.get("Body", ""),
        sent_at=int(attributes.get("SentTimestamp", 0)) / 1000.0,
        receive_count=int(attributes.get("ApproximateReceiveCount", 1)),
        attributes=raw.get("MessageAttributes", {}),
        group_id=attributes.get("MessageGroupId"),
    )
