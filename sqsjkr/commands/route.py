"""`sqsjkr route`: send an event's jobs to another queue of the fleet at run time, clear that, or list
the routes; kept in the lock table beside the pauses (docs/semantics.md, "Routing").
"""

from __future__ import annotations

import json
import time

import click

from sqsjkr.commands.options import UsageFailure, note, reason_option
from sqsjkr.commands.store import Where, store_options
from sqsjkr.commands.tables import aligned, echo_lines
from sqsjkr.fleet.audit import command_auditor, os_user
from sqsjkr.fleet.locks import Table, table_of
from sqsjkr.fleet.route import (
    DynamoRoutes,
    Route,
    clear_route,
    honour_lines,
    routes_of,
    routes_store,
    set_route,
)
from sqsjkr.fleet.wording import local_time


def list_routes(store: DynamoRoutes, table: Table, as_json: bool) -> None:
    routes = routes_of(store, table)
    if as_json:
        click.echo(json.dumps([route.as_dict() for route in routes], indent=2))
    elif not routes:
        note(f"no routes in table {table.name!r}")
    else:
        rows = [["EVENT", "QUEUE", "SINCE", "BY", "REASON"]]
        rows += [[r.event_id, r.queue, local_time(r.since), r.by, r.reason] for r in routes]
        echo_lines(aligned(rows))


@click.command()
@store_options
@click.argument("event_id", required=False)
@click.option(
    "--queue", "queue_name", metavar="NAME", help="Run EVENT_ID's jobs from this queue (its name)."
)
@click.option("--clear", is_flag=True, help="Remove EVENT_ID's route: its jobs run where sent.")
@click.option(
    "--force",
    is_flag=True,
    help="Route to NAME even if it is a dead-letter queue or no live daemon serves it.",
)
@click.option("--json", "as_json", is_flag=True, help="Without EVENT_ID: list the routes as JSON.")
@reason_option
def route(
    where: Where,
    event_id: str | None,
    queue_name: str | None,
    clear: bool,
    force: bool,
    as_json: bool,
    reason: str,
) -> int:
    """Route EVENT_ID's jobs to queue NAME (--queue), clear its route (--clear), or list the
    routes (no EVENT_ID).

    A daemon that receives a routed event's message on another queue forwards it to NAME (same
    body and attributes, FIFO group kept) and runs nothing; daemons honour a route, and its
    clear, within [kicker] pause_refresh of their next messages. Jobs already running go on.
    NAME must be a queue that a live daemon serves (`sqsjkr daemons`), and not a dead-letter
    queue, unless --force.
    """
    if event_id is None:
        if queue_name is not None or clear or reason or force:
            raise UsageFailure("--queue, --clear, --force and --reason need an EVENT_ID")
    elif as_json:
        raise UsageFailure("--json lists the routes: give it without EVENT_ID")
    elif (queue_name is None) == (not clear):
        raise UsageFailure("give --queue NAME or --clear with an EVENT_ID")
    elif clear and force:
        raise UsageFailure("--force goes with --queue NAME")
    config = where.config()
    table = table_of(config)
    store = routes_store(table)
    if event_id is None:
        list_routes(store, table, as_json)
        return 0
    audit = command_auditor(config)
    if clear:
        click.echo(clear_route(store, table, audit, event_id, reason))
    else:
        assert queue_name is not None
        made = Route(event_id, queue_name, time.time(), reason, os_user())
        echo_lines(set_route(config, store, table, audit, made, force=force))
    for line in honour_lines(config, cleared=clear):
        click.echo(f"sqsjkr: {line}", err=True)
    return 0
