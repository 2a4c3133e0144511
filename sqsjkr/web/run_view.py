"""What a run's page shows: a headline (outcome, how it ended, how long, where, when, who asked),
and its record's fields grouped (timing, placement, the job), in words and one time format.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqsjkr.contract.firing import Firing
from sqsjkr.contract.run import RunRecord
from sqsjkr.fleet.wording import format_duration, signal_name
from sqsjkr.web.shown import plain_output


@dataclass(frozen=True)
class Field:
    """One field as a page shows it: a label, its value in words (None: "-"), and whether it is
    a moment (unix seconds, shown in the dashboard's one time format) or code."""

    label: str
    value: str | float | None
    kind: str = "text"  # "text", "time" or "code"


@dataclass(frozen=True)
class FieldGroup:
    """Fields of a run under one heading."""

    title: str
    fields: tuple[Field, ...]


def exit_text(record: RunRecord) -> str:
    """How the command ended, in words: "exit code 3", "signal SIGKILL", "no command ran"."""
    if record.exit_code is not None:
        return f"exit code {record.exit_code}"
    if record.signal is not None:
        return f"signal {signal_name(record.signal) or record.signal}"
    return "no command ran"


def first_line(text: str | None) -> str:
    """The first line of text with something on it ("" for none)."""
    return next((line.strip() for line in (text or "").splitlines() if line.strip()), "")


def error_line(record: RunRecord) -> str:
    """What went wrong in a line: why it did not run, else the last line its command printed."""
    if record.error:
        return first_line(plain_output(record.error))
    printed = [line.strip() for line in plain_output(record.output).splitlines() if line.strip()]
    return printed[-1] if printed else ""


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _firing_text(record: RunRecord) -> str | None:
    """The firing the run fills: its time and schedule, and whether it is a re-run of it."""
    if record.firing_at is None or record.firing_schedule is None:
        return None
    firing = Firing(record.firing_at, record.firing_schedule)
    again = f" (re-run {record.firing_rerun})" if record.firing_rerun else ""
    return f"{firing.iso} of {record.firing_schedule}{again}"


def field_groups(record: RunRecord) -> list[FieldGroup]:
    """The record's fields under timing, placement and the job, each in words."""
    timing = FieldGroup(
        "Timing",
        (
            Field("sent (the schedule fired)", record.sent_at, "time"),
            Field("claimed by a worker", record.claimed_at, "time"),
            Field("command started", record.started_at, "time"),
            Field("ended", record.ended_at, "time"),
            Field("firing it fills", _firing_text(record)),
            Field(
                "late by (from its firing)",
                None if record.lateness is None else format_duration(record.lateness),
            ),
            Field("queue delay", format_duration(record.queue_delay)),
            Field("lock wait", format_duration(record.lock_wait)),
            Field("duration", format_duration(record.duration)),
        ),
    )
    placement = FieldGroup(
        "Placement",
        (
            Field("host", record.host),
            Field("daemon (owner)", record.owner, "code"),
            Field("daemon version", record.version),
            Field("process id", None if record.pid is None else str(record.pid)),
            Field("attempt", str(record.attempt)),
            Field("receives of the message", str(record.receive_count)),
            Field("final (settles its message)", _yes(record.final)),
        ),
    )
    job = FieldGroup(
        "The job",
        (
            Field("event", record.event_id),
            Field("message", record.message_id, "code"),
            Field("command", record.command, "code"),
            Field("lock", record.lock_id),
            Field("ended how", exit_text(record)),
            Field("error", record.error),
            Field(
                "bytes printed", None if record.output_bytes is None else str(record.output_bytes)
            ),
            Field("triggered by", record.triggered_by),
            Field("trigger reason", record.trigger_reason),
        ),
    )
    return [timing, placement, job]
