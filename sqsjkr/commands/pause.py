"""`sqsjkr pause` and `sqsjkr resume`: a fleet-wide pause of some events or of all, in the lock table.

Every daemon reads the pause state from the table (docs/semantics.md, "Pauses"); these commands write it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import click

from sqsjkr.commands.options import reason_option, warn
from sqsjkr.commands.store import Where, audited_table, store_options
from sqsjkr.errors import quote
from sqsjkr.fleet.audit import os_user
from sqsjkr.fleet.pause import (
    details_text,
    event_scopes,
    honour_text,
    parse_until,
    pause_events,
    pause_text,
    pauses_store,
    resume_events,
    scope_text,
    unpaused,
)


@click.command()
@store_options
@click.argument("event_ids", nargs=-1, metavar="[EVENT_ID]...")
@click.option("--all", "all_events", is_flag=True, help="Pause every event.")
@click.option(
    "--until",
    metavar="TIME",
    help="End of the pause: RFC 3339 (2030-01-31T09:30:00+09:00), a local '2030-01-31 09:30' "
    "in this host's time zone, or a duration from now (2h, 90m, 1d). Default: until resumed.",
)
@click.option("--reason", default="", help="Why, for whoever runs `sqsjkr status`.")
def pause(
    where: Where,
    event_ids: tuple[str, ...],
    all_events: bool,
    until: str | None,
    reason: str,
) -> None:
    """Pause EVENT_IDs (or --all) on every daemon of the fleet: their jobs wait on the queue.

    Each daemon honours it within [kicker] pause_refresh (a minute) of its next messages; jobs
    already running go on. A paused job's message is not run and not deleted: it stays on the
    queue, and runs after `sqsjkr resume` or the --until time (life_time still cancels what went
    stale). A pause of the same events replaces the one before.
    """
    events = event_scopes(event_ids, all_events)
    now = time.time()
    ends = None if until is None else parse_until(until, now)
    config = where.config()
    table, audit = audited_table(config)
    store = pauses_store(table)
    for made in pause_events(store, audit, os_user(), events, now, ends, reason):
        click.echo(f"paused {pause_text(made, now)}")
    # When the fleet's daemons see it.
    click.echo(f"sqsjkr: {honour_text(config)}", err=True)


@click.command()
@store_options
@click.argument("event_ids", nargs=-1, metavar="[EVENT_ID]...")
@click.option(
    "--all", "all_events", is_flag=True, help="Lift every pause, of all and of each event."
)
@reason_option
def resume(
    where: Where,
    event_ids: tuple[str, ...],
    all_events: bool,
    reason: str,
) -> None:
    """Lift the pauses of EVENT_IDs (or every pause, --all) and say what was lifted.

    Daemons run what accumulated on the queue within about a minute. Exit 1 if nothing was paused.
    """
    events = event_scopes(event_ids, all_events)
    config = where.config()
    table, audit = audited_table(config)
    store = pauses_store(table)
    lifted = resume_events(store, audit, events, reason)
    now = time.time()
    for lifted_pause in lifted:
        click.echo(f"resumed {scope_text(lifted_pause)}, paused {details_text(lifted_pause, now)}")
    if events is None:
        if not lifted:
            raise click.ClickException("nothing was paused")
        return
    left = unpaused(store, events, lifted)
    missed = left.missed
    note = ""
    if left.of_all is not None:
        note = (
            f"all events are still paused ({pause_text(left.of_all, now)}): "
            "`resume --all` lifts that"
        )
    if not lifted:
        raise click.ClickException(
            f"nothing was paused: {_events(missed)} had no pause" + (f"; {note}" if note else "")
        )
    if missed:
        click.echo(f"sqsjkr: {_events(missed)} had no pause", err=True)
    if note:
        warn(note)


def _events(event_ids: Sequence[str]) -> str:
    names = ", ".join(quote(event_id) for event_id in event_ids)
    return f"event{'' if len(event_ids) == 1 else 's'} {names}"
