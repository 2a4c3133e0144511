"""`sqsjkr dlq`: the messages in the queue's dead-letter queue: list, show, send back or delete them.

Reading a queue takes its messages for a while: every one read is made visible again at once after.
"""

from __future__ import annotations

import base64
import functools
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import click
from botocore.exceptions import BotoCoreError, ClientError

from sqsjkr.backends.aws import describe, make_client, make_session
from sqsjkr.backends.sqs import (
    MAX_BATCH,
    ORIGINAL_ID_ATTRIBUTE,
    RECEIVE_COUNT_ATTRIBUTE,
    REJECT_REASON_ATTRIBUTE,
    dead_letter_queue_url,
    fifo_send_parameters,
    is_fifo,
    queue_settings,
    resolve_queue_url,
    sendable_attributes,
)
from sqsjkr.commands.audit import Auditor, command_auditor
from sqsjkr.commands.options import (
    UsageFailure,
    conf_option,
    load,
    profile_option,
    queue_option,
    reason_option,
    region_option,
)
from sqsjkr.commands.tables import aligned
from sqsjkr.contract.config import Config, Overrides
from sqsjkr.contract.job import parse_job
from sqsjkr.contract.masking import MASK, secret_key, shown_body
from sqsjkr.errors import InvalidJobError, ResourceMissingError, quote
from sqsjkr.fleet.wording import local_time
from sqsjkr.observability.logs import escape

#: How long a listing hides what it has read: long enough that one listing does not read a
#: message twice, short enough that a listing cut off (a kill -9) hides nothing for long.
PEEK_VISIBILITY_SECONDS = 30
#: A short long poll: it asks every SQS server, so an empty answer means no more messages.
PEEK_WAIT_SECONDS = 1
BODY_EXCERPT = 80
#: The longest error a listing shows: a longer one is cut, so that one long reason does not pad
#: every row (`dlq show` prints it whole).
ERROR_EXCERPT = 60
#: The attributes the daemon adds to a message it dead-letters; a redrive leaves them behind.
OUR_ATTRIBUTE_PREFIX = "sqsjkr_"


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


def open_queues(conf: str, profile: str | None, region: str | None, queue: str | None) -> Queues:
    return queues_of(load(conf, Overrides(profile=profile, region=region)), queue)


def queues_of(config: Config, queue: str | None, sqs: Any = None) -> Queues:
    """The queue (default: [sqs] queue_name) and its dead-letter queue, of a loaded config,
    through sqs (default: a client of the config's own)."""
    if sqs is None:
        session = make_session(region=config.account.region, profile=config.account.profile)
        sqs = make_client(session, "sqs")
    name = queue or config.sqs.queue_name
    url = resolve_queue_url(sqs, name, config.account.id)
    arn = queue_settings(sqs, url).dead_letter_arn
    if arn is None:
        raise ResourceMissingError(
            f"queue {name!r} has no RedrivePolicy, so no dead-letter queue: the daemon logs and "
            "drops malformed messages"
        )
    dlq_url = dead_letter_queue_url(sqs, arn)
    return Queues(sqs, name, url, arn.rsplit(":", 1)[-1], dlq_url, config)


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
    def error(self) -> str | None:
        """Why the daemon dead-lettered it; None when SQS moved it after maxReceiveCount."""
        return self._ours(REJECT_REASON_ATTRIBUTE)

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
            "body": self.shown_body(None),
            "message_attributes": {
                name: shown_attribute(name, value) for name, value in self.attributes.items()
            },
            "attributes": dict(self.system),
        }


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


class Peek:
    """Reads every message of a queue without consuming it; leaving the block makes every one
    read and not deleted visible again at once."""

    def __init__(self, sqs: Any, url: str) -> None:
        self._sqs = sqs
        self._url = url
        self._held: dict[str, DeadLetter] = {}

    def __enter__(self) -> Peek:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def pages(self) -> Iterator[list[DeadLetter]]:
        """The messages, a receive at a time, until a receive brings no message not yet read."""
        seen: set[str] = set()
        while True:
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
        self._sqs.delete_message(QueueUrl=self._url, ReceiptHandle=letter.receipt_handle)
        self._held.pop(letter.message_id, None)

    def delete_batch(self, letters: Sequence[DeadLetter]) -> list[str]:
        """Delete up to MAX_BATCH letters in one call; why each one that was not deleted failed."""
        entries = [
            {"Id": str(i), "ReceiptHandle": letter.receipt_handle}
            for i, letter in enumerate(letters)
        ]
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
                click.echo(
                    f"sqsjkr: warning: message {message_id} stays hidden for up to "
                    f"{PEEK_VISIBILITY_SECONDS}s: {why}",
                    err=True,
                )


