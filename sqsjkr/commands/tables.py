"""The commands' tables: rows of cells aligned in columns and escaped, the table of runs that
`history`, `history --follow`, `trigger --wait` and `kill` print, and the printing of lines.
"""

from __future__ import annotations

from collections.abc import Iterable

import click

from sqsjkr.contract.run import RunRecord
from sqsjkr.contract.text import escape
from sqsjkr.fleet.wording import ended_how, format_duration, local_time, triggered_text


def echo_lines(lines: Iterable[str]) -> None:
    """Print each line, as it comes."""
    for line in lines:
        click.echo(line)


def aligned(rows: list[list[str]]) -> list[str]:
    """Rows of cells as lines, each column as wide as its widest cell; a cell's control characters
    escaped, so that no id or error that came from a message can forge a row or drive the terminal."""
    rows = [[escape(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in rows if i < len(row)) for i in range(max(map(len, rows)))]
    return ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]


HISTORY_HEADER = [
    "ENDED",
    "OUTCOME",
    "EXIT",
    "DURATION",
    "QUEUE DELAY",
    "LOCK WAIT",
    "HOST",
    "MESSAGE ID",
    "ATTEMPT",
]


def history_row(record: RunRecord) -> list[str]:
    outcome = record.outcome.value + ("" if record.final else " (not final)")
    if record.triggered_by is not None:
        outcome += " (triggered)"
    return [
        local_time(record.ended_at),
        outcome,
        ended_how(record),
        format_duration(record.duration),
        format_duration(record.queue_delay),
        format_duration(record.lock_wait),
        record.host,
        record.message_id,
        str(record.attempt),
    ]


def history_lines(records: list[RunRecord], *, output: bool, events: bool = False) -> list[str]:
    """The table of runs; with output, each run's error and output tail indented under it;
    with events, each run's event first."""
    rows = [[*(["EVENT"] if events else []), *HISTORY_HEADER]]
    rows += [[*([r.event_id] if events else []), *history_row(r)] for r in records]
    lines = aligned(rows)
    if not output:
        return lines
    shown = lines[:1]
    for line, record in zip(lines[1:], records, strict=True):
        shown.append(line)
        if record.triggered_by is not None:
            shown.append(f"    {escape(triggered_text(record))}")
        if record.error:
            shown.append(f"    error: {escape(record.error)}")
        tail = record.output.splitlines() or ["(no output kept)"]
        shown += [f"    {escape(text)}" for text in tail]
    return shown
