"""`sqsjkr route`: send an event's jobs to another queue of the fleet at run time, clear that, or list
the routes; kept in the lock table beside the pauses (docs/semantics.md, "Routing").
"""

from __future__ import annotations

import json
import time

import click

from sqsjkr.backends.aws import make_client, make_session
from sqsjkr.backends.routes import DynamoRoutes, Route, routed
from sqsjkr.backends.sqs import resolve_queue_url
from sqsjkr.commands.audit import Auditor, command_auditor, os_user
from sqsjkr.commands.history import aligned, local_time, store_options
from sqsjkr.commands.locks import Table, table_of
from sqsjkr.commands.options import UsageFailure, load, reason_option
from sqsjkr.commands.pause import honour_note
from sqsjkr.contract.config import Config, Overrides
from sqsjkr.errors import ResourceMissingError, quote
from sqsjkr.observability.logs import escape


def route_text(route: Route) -> str:
    """A route on one line: what, where, since when, by whom and why."""
    reason = f": {escape(route.reason)}" if route.reason else ""
    return (
        f"event {quote(route.event_id)} to queue {escape(route.queue)} since "
        f"{local_time(route.since)}, by {escape(route.by)}{reason}"
    )


def check_queue(config: Config, queue: str) -> None:
    """Refused unless queue exists in the config's account (GetQueueUrl), as the daemons will
    look it up."""
    session = make_session(region=config.account.region, profile=config.account.profile)
    try:
        resolve_queue_url(make_client(session, "sqs"), queue, config.account.id)
    except ResourceMissingError as exc:
        raise ResourceMissingError(
            f"queue {quote(queue)} does not exist in account {config.account.id} "
            f"({config.account.region}): not routed"
        ) from exc


def list_routes(store: DynamoRoutes, table: Table, as_json: bool) -> None:
    with table.reading():
        routes = store.routes()
    if as_json:
        click.echo(json.dumps([route.as_dict() for route in routes], indent=2))
    elif not routes:
        click.echo(f"no routes in table {table.name!r}", err=True)
    else:
        rows = [["EVENT", "QUEUE", "SINCE", "BY", "REASON"]]
        rows += [[r.event_id, r.queue, local_time(r.since), r.by, r.reason] for r in routes]
        for line in aligned(rows):
            click.echo(line)


@click.command()
@store_options
@click.argument("event_id", required=False)
@click.option(
    "--queue", "queue_name", metavar="NAME", help="Run EVENT_ID's jobs from this queue (its name)."
)
@click.option("--clear", is_flag=True, help="Remove EVENT_ID's route: its jobs run where sent.")
@click.option("--json", "as_json", is_flag=True, help="Without EVENT_ID: list the routes as JSON.")
@reason_option
def route(
    conf: str,
    lock_table: str | None,
    profile: str | None,
    region: str | None,
    event_id: str | None,
    queue_name: str | None,
    clear: bool,
    as_json: bool,
    reason: str,
) -> int:
    """Route EVENT_ID's jobs to queue NAME (--queue), clear its route (--clear), or list the
    routes (no EVENT_ID).

    A daemon that receives a routed event's message on another queue forwards it to NAME (same
    body and attributes, FIFO group kept) and runs nothing; daemons honour a route within
    [kicker] pause_refresh of their next messages. Jobs already running go on.
    """
    if event_id is None:
        if queue_name is not None or clear or reason:
            raise UsageFailure("--queue, --clear and --reason need an EVENT_ID")
    elif as_json:
        raise UsageFailure("--json lists the routes: give it without EVENT_ID")
    elif (queue_name is None) == (not clear):
        raise UsageFailure("give --queue NAME or --clear with an EVENT_ID")
    config = load(conf, Overrides(lock_table=lock_table, profile=profile, region=region))
    table = table_of(config)
    store = DynamoRoutes(table.client, table.name)
    if event_id is None:
        list_routes(store, table, as_json)
        return 0
    audit = command_auditor(config)
    if clear:
        click.echo(clear_route(store, table, audit, event_id, reason))
        return 0
    assert queue_name is not None
    made = Route(event_id, queue_name, time.time(), reason, os_user())
    for line in set_route(config, store, table, audit, made):
        click.echo(line)
    honour_note(config)
    return 0


def set_route(
    config: Config, store: DynamoRoutes, table: Table, audit: Auditor, made: Route
) -> list[str]:
    """Route made.event_id to made.queue, audited first: what `route` and the dashboard both
    do. What was done, as lines; a ClickException when it was routed there already."""
    with table.reading():
        before = routed(store.routes(), made.event_id)
    if before is not None and before.queue == made.queue:
        raise click.ClickException(
            f"event {quote(made.event_id)} is routed to queue {escape(made.queue)} already "
            f"({route_text(before)})"
        )
    check_queue(config, made.queue)
    audit("route", made.event_id, reason=made.reason, detail=f"to queue {made.queue}")
    with table.reading():
        store.route(made)
    lines = [f"routed {route_text(made)}"]
    if before is not None:
        lines.append(f"  it replaces the route to queue {escape(before.queue)}")
    return lines


def clear_route(
    store: DynamoRoutes, table: Table, audit: Auditor, event_id: str, reason: str
) -> str:
    """Remove event_id's route, audited first; what was cleared. A ClickException when it had
    none."""
    with table.reading():
        before = routed(store.routes(), event_id)
    if before is None:
        raise click.ClickException(f"event {quote(event_id)} has no route: nothing cleared")
    audit("route", event_id, reason=reason, detail="cleared")
    with table.reading():
        cleared = store.clear([event_id])
    # Cleared by someone else meanwhile: the route is gone all the same.
    return f"cleared the route of {route_text(cleared[0] if cleared else before)}"