# -- showing ------------------------------------------------------------------------------------


def excerpt(text: str, limit: int = BODY_EXCERPT) -> str:
    """text's start, escaped; "..." says it was cut."""
    return escape(text[:limit]) + ("..." if len(text) > limit else "")


LIST_HEADER = ["DLQ MESSAGE ID", "ORIGINAL ID", "RECEIVES", "SENT", "ERROR", "BODY"]


def list_row(letter: DeadLetter) -> list[str]:
    return [
        letter.message_id,
        letter.original_id,
        str(letter.receive_count),
        local_time(letter.sent_at),
        excerpt(letter.error, ERROR_EXCERPT) if letter.error is not None else "-",
        excerpt(letter.shown_body(None)),
    ]


def show_text(letter: DeadLetter) -> list[str]:
    """The whole message: its ids, why it is there, every attribute and the body."""
    error = letter.error
    lines = [
        f"message id:    {escape(letter.message_id)} (in the dead-letter queue)",
        f"original id:   {escape(letter.original_id)}",
        f"receive count: {letter.receive_count}",
        f"sent:          {local_time(letter.sent_at)}",
        "error:         "
        + (
            escape(error)
            if error is not None
            else "none (not moved by sqsjkr: SQS moves a message after maxReceiveCount receives)"
        ),
        "message attributes:",
    ]
    for name, value in sorted(letter.attributes.items()):
        shown = shown_attribute(name, value)
        text = shown.get("StringValue") or f"{shown['BinaryValue']} (base64)"
        lines.append(f"  {escape(name)} ({escape(shown['DataType'])}): {escape(text)}")
    lines.append("attributes:")
    lines += [f"  {name}: {escape(value)}" for name, value in sorted(letter.system.items())]
    lines.append("body:")
    # Line by line: a JSON body stays readable, and nothing in it can drive the terminal.
    lines += [escape(line) for line in letter.shown_body().split("\n")]
    return lines


# -- redriving ----------------------------------------------------------------------------------


def malformed(letter: DeadLetter) -> str | None:
    """Why the daemon would dead-letter the body again, by its own parser; None if it would not."""
    try:
        parse_job(letter.body, message_id=letter.message_id, sent_at=letter.sent_at)
    except InvalidJobError as exc:
        return str(exc)
    return None


def send_back(queues: Queues, letter: DeadLetter) -> str:
    """Send a copy to the job queue, without the attributes the daemon added; its new id."""
    attributes = sendable_attributes(
        {k: v for k, v in letter.attributes.items() if not k.startswith(OUR_ATTRIBUTE_PREFIX)}
    )
    request: dict[str, Any] = {"QueueUrl": queues.url, "MessageBody": letter.body}
    if attributes:
        request["MessageAttributes"] = attributes
    if queues.fifo:
        # Back into its own group (SQS and the daemon's reject keep the group in the DLQ), and
        # deduplicated by its original id: a redrive retried after a lost answer, within SQS's
        # five minutes, is not sent twice. No DelaySeconds: FIFO queues refuse it per message.
        request.update(
            fifo_send_parameters(letter.system.get("MessageGroupId"), letter.original_id)
        )
    return str(queues.sqs.send_message(**request)["MessageId"])


@dataclass
class Redrive:
    """What one redrive did: a message that was not moved stays in the dead-letter queue."""

    queues: Queues
    peek: Peek
    force: bool
    moved: int = 0
    errors: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    #: Where a line of what it did goes, and a warning: the terminal's stdout and stderr, or
    #: the dashboard's answer.
    say: Callable[[str], None] = click.echo
    warn: Callable[[str], None] = functools.partial(click.echo, err=True)

    def move(self, letter: DeadLetter) -> None:
        label = letter_label(letter)
        reason = malformed(letter)
        if reason is not None and not self.force:
            self.warn(
                f"sqsjkr: warning: {label} not moved: its body would be dead-lettered again "
                f"({escape(reason)}); pass --force to send it anyway"
            )
            self.skipped.append(letter.message_id)
            return
        try:
            new_id = send_back(self.queues, letter)
        except (BotoCoreError, ClientError) as exc:
            self.errors.append(
                f"{label} not moved (left in the dead-letter queue): {describe(exc)}"
            )
            return
        try:
            self.peek.delete(letter)
        except (BotoCoreError, ClientError) as exc:
            self.errors.append(
                f"{label} was sent to queue {self.queues.name} as {new_id} but is still in the "
                f"dead-letter queue, so it may run twice: {describe(exc)}"
            )
            return
        self.moved += 1
        self.say(f"moved {label} to queue {self.queues.name} as {new_id}")


