"""The dead-letter queue of a job queue, read without consuming it: the queues (Queues), a message
read from it (DeadLetter), and the reader (Peek), which makes every message it read visible again.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from sqsjkr.backends.aws import describe, make_client, make_session
from sqsjkr.backends.sqs import (
    MAX_BATCH,
    ORIGINAL_ID_ATTRIBUTE,
    RECEIVE_COUNT_ATTRIBUTE,
    REJECT_REASON_ATTRIBUTE,
    dead_letter_queue_url,
    is_fifo,
    queue_settings,
    resolve_queue_url,
)
from sqsjkr.contract import safe_json
from sqsjkr.contract.config import Config
from sqsjkr.contract.firing import Firing, parse_firing
from sqsjkr.contract.masking import MASK, secret_key, shown_body
from sqsjkr.errors import InvalidJobError, ResourceMissingError
from sqsjkr.observability.logs import escape

_log = logging.getLogger(__name__)

#: How long a listing hides what it has read: long enough that one listing does not read a
#: message twice, short enough that a listing cut off (a kill -9) hides nothing for long.
PEEK_VISIBILITY_SECONDS = 30
#: A short long poll: it asks every SQS server, so an empty answer means no more messages.
PEEK_WAIT_SECONDS = 1
#: How long the letters one read of a dead-letter queue found answer this process's next reads
#: of it: readers at once (the dashboard's views, the API's clients) see the same letters, and
#: raise each letter's receive count once, not once each. A change made here (a redrive, a
#: delete) is seen at once; one made elsewhere, within these seconds.
LETTERS_FRESH_SECONDS = 5.0
#: The message attributes EventBridge Scheduler puts on a dead-letter event, a firing it could
#: not deliver (its guide, "Configuring a schedule's dead-letter queue"; local mode's scheduler
#: puts them too): a redrive leaves them behind.
SCHEDULER_ATTRIBUTES = (
    "ERROR_CODE",
    "ERROR_MESSAGE",
    "EXECUTION_ID",
    "EXHAUSTED_RETRY_CONDITION",
    "INVOCATION_ID",
    "IS_PAYLOAD_TRUNCATED",
    "RETRY_ATTEMPTS",
    "SCHEDULED_TIME",
    "SCHEDULE_ARN",
    "TARGET_ARN",
)


@dataclass(frozen=True)
class Queues:
    """The job queue and the dead-letter queue its RedrivePolicy names."""

    sqs: Any
    name: str
    url: str
    dlq_name: str
    dlq_url: str
    config: Config

    @property
    def fifo(self) -> bool:
        return is_fifo(self.name)


def queues_of(config: Config, queue: str | None, sqs: Any = None, dlq: str | None = None) -> Queues:
    """The queue (default: [sqs] queue_name) and its dead-letter queue, of a loaded config,
    through sqs (default: a client of the config's own); dlq: another queue read as its dead
    letters (the schedules' own, which a FIFO queue's schedules need: the module's
    schedule_dlq_url)."""
    if sqs is None:
        session = make_session(region=config.account.region, profile=config.account.profile)
        sqs = make_client(session, "sqs")
    name = queue or config.sqs.queue_name
    url = resolve_queue_url(sqs, name, config.account.id)
    if dlq is not None:
        return Queues(sqs, name, url, dlq, resolve_queue_url(sqs, dlq, config.account.id), config)
    arn = queue_settings(sqs, url).dead_letter_arn
    if arn is None:
        raise ResourceMissingError(
            f"queue {name!r} has no RedrivePolicy, so no dead-letter queue: the daemon logs and "
            "drops malformed messages"
        )
    dlq_url = dead_letter_queue_url(sqs, arn)
    return Queues(sqs, name, url, arn.rsplit(":", 1)[-1], dlq_url, config)


@dataclass(frozen=True)
class Undelivered:
    """A firing EventBridge Scheduler could not put on the queue, from its dead-letter event's
    attributes: its schedule, the firing's time (its body's firing, when substituted), why."""

    schedule: str
    firing: Firing | None
    error_code: str | None
    error_message: str | None
    retry_attempts: str | None
    exhausted: str | None  # which retry limit ran out (EXHAUSTED_RETRY_CONDITION)

    @property
    def why(self) -> str:
        """One line: the firing, its schedule and the scheduler's error."""
        when = "a firing" if self.firing is None else f"the {self.firing.iso} firing"
        error = ": ".join(part for part in (self.error_code, self.error_message) if part)
        return f"the scheduler could not deliver {when} of {self.schedule}" + (
            f" ({error})" if error else ""
        )

    @property
    def error(self) -> str:
        """The scheduler's own error, code and message: what to act on."""
        return ": ".join(part for part in (self.error_code, self.error_message) if part) or (
            "no error given"
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "schedule": self.schedule,
            "firing_at": None if self.firing is None else self.firing.iso,
            "error_code": self.error_code,
            "error_message": self.error_message,
            "retry_attempts": self.retry_attempts,
            "exhausted_retry_condition": self.exhausted,
        }


