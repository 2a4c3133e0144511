"""`sqsjkr dlq`: the messages in the queue's dead-letter queue: list, show, send back or delete them.

Reading a queue takes its messages for a while: every one read is made visible again at once after
(sqsjkr.fleet.dead_letters reads, sqsjkr.fleet.redrive acts).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any, TypeVar, cast

import click

from sqsjkr.commands.options import (
    UsageFailure,
    conf_option,
    note,
    profile_option,
    queue_option,
    reason_option,
    region_option,
    warn,
)
from sqsjkr.commands.store import Where
from sqsjkr.commands.tables import aligned, echo_lines
from sqsjkr.contract.text import escape
from sqsjkr.errors import quote
from sqsjkr.fleet.audit import command_auditor
from sqsjkr.fleet.dead_letters import (
    DeadLetter,
    Queues,
    find_letter,
    queues_of,
    read_letters,
    shown_attribute,
)
from sqsjkr.fleet.redrive import delete_letters, letter_label, purge_letters, redrive_letters
from sqsjkr.fleet.wording import local_time

BODY_EXCERPT = 80
#: The longest error a listing shows: a longer one is cut, so that one long reason does not pad
#: every row (`dlq show` prints it whole).
ERROR_EXCERPT = 60

F = TypeVar("F", bound=Callable[..., Any])


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
        error_cell(letter),
        excerpt(letter.shown_body(None)),
    ]


def error_cell(letter: DeadLetter) -> str:
    """Why a letter is there, in a listing: the daemon's reason cut to ERROR_EXCERPT; for a
    firing the Scheduler could not deliver, its error whole (its schedule and time are in the
    body, and `dlq show` names them)."""
    error = letter.error
    if error is None:
        return "-"
    undelivered = letter.undelivered
    if undelivered is not None and error == undelivered.why:
        return escape(f"the scheduler could not deliver it: {undelivered.error}")
    return excerpt(error, ERROR_EXCERPT)


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
    ]
    lines += undelivered_lines(letter)
    lines.append("message attributes:")
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


def undelivered_lines(letter: DeadLetter) -> list[str]:
    """For a firing the Scheduler could not deliver: its schedule, time and error, by name."""
    undelivered = letter.undelivered
    if undelivered is None:
        return []
    firing = undelivered.firing
    return [
        "undelivered:   a firing EventBridge Scheduler could not put on the queue",
        f"  schedule:    {escape(undelivered.schedule)}",
        f"  firing:      {escape(letter.firing_unknown) if firing is None else firing.iso}",
        f"  error code:  {escape(undelivered.error_code or '-')}",
        f"  error:       {escape(undelivered.error_message or '-')}",
        f"  retries:     {escape(undelivered.retry_attempts or '-')}"
        + (f" ({escape(undelivered.exhausted)})" if undelivered.exhausted else ""),
    ]


# -- the commands -------------------------------------------------------------------------------


def queue_options(command: F) -> F:
    """--conf, --profile, --region and --queue: the command is called with what opens the
    queue and its dead-letter queue as its first argument."""

    @functools.wraps(command)
    def with_queues(
        conf: str,
        profile: str | None,
        region: str | None,
        queue_name: str | None,
        dlq_name: str | None,
        **options: Any,
    ) -> Any:
        where = Where(conf, profile=profile, region=region)
        return command(lambda: queues_of(where.config(), queue_name, dlq=dlq_name), **options)

    dlq_option = click.option(
        "--dlq",
        "dlq_name",
        metavar="NAME",
        help="Read this queue as the dead letters instead of the queue's RedrivePolicy's: the "
        "schedules' own of a FIFO queue (the module's <name>-scheduler-dlq).",
    )
    for option in (dlq_option, queue_option, region_option, profile_option, conf_option):
        with_queues = option(with_queues)
    return cast(F, with_queues)


@click.group()
def dlq() -> None:
    """The dead-letter queue of the job queue: list, show, redrive and delete its messages."""


@dlq.command("list")
@queue_options
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array, an object per message.")
def list_(open_queues: Callable[[], Queues], as_json: bool) -> None:
    """Every message in the dead-letter queue, left there."""
    queues = open_queues()
    letters = read_letters(queues, warn)
    if as_json:
        click.echo(json.dumps([letter.as_json() for letter in letters], indent=2))
    elif not letters:
        note(f"no messages in dead-letter queue {queues.dlq_name}")
    else:
        echo_lines(aligned([LIST_HEADER, *map(list_row, letters)]))


@dlq.command()
@queue_options
@click.option("--json", "as_json", is_flag=True, help="Print the message as a JSON object.")
@click.argument("message_id")
def show(
    open_queues: Callable[[], Queues],
    as_json: bool,
    message_id: str,
) -> int:
    """One message, whole: MESSAGE_ID is its id in the dead-letter queue or its original id."""
    queues = open_queues()
    letter = find_letter(queues, message_id, warn)
    if letter is None:
        click.echo(
            f"sqsjkr: error: no message {quote(message_id)} in dead-letter queue {queues.dlq_name}",
            err=True,
        )
        return 1
    if as_json:
        click.echo(json.dumps(letter.as_json(), indent=2))
    else:
        echo_lines(show_text(letter))
    return 0


@dlq.command()
@queue_options
@click.option("--all", "all_", is_flag=True, help="Every message in the dead-letter queue.")
@click.option("--yes", "-y", is_flag=True, help="With --all: do not ask first.")
@click.option("--force", is_flag=True, help="Send malformed messages back too.")
@reason_option
@click.argument("message_ids", nargs=-1)
def redrive(
    open_queues: Callable[[], Queues],
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
    queues = open_queues()
    if all_ and not yes:
        click.confirm(
            f"Send every message of dead-letter queue {queues.dlq_name} back to queue "
            f"{queues.name}?",
            abort=True,
            err=True,
        )
    ids = None if all_ else message_ids
    audit = command_auditor(queues.config)
    run = redrive_letters(queues, audit, ids, force, reason, say=click.echo, warn=warn)
    for error in run.errors:
        click.echo(f"sqsjkr: error: {error}", err=True)
    click.echo(
        f"{run.moved} moved, {len(run.skipped)} left as malformed, {len(run.errors)} failed",
        err=True,
    )
    named_left = bool(run.skipped) and not all_
    return 1 if run.errors or named_left else 0


@dlq.command()
@queue_options
@reason_option
@click.argument("message_ids", nargs=-1, required=True)
def delete(
    open_queues: Callable[[], Queues],
    reason: str,
    message_ids: tuple[str, ...],
) -> int:
    """Delete messages from the dead-letter queue for good, unrun.

    MESSAGE_IDS are ids in the dead-letter queue or original ids. Exit 1 when one was not found.
    """
    queues = open_queues()
    audit = command_auditor(queues.config)
    found, missing = delete_letters(queues, audit, message_ids, reason, warn)
    for letter in found:
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
    open_queues: Callable[[], Queues],
    yes: bool,
    reason: str,
) -> int:
    """Delete every message of the dead-letter queue for good, unrun, after asking.

    It reads and deletes them a receive at a time (not SQS's PurgeQueue, which allows one call a
    minute and may take a minute), and says how many went. Exit 1 when one could not be deleted.
    """
    queues = open_queues()
    if not yes:
        click.confirm(
            f"Delete every message of dead-letter queue {queues.dlq_name}, unrun?",
            abort=True,
            err=True,
        )
    deleted, failed = purge_letters(queues, command_auditor(queues.config), reason, warn)
    for failure in failed:
        click.echo(f"sqsjkr: error: not deleted: {failure}", err=True)
    click.echo(f"deleted {deleted} message(s) from dead-letter queue {queues.dlq_name}")
    return 1 if failed else 0