def find_named(peek: Peek, wanted: Sequence[str]) -> tuple[list[DeadLetter], list[str]]:
    """The messages of these ids (DLQ or original), and the ids not found."""
    missing = list(dict.fromkeys(wanted))
    found: list[DeadLetter] = []
    for page in peek.pages():
        for letter in page:
            hits = [w for w in missing if letter.matches(w)]
            if hits:
                found.append(letter)
                missing = [w for w in missing if w not in hits]
        if not missing:
            break
    return found, missing


def redrive_named(redrive: Redrive, wanted: Sequence[str]) -> list[str]:
    """Move the messages of these ids (DLQ or original); the ids not found."""
    found, missing = find_named(redrive.peek, wanted)
    for letter in found:
        redrive.move(letter)
    return missing


# -- the commands -------------------------------------------------------------------------------


def queue_options(command: Any) -> Any:
    for option in (queue_option, region_option, profile_option, conf_option):
        command = option(command)
    return command


@click.group()
def dlq() -> None:
    """The dead-letter queue of the job queue: list, show, redrive and delete its messages."""


@dlq.command("list")
@queue_options
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array, an object per message.")
def list_(
    conf: str, profile: str | None, region: str | None, queue_name: str | None, as_json: bool
) -> None:
    """Every message in the dead-letter queue, left there."""
    queues = open_queues(conf, profile, region, queue_name)
    with Peek(queues.sqs, queues.dlq_url) as peek:
        letters = [letter for page in peek.pages() for letter in page]
    letters.sort(key=lambda letter: letter.sent_at)
    if as_json:
        click.echo(json.dumps([letter.as_json() for letter in letters], indent=2))
    elif not letters:
        click.echo(f"no messages in dead-letter queue {queues.dlq_name}", err=True)
    else:
        for line in aligned([LIST_HEADER, *map(list_row, letters)]):
            click.echo(line)


@dlq.command()
@queue_options
@click.option("--json", "as_json", is_flag=True, help="Print the message as a JSON object.")
@click.argument("message_id")
def show(
    conf: str,
    profile: str | None,
    region: str | None,
    queue_name: str | None,
    as_json: bool,
    message_id: str,
) -> int:
    """One message, whole: MESSAGE_ID is its id in the dead-letter queue or its original id."""
    queues = open_queues(conf, profile, region, queue_name)
    with Peek(queues.sqs, queues.dlq_url) as peek:
        letter = next(
            (found for page in peek.pages() for found in page if found.matches(message_id)), None
        )
    if letter is None:
        click.echo(
            f"sqsjkr: error: no message {quote(message_id)} in dead-letter queue {queues.dlq_name}",
            err=True,
        )
        return 1
    if as_json:
        click.echo(json.dumps(letter.as_json(), indent=2))
    else:
        for line in show_text(letter):
            click.echo(line)
    return 0


@dlq.command()
@queue_options
@click.option("--all", "all_", is_flag=True, help="Every message in the dead-letter queue.")
@click.option("--yes", "-y", is_flag=True, help="With --all: do not ask first.")
@click.option("--force", is_flag=True, help="Send malformed messages back too.")
@reason_option
@click.argument("message_ids", nargs=-1)
def redrive(
    conf: str,
    profile: str | None,
    region: str | None,
    queue_name: str | None,
    all_: bool,
    yes: bool,
    force: bool,
    reason: str,
    message_ids: tuple[str, ...],
) -> int:
    """Send messages back to the job queue, then delete them from the dead-letter queue.

    MESSAGE_IDS are ids in the dead-letter queue or original ids. A message whose body the daemon
    would refuse again is left unless --force. Exit 1 when a named message was not moved or a
    send failed.
    """
    if all_ == bool(message_ids):
        raise UsageFailure("redrive takes message ids or --all (not both)")
    queues = open_queues(conf, profile, region, queue_name)
    if all_ and not yes:
        click.confirm(
            f"Send every message of dead-letter queue {queues.dlq_name} back to queue "
            f"{queues.name}?",
            abort=True,
            err=True,
        )
    run = redrive_letters(
        queues, command_auditor(queues.config), None if all_ else message_ids, force, reason
    )
    for error in run.errors:
        click.echo(f"sqsjkr: error: {error}", err=True)
    click.echo(
        f"{run.moved} moved, {len(run.skipped)} left as malformed, {len(run.errors)} failed",
        err=True,
    )
    named_left = bool(run.skipped) and not all_
    return 1 if run.errors or named_left else 0


