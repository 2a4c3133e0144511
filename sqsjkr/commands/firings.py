"""`sqsjkr firings`: the ledger of firings, every fire time the schedules imply in a window and what
became of it, printed; the judging is sqsjkr.fleet.firings'.
"""

from __future__ import annotations

import json
import time

import click

from sqsjkr.commands.options import UsageFailure, note
from sqsjkr.commands.pipeline import header, step_lines
from sqsjkr.commands.store import Where, store_options
from sqsjkr.commands.tables import aligned, echo_lines
from sqsjkr.contract.duration import parse_duration
from sqsjkr.contract.text import escape
from sqsjkr.errors import DurationError, quote
from sqsjkr.fleet.firings import FiringRow, FiringStatus, firings
from sqsjkr.fleet.history import store_of
from sqsjkr.fleet.wording import local_time


@click.command("firings")
@store_options
@click.argument("event_id", required=False)
@click.option(
    "--since",
    default="7d",
    show_default=True,
    metavar="DURATION",
    help="How far back the ledger goes (30m, 12h, 7d).",
)
@click.option("--missed", is_flag=True, help="Only the firings that did not run.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array of firings.")
def firings_command(
    where: Where, event_id: str | None, since: str, missed: bool, as_json: bool
) -> None:
    """List every firing the schedules imply in the window, newest first, and what became of
    it: ran, running, a duplicate dropped, or missed and why (read-only)."""
    try:
        back = parse_duration(since, days=True).seconds
    except DurationError as exc:
        raise UsageFailure(f"--since {quote(since)}: {exc}") from exc
    rows = firings(
        store_of(where.config()),
        event_id,
        back,
        time.time(),
        missed_only=missed,
        warn=note,
    )
    if as_json:
        click.echo(json.dumps([row.as_json() for row in rows], indent=2))
        return
    if not rows:
        what = "missed firings" if missed else "firings"
        note(f"no {what} in the last {escape(since)}")
        return
    table = [["due", "event", "schedule", "status", "what became of it"]]
    table += [
        [row.local, escape(row.event_id), row.schedule, row.status.value, _what(row)]
        for row in rows
    ]
    lines = aligned(table)
    echo_lines(lines[:1])
    for line, row in zip(lines[1:], rows, strict=True):
        click.echo(line)
        if row.pipeline is not None:
            # Each step of the pipeline the firing started, under it.
            click.echo(f"    {header(row.pipeline)}")
            echo_lines(step_lines(row.pipeline, indent="    "))


def _what(row: FiringRow) -> str:
    """The run (outcome, host, its id) or the reason, on one line."""
    extra = f" (+{row.duplicates} duplicate dropped)" if row.duplicates else ""
    if row.reruns:
        extra += f" (ran {len(row.reruns) + 1} times: re-run by trigger --firing)"
    if row.status is FiringStatus.CAUGHT_UP:
        extra += f" ({escape(row.reason or '')})"
    if row.run is not None and row.status in (FiringStatus.RAN, FiringStatus.CAUGHT_UP):
        run = row.run
        return (
            f"{run.outcome.value} on {escape(run.host)} at {local_time(run.ended_at)}, "
            f"message {run.message_id}{extra}"
        )
    if row.run is not None:
        return f"on {escape(row.run.host)}, message {row.run.message_id}{extra}"
    return escape(row.reason or "") + extra