@dataclass(frozen=True)
class DeadLetter:
    """One message read from the dead-letter queue."""

    message_id: str
    receipt_handle: str
    body: str
    system: Mapping[str, str]  # SentTimestamp, ApproximateReceiveCount, MessageGroupId, ...
    attributes: Mapping[str, Any] = field(default_factory=dict)  # message attributes

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> DeadLetter:
        return cls(
            raw["MessageId"],
            raw["ReceiptHandle"],
            raw.get("Body", ""),
            raw.get("Attributes", {}),
            raw.get("MessageAttributes", {}),
        )

    def __repr__(self) -> str:
        # A program's log may print a letter: its body masked as every face shows it.
        return (
            f"DeadLetter(message_id={self.message_id!r}, original_id={self.original_id!r}, "
            f"error={self.error!r}, body={self.shown_body(None)!r})"
        )

    def _ours(self, name: str) -> str | None:
        value = self.attributes.get(name)
        return None if value is None else str(value.get("StringValue"))

    @property
    def original_id(self) -> str:
        """Its id on the job queue, as the daemon logged it; SQS moves a message with its id."""
        return self._ours(ORIGINAL_ID_ATTRIBUTE) or self.message_id

    @property
    def receive_count(self) -> int:
        """Receives on the job queue, when the daemon moved it; else the DLQ's own count (which
        SQS carries over from the job queue, and to which every listing adds one)."""
        count = self._ours(RECEIVE_COUNT_ATTRIBUTE) or self.system.get("ApproximateReceiveCount")
        return int(count or 0)

    @property
    def undelivered(self) -> Undelivered | None:
        """The firing, when it is one the Scheduler could not deliver (its dead-letter event)."""
        schedule = self._ours("SCHEDULE_ARN")
        if schedule is None:
            return None
        return Undelivered(
            schedule,
            self.firing,
            self._ours("ERROR_CODE"),
            self._ours("ERROR_MESSAGE"),
            self._ours("RETRY_ATTEMPTS"),
            self._ours("EXHAUSTED_RETRY_CONDITION"),
        )

    @property
    def firing(self) -> Firing | None:
        """The firing its body names, if it names one the daemon would take."""
        try:
            return parse_firing(parse_job_fields(self.body))
        except (InvalidJobError, ValueError):
            return None

    @property
    def firing_unknown(self) -> str:
        """Why no firing is known of it (firing is None), in words."""
        try:
            parse_firing(parse_job_fields(self.body))
        except InvalidJobError as exc:
            return f"unreadable: {exc}"  # a firing the contract refuses (issue 30, item 8)
        except ValueError as exc:
            return f"unknown: its body {exc}"
        return "unknown (its body names none)"

    @property
    def error(self) -> str | None:
        """Why it is here: the daemon's reason, or the Scheduler's for a firing it could not
        deliver; None when SQS moved it after maxReceiveCount."""
        undelivered = self.undelivered
        return self._ours(REJECT_REASON_ATTRIBUTE) or (
            undelivered.why if undelivered is not None else None
        )

    @property
    def sent_at(self) -> float:
        return int(self.system.get("SentTimestamp", 0)) / 1000

    def matches(self, wanted: str) -> bool:
        return wanted in (self.message_id, self.original_id)

    def shown_body(self, indent: int | None = 2) -> str:
        """Its body as it may be shown: a JSON body with what may be secret masked (the
        dashboard's rule), any other as it is (a face escapes it)."""
        shown = shown_body(self.body, indent)
        return self.body if shown is None else shown

    def as_json(self) -> dict[str, Any]:
        return {
            "message_id": self.message_id,
            "original_id": self.original_id,
            "receive_count": self.receive_count,
            "sent_at": self.sent_at,
            "error": self.error,
            "undelivered": None if self.undelivered is None else self.undelivered.as_json(),
            "body": self.shown_body(None),
            "message_attributes": {
                name: shown_attribute(name, value) for name, value in self.attributes.items()
            },
            "attributes": dict(self.system),
        }