def redrive_letters(
    queues: Queues,
    audit: Auditor,
    message_ids: Sequence[str] | None,
    force: bool,
    reason: str,
    **report: Callable[[str], None],
) -> Redrive:
    """Move the named messages (None: every one) back to the job queue, audited first: what
    `dlq redrive` and the dashboard both do. A named message not found is one of its errors;
    report may name say and warn (Redrive's)."""
    target = "every dead letter" if message_ids is None else " ".join(message_ids)
    audit("dlq redrive", target, reason=reason, detail=f"{queues.dlq_name} to {queues.name}")
    with Peek(queues.sqs, queues.dlq_url) as peek:
        run = Redrive(queues, peek, force, **report)  # type: ignore[arg-type]
        missing: list[str] = []
        if message_ids is None:
            for page in peek.pages():
                for letter in page:
                    run.move(letter)
        else:
            missing = redrive_named(run, message_ids)
    for message_id in missing:
        run.errors.append(f"no message {quote(message_id)} in dead-letter queue {queues.dlq_name}")
    return run


def letter_label(letter: DeadLetter) -> str:
    return escape(f"{letter.message_id} (original {letter.original_id})")


@dlq.command()
@queue_options
@reason_option
@click.argument("message_ids", nargs=-1, required=True)
def delete(
    conf: str,
    profile: str | None,
    region: str | None,
    queue_name: str | None,
    reason: str,
    message_ids: tuple[str, ...],
) -> int:
    """Delete messages from the dead-letter queue for good, unrun.

    MESSAGE_IDS are ids in the dead-letter queue or original ids. Exit 1 when one was not found.
    """
    queues = open_queues(conf, profile, region, queue_name)
    command_auditor(queues.config)(
        "dlq delete", " ".join(message_ids), reason=reason, detail=f"from {queues.dlq_name}"
    )
    with Peek(queues.sqs, queues.dlq_url) as peek:
        found, missing = find_named(peek, message_ids)
        for letter in found:
            peek.delete(letter)
            click.echo(f"deleted {letter_label(letter)}")
    for message_id in missing:
        click.echo(
            f"sqsjkr: error: no message {quote(message_id)} in dead-letter queue {queues.dlq_name}",
            err=True,
        )
    return 1 if missing else 0


@dlq.command()
@queue_options
@click.option("--yes", "-y", is_flag=True, help="Do not ask first.")
@reason_option
def purge(
    conf: str,
    profile: str | None,
    region: str | None,
    queue_name: str | None,
    yes: bool,
    reason: str,
) -> int:
    """Delete every message of the dead-letter queue for good, unrun, after asking.

    It reads and deletes them a receive at a time (not SQS's PurgeQueue, which allows one call a
    minute and may take a minute), and says how many went. Exit 1 when one could not be deleted.
    """
    queues = open_queues(conf, profile, region, queue_name)
    if not yes:
        click.confirm(
            f"Delete every message of dead-letter queue {queues.dlq_name}, unrun?",
            abort=True,
            err=True,
        )
    command_auditor(queues.config)("dlq purge", queues.dlq_name, reason=reason)
    deleted, failed = 0, []
    with Peek(queues.sqs, queues.dlq_url) as peek:
        for page in peek.pages():
            failures = peek.delete_batch(page)
            deleted += len(page) - len(failures)
            failed += failures
    for failure in failed:
        click.echo(f"sqsjkr: error: not deleted: {failure}", err=True)
    click.echo(f"deleted {deleted} message(s) from dead-letter queue {queues.dlq_name}")
    return 1 if failed else 0
