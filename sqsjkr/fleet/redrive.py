"""Acting on a dead-letter queue's messages, each action audited first: send them back to the job
queue (unless the daemon would refuse their bodies again), delete them, or purge the queue.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from sqsjkr.backends.aws import describe
from sqsjkr.backends.sqs import fifo_send_parameters, group_id_of, sendable_attributes
from sqsjkr.contract.job import parse_job
from sqsjkr.errors import InvalidJobError, quote
from sqsjkr.fleet.audit import Auditor
from sqsjkr.fleet.dead_letters import SCHEDULER_ATTRIBUTES, DeadLetter, Peek, Queues
from sqsjkr.observability.logs import escape

#: The attributes the daemon adds to a message it dead-letters; a redrive leaves them behind.
OUR_ATTRIBUTE_PREFIX = "sqsjkr_"


def _ignore(line: str) -> None:
    """Where a line goes that no one asked to hear."""


def malformed(letter: DeadLetter) -> str | None:
    """Why the daemon would dead-letter the body again, by its own parser; None if it would not."""
    try:
        parse_job(letter.body, message_id=letter.message_id, sent_at=letter.sent_at)
    except InvalidJobError as exc:
        return str(exc)
    return None


def _event_id(body: str) -> str | None:
    try:
        return parse_job(body, message_id="-", sent_at=0.0).event_id
    except InvalidJobError:
        return None


def send_back(queues: Queues, letter: DeadLetter) -> str:
    """Send a copy to the job queue, without the attributes the daemon added; its new id."""
    # Neither the daemon's attributes nor the Scheduler's (a firing it could not deliver goes
    # back as the firing its body already names).
    attributes = sendable_attributes(
        {
            k: v
            for k, v in letter.attributes.items()
            if not k.startswith(OUR_ATTRIBUTE_PREFIX) and k not in SCHEDULER_ATTRIBUTES
        }
    )
    request: dict[str, Any] = {"QueueUrl": queues.url, "MessageBody": letter.body}
    if attributes:
        request["MessageAttributes"] = attributes
    if queues.fifo:
        # Back into its own group (SQS and the daemon's reject keep the group in the DLQ), and
        # deduplicated by its original id: a redrive retried after a lost answer, within SQS's
        # five minutes, is not sent twice. No DelaySeconds: FIFO queues refuse it per message.
        # The Scheduler's dead letters come from a standard queue, with no group: its job's.
        group = letter.system.get("MessageGroupId") or group_id_of(_event_id(letter.body))
        request.update(fifo_send_parameters(group, letter.original_id))
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
    #: Why there was nothing to move (none of the named letters, or no letter at all), if so.
    nothing: str | None = None
    #: Where a line of what it did goes, and a warning: the face's.
    say: Callable[[str], None] = field(default=lambda line: None)
    warn: Callable[[str], None] = field(default=lambda line: None)

    def move(self, letter: DeadLetter) -> None:
        label = letter_label(letter)
        reason = malformed(letter)
        if reason is not None and not self.force:
            self.warn(
                f"{label} not moved: its body would be dead-lettered again "
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


def redrive_letters(
    queues: Queues,
    audit: Auditor,
    message_ids: Sequence[str] | None,
    force: bool,
    reason: str,
    *,
    say: Callable[[str], None] = _ignore,
    warn: Callable[[str], None] = _ignore,
) -> Redrive:
    """Move the named messages (None: every one) back to the job queue, audited first. A named
    message not found is one of its errors; say hears each one moved, warn each one left as
    malformed and each one that stays hidden a while."""
    target = "every dead letter" if message_ids is None else " ".join(message_ids)
    detail = f"{queues.dlq_name} to {queues.name}"
    entry = audit("dlq redrive", target, reason=reason, detail=detail, force=force)
    with Peek(queues.sqs, queues.dlq_url, warn) as peek:
        run = Redrive(queues, peek, force, say=say, warn=warn)
        missing: list[str] = []
        if message_ids is None:
            for page in peek.pages():
                for letter in page:
                    run.move(letter)
        else:
            missing = redrive_named(run, message_ids)
    for message_id in missing:
        run.errors.append(f"no message {quote(message_id)} in dead-letter queue {queues.dlq_name}")
    if message_ids is None and not (run.moved or run.errors or run.skipped):
        run.nothing = f"dead-letter queue {queues.dlq_name} holds no letter"
    if message_ids is not None and len(set(missing)) == len(set(message_ids)):
        run.nothing = _none_found(queues)
        problem = audit.refused(entry, _none_found(queues))
        if problem is not None:
            warn(problem)
    return run


def _none_found(queues: Queues) -> str:
    return f"none of them was in dead-letter queue {queues.dlq_name}"


def letter_label(letter: DeadLetter) -> str:
    return escape(f"{letter.message_id} (original {letter.original_id})")


def delete_letters(
    queues: Queues,
    audit: Auditor,
    message_ids: Sequence[str],
    reason: str,
    warn: Callable[[str], None] | None = None,
) -> tuple[list[DeadLetter], list[str]]:
    """Delete the named messages (DLQ or original ids) for good, unrun, audited first; those
    deleted and the ids not found."""
    target = " ".join(message_ids)
    entry = audit("dlq delete", target, reason=reason, detail=f"from {queues.dlq_name}")
    with Peek(queues.sqs, queues.dlq_url, warn) as peek:
        found, missing = find_named(peek, message_ids)
        for letter in found:
            peek.delete(letter)
    if not found:
        problem = audit.refused(entry, _none_found(queues))
        if problem is not None and warn is not None:
            warn(problem)
    return found, missing


def purge_letters(
    queues: Queues, audit: Auditor, reason: str, warn: Callable[[str], None] | None = None
) -> tuple[int, list[str]]:
    """Delete every message of the dead-letter queue, unrun, a receive at a time, audited
    first; how many went, and why each one that did not failed."""
    audit("dlq purge", queues.dlq_name, reason=reason)
    deleted, failed = 0, []
    with Peek(queues.sqs, queues.dlq_url, warn) as peek:
        for page in peek.pages():
            failures = peek.delete_batch(page)
            deleted += len(page) - len(failures)
            failed += failures
    return deleted, failed
