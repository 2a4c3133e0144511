"""The wording of values that every face shows alike: moments, spans and durations, how a run ended,
who triggered it, failures in a row, fire times, waits, daemons' queues, a job's command in a line.
"""

from __future__ import annotations

import signal
from datetime import datetime

from sqsjkr.backends.members import Member
from sqsjkr.contract.run import RunRecord, RunStart
from sqsjkr.errors import quote
from sqsjkr.observability.logs import escape, moment, shorten_command

#: Units of the spans shown to operators, largest first; a span shows its two largest.
_SPAN_UNITS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))


def local_time(unix_seconds: float) -> str:
    """A moment in the reader's local time, ISO 8601 to the second, with its UTC offset."""
    return moment(unix_seconds)


def format_span(seconds: float) -> str:
    """A span in its two largest units, cut to whole seconds: "45s", "1h30m", "2d3h", "0s"."""
    rest = max(0, int(seconds))
    parts: list[str] = []
    for name, size in _SPAN_UNITS:
        count, rest = divmod(rest, size)
        if count or parts:
            parts.append(f"{count}{name}")
        if len(parts) == 2:
            break
    return "".join(part for part in parts if not part.startswith("0")) or "0s"


def format_duration(seconds: float) -> str:
    """A run's duration or wait: tenths of a second under a minute, else as format_span."""
    return f"{seconds:.1f}s" if abs(seconds) < 60 else format_span(seconds)


def signal_name(number: int) -> str | None:
    """The signal's name (SIGKILL), or None for a number this host does not know."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return None


def ended_how(record: RunRecord) -> str:
    """The exit code, the signal that ended the command, or "-" when no command ran."""
    if record.exit_code is not None:
        return str(record.exit_code)
    if record.signal is not None:
        return signal_name(record.signal) or f"signal {record.signal}"
    return "-"


def triggered_text(record: RunRecord) -> str:
    """Who triggered the run (`sqsjkr trigger`) and why, on one line."""
    reason = f": {record.trigger_reason}" if record.trigger_reason else ""
    return f"triggered by {record.triggered_by}{reason}"


def failures_text(count: int) -> str:
    return f"{count} failure{'' if count == 1 else 's'} in a row"


def fire_text(fire: datetime) -> str:
    """A fire time in its schedule's zone, to the second (a rate() counts from a creation
    time that has microseconds)."""
    return fire.replace(microsecond=0).isoformat()


def waiting_text(start: RunStart) -> str:
    """'lock "L", held by HOST:PID' or 'concurrency group "db", full; the first slot to end
    held by HOST:PID': what a waiting job waits for, escaped for a terminal."""
    holder = "a Go daemon" if start.held_by is None else ":".join(start.held_by.split(":")[:2])
    full = ", full; the first slot to end" if start.waiting_for == "concurrency group" else ","
    return f"{start.waiting_for} {quote(start.waiting_key or '')}{full} held by {escape(holder)}"


def queues_text(member: Member) -> str:
    return ", ".join(f"{name} ({workers})" for name, workers in member.queues)


#: Longest command shown: its first line, cut here.
COMMAND_SHOWN = 80


def command_line(command: str | None) -> str:
    """A job's command as one escaped line: its first line, cut, the cut said."""
    if command is None:
        return "-"
    first, *rest = command.splitlines() or [""]
    shown = escape(shorten_command(first, COMMAND_SHOWN))
    return f"{shown} (+{len(rest)} lines)" if rest else shown
