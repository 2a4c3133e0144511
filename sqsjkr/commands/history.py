"""`sqsjkr history`: an event's last runs (or every event's), newest first, read from the run history.

The reading is the fleet layer's (sqsjkr/fleet/history.py); `--follow` is follow.py's.
"""

from __future__ import annotations

import json

import click

from sqsjkr.commands.follow import follow_run
from sqsjkr.commands.options import note
from sqsjkr.commands.store import Where, store_options
from sqsjkr.commands.tables import echo_lines, history_lines
from sqsjkr.commands.waiting import timeout_of, timeout_option
from sqsjkr.errors import quote
from sqsjkr.fleet.history import last_runs, record_json


@click.command()
@store_options
@click.argument("event_id", required=False)
@click.option(
    "--limit",
    type=click.IntRange(1, 100),
    default=10,
    show_default=True,
    help="How many runs to show.",
)
@click.option("--failed", is_flag=True, help="Only the runs that did not succeed.")
@click.option("--output", is_flag=True, help="Show each run's output tail under it.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array of run records.")
@click.option(
    "--follow",
    "-f",
    is_flag=True,
    help="Print EVENT_ID's running run's output as it grows, then its record; exit 0 only if "
    "it succeeded. With nothing running, wait for the next run.",
)
@click.option("--message-id", metavar="ID", help="With --follow: follow this run (its message id).")
@timeout_option("1h", "the run (--follow)")
def history(
    where: Where,
    event_id: str | None,
    limit: int,
    failed: bool,
    output: bool,
    as_json: bool,
    follow: bool,
    message_id: str | None,
    timeout: str,
) -> int:
    """Show the last runs of EVENT_ID, newest first; without EVENT_ID, the last runs of every
    event, each with its event (read-only)."""
    if follow or message_id is not None:
        waits = timeout_of(timeout)
        return follow_run(where, event_id, message_id, waits)
    store = where.store()
    records = last_runs(store, event_id, limit, failed=failed)
    what = "failed runs" if failed else "runs"
    if not records and event_id is not None:
        raise click.ClickException(f"no {what} of event {quote(event_id)} in table {store.table!r}")
    if as_json:
        click.echo(json.dumps([record_json(r, output=output) for r in records], indent=2))
    elif not records:
        note(f"no {what} recorded in table {store.table!r}")
    else:
        echo_lines(history_lines(records, output=output, events=event_id is None))
    return 0