def parse_job_fields(body: str) -> dict[str, Any]:
    """A body's JSON object, by the one safe decoder; JsonError (a ValueError) when it is none."""
    return safe_json.loads_object(body)


def attribute_json(value: Mapping[str, Any]) -> dict[str, str]:
    """A message attribute for JSON: a binary value in base64, as the AWS CLI shows it."""
    shown = {"DataType": str(value.get("DataType"))}
    if "BinaryValue" in value:
        shown["BinaryValue"] = base64.b64encode(value["BinaryValue"]).decode()
    else:
        shown["StringValue"] = str(value.get("StringValue"))
    return shown


def shown_attribute(name: str, value: Mapping[str, Any]) -> dict[str, str]:
    """A message attribute as it may be shown: its value masked when its name looks secret."""
    shown = attribute_json(value)
    if secret_key(name):
        shown = {k: v if k == "DataType" else MASK for k, v in shown.items()}
    return shown


class _Peeks:
    """What this process's peeks of each queue share: a lock, since SQS has no true peek (a
    receive hides what it reads from every other reader until it is released, so two peeks at
    once each find part of the queue), and the letters its last read found, for read_letters."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._mutex = threading.Lock()
        # Reentrant: a peek within another of the same thread does not wait for itself.
        self._locks: dict[str, threading.RLock] = {}
        self._last: dict[str, tuple[float, list[DeadLetter]]] = {}

    def lock(self, url: str) -> threading.RLock:
        with self._mutex:
            return self._locks.setdefault(url, threading.RLock())

    def last_read(self, url: str) -> list[DeadLetter] | None:
        """The letters a read of url found within LETTERS_FRESH_SECONDS, or None."""
        with self._mutex:
            found = self._last.get(url)
            if found is None or self.clock() - found[0] >= LETTERS_FRESH_SECONDS:
                return None
            return list(found[1])

    def keep(self, url: str, letters: list[DeadLetter]) -> None:
        with self._mutex:
            self._last[url] = (self.clock(), list(letters))

    def forget(self, url: str) -> None:
        with self._mutex:
            self._last.pop(url, None)


_PEEKS = _Peeks()


class Peek:
    """Reads every message of a queue without consuming it; leaving the block makes every one
    read and not deleted visible again at once. The peeks of one queue in this process take
    turns, so that none hides letters from another."""

    def __init__(self, sqs: Any, url: str, warn: Callable[[str], None] | None = None) -> None:
        self._sqs = sqs
        self._url = url
        # Who hears of a message that stays hidden: the face, or this module's log.
        self._warn = warn or _log.warning
        self._held: dict[str, DeadLetter] = {}
        self._turn = _PEEKS.lock(url)
        self._taking_turns = contextlib.ExitStack()

    def __enter__(self) -> Peek:
        self._taking_turns.enter_context(self._turn)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.release()
        finally:
            self._taking_turns.close()  # the next peek of this queue's turn

    def last_read(self) -> list[DeadLetter] | None:
        """The letters a read of this queue in this process found within
        LETTERS_FRESH_SECONDS (None: none did, or a delete here changed the queue since)."""
        return _PEEKS.last_read(self._url)

    def keep(self, letters: list[DeadLetter]) -> None:
        """Keep letters, what a read of the queue found, as its last read."""
        _PEEKS.keep(self._url, letters)

    def pages(self, expected: int | None = None) -> Iterator[list[DeadLetter]]:
        """The messages, a receive at a time, until a receive brings no message not yet read
        (which waits PEEK_WAIT_SECONDS), or once `expected` of them were read."""
        seen: set[str] = set()
        while expected is None or len(seen) < expected:
            response = self._sqs.receive_message(
                QueueUrl=self._url,
                MaxNumberOfMessages=MAX_BATCH,
                VisibilityTimeout=PEEK_VISIBILITY_SECONDS,
                WaitTimeSeconds=PEEK_WAIT_SECONDS,
                AttributeNames=["All"],
                MessageAttributeNames=["All"],
            )
            letters = [DeadLetter.of(raw) for raw in response.get("Messages", [])]
            # A message read twice is released by its latest receipt handle only.
            self._held.update((letter.message_id, letter) for letter in letters)
            new = [letter for letter in letters if letter.message_id not in seen]
            if not new:
                return
            seen.update(letter.message_id for letter in new)
            yield new

    def delete(self, letter: DeadLetter) -> None:
        _PEEKS.forget(self._url)
        self._sqs.delete_message(QueueUrl=self._url, ReceiptHandle=letter.receipt_handle)
        self._held.pop(letter.message_id, None)

    def delete_batch(self, letters: Sequence[DeadLetter]) -> list[str]:
        """Delete up to MAX_BATCH letters in one call; why each one that was not deleted failed."""
        entries = [
            {"Id": str(i), "ReceiptHandle": letter.receipt_handle}
            for i, letter in enumerate(letters)
        ]
        _PEEKS.forget(self._url)
        response = self._sqs.delete_message_batch(QueueUrl=self._url, Entries=entries)
        failed = {
            int(f["Id"]): f.get("Message", f.get("Code", "")) for f in response.get("Failed", [])
        }
        for i, letter in enumerate(letters):
            if i not in failed:
                self._held.pop(letter.message_id, None)
        return [f"{escape(letters[i].message_id)}: {why}" for i, why in failed.items()]

    def release(self) -> None:
        """Make what is still held visible again; a failure only delays it by the timeout."""
        held = list(self._held.values())
        self._held.clear()
        for start in range(0, len(held), MAX_BATCH):
            chunk = held[start : start + MAX_BATCH]
            entries = [
                {"Id": str(i), "ReceiptHandle": letter.receipt_handle, "VisibilityTimeout": 0}
                for i, letter in enumerate(chunk)
            ]
            try:
                response = self._sqs.change_message_visibility_batch(
                    QueueUrl=self._url, Entries=entries
                )
                failed = [
                    (chunk[int(f["Id"])].message_id, f.get("Message", f.get("Code", "")))
                    for f in response.get("Failed", [])
                ]
            except (BotoCoreError, ClientError) as exc:
                failed = [(letter.message_id, describe(exc)) for letter in chunk]
            for message_id, why in failed:
                self._warn(
                    f"message {message_id} stays hidden for up to {PEEK_VISIBILITY_SECONDS}s: {why}"
                )


def read_letters(
    queues: Queues, warn: Callable[[str], None] | None = None, *, counted: bool = False
) -> list[DeadLetter]:
    """Every message of the dead-letter queue, oldest sent first, left there.

    counted: read as many as the queue counts (one GetQueueAttributes) and stop, without the
    last receive that waits to prove none is left: a page's read, which must not block each
    view. A letter that arrived a moment ago, not counted yet, shows at the next read."""
    expected = letter_count(queues) if counted else None
    if expected == 0:
        return []
    with Peek(queues.sqs, queues.dlq_url, warn) as peek:
        # Within the turn: readers that waited for this one's read answer its letters.
        letters = peek.last_read()
        if letters is None:
            letters = sorted(
                (letter for page in peek.pages(expected) for letter in page),
                key=lambda letter: letter.sent_at,
            )
            peek.keep(letters)
    return letters


def letter_count(queues: Queues) -> int:
    """How many messages the dead-letter queue holds, visible to a reader, as SQS counts them."""
    attributes = queues.sqs.get_queue_attributes(
        QueueUrl=queues.dlq_url, AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]
    return int(attributes.get("ApproximateNumberOfMessages", 0))


def find_letter(
    queues: Queues, message_id: str, warn: Callable[[str], None] | None = None
) -> DeadLetter | None:
    """The message of the dead-letter queue whose id (DLQ or original) is message_id, or None."""
    with Peek(queues.sqs, queues.dlq_url, warn) as peek:
        kept = peek.last_read() or []
        return next((found for found in kept if found.matches(message_id)), None) or next(
            (found for page in peek.pages() for found in page if found.matches(message_id)), None
        )
