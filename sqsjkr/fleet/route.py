"""Routing an event's jobs to another queue of the fleet at run time, and clearing that, each audited
first, with the refusal of a queue where its jobs would not run (docs/semantics.md, "Routing").
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from typing import Any

from sqsjkr.backends.aws import make_client, make_session
from sqsjkr.backends.members import DynamoRoster
from sqsjkr.backends.routes import DynamoRoutes as DynamoRoutes
from sqsjkr.backends.routes import Route as Route
from sqsjkr.backends.routes import decode_routes
from sqsjkr.backends.routes import routed as routed
from sqsjkr.backends.sqs import FIFO_SUFFIX, queue_settings, resolve_queue_url
from sqsjkr.contract.config import Config
from sqsjkr.errors import NothingToDo, ResourceMissingError, RouteRefused, quote
from sqsjkr.fleet.audit import Auditor
from sqsjkr.fleet.daemons import live
from sqsjkr.fleet.locks import Table
from sqsjkr.fleet.pause import honour_text
from sqsjkr.fleet.wording import local_time
from sqsjkr.observability.logs import escape


def route_text(route: Route) -> str:
    """A route on one line: what, where, since when, by whom and why."""
    reason = f": {escape(route.reason)}" if route.reason else ""
    return (
        f"event {quote(route.event_id)} to queue {escape(route.queue)} since "
        f"{local_time(route.since)}, by {escape(route.by)}{reason}"
    )


#: A queue named as dead-letter queues usually are: "jobs-dlq", "jobs_deadletter.fifo".
_DEAD_LETTER_NAME = re.compile(r"(^|[-_.])(dlq|dead[-_]?letters?(-queue)?)$", re.IGNORECASE)
#: What a refused route's message ends with.
_FORCE_HINT = "not routed (--force routes it all the same)"
#: What a daemon does with the event's messages until it has read a route, or its clear.
_UNTIL_READ = (
    "until then, a daemon that has not read the route runs the event's messages where they arrive"
)
_UNTIL_READ_CLEAR = (
    "until then, a daemon that has not read the clear may still forward the event's messages to "
    "the queue it was routed to: wait that long before a `sqsjkr dlq redrive` of them"
)


def route_refusal(config: Config, table: Table, queue: str, sqs: Any = None) -> str | None:
    """Why a route to queue would strand its event's jobs (a dead-letter queue, or one that no
    live daemon serves), or None. ResourceMissingError when queue does not exist in the config's
    account (GetQueueUrl), as the daemons would not find it either. sqs: the SQS client to ask
    (default: one of the config's own)."""
    if sqs is None:
        session = make_session(region=config.account.region, profile=config.account.profile)
        sqs = make_client(session, "sqs")
    try:
        resolve_queue_url(sqs, queue, config.account.id)
    except ResourceMissingError as exc:
        raise ResourceMissingError(
            f"queue {quote(queue)} does not exist in account {config.account.id} "
            f"({config.account.region}): not routed"
        ) from exc
    with table.reading():
        members = live(DynamoRoster(table.client, table.name).members(), time.time())
    served = sorted({name for member in members for name, _ in member.queues})
    fleet = sorted(set(served) | {q.name for q in config.all_queues()})
    source = _dead_letter_source(sqs, config.account.id, queue, fleet)
    if source is not None:
        return (
            f"queue {quote(queue)} is the dead-letter queue of queue {quote(source)}: no daemon "
            "runs what lands there"
        )
    if _DEAD_LETTER_NAME.search(queue.removesuffix(FIFO_SUFFIX)):
        return f"queue {quote(queue)} is named as a dead-letter queue"
    if queue not in served:
        where = f"live daemons serve {escape(', '.join(served))}" if served else "no daemon is live"
        return (
            f"no live daemon serves queue {quote(queue)} ({where}; `sqsjkr daemons` lists them): "
            "its jobs would wait there unrun"
        )
    return None


def _dead_letter_source(sqs: Any, account: str, queue: str, fleet: Iterable[str]) -> str | None:
    """The queue of fleet whose RedrivePolicy names queue as its dead-letter queue, if any."""
    for name in fleet:
        if name == queue:
            continue
        try:
            arn = queue_settings(sqs, resolve_queue_url(sqs, name, account)).dead_letter_arn
        except ResourceMissingError:
            continue  # a queue of the config that is gone: `sqsjkr check` says so
        if arn is not None and arn.rsplit(":", 1)[-1] == queue:
            return name
    return None


def routes_store(table: Table) -> DynamoRoutes:
    """The routes kept in table."""
    return DynamoRoutes(table.client, table.name)


def routes_in(controls: dict[str, Any]) -> list[Route]:
    """The routes of the controls item as read (read_controls)."""
    return decode_routes(controls)


def routes_of(store: DynamoRoutes, table: Table) -> list[Route]:
    """Every route of the table."""
    with table.reading():
        return store.routes()


def honour_lines(config: Config, *, cleared: bool) -> list[str]:
    """When the fleet's daemons honour a route set (or cleared), and what they do until then."""
    return [honour_text(config), _UNTIL_READ_CLEAR if cleared else _UNTIL_READ]


def set_route(
    config: Config,
    store: DynamoRoutes,
    table: Table,
    audit: Auditor,
    made: Route,
    *,
    force: bool = False,
    sqs: Any = None,
) -> list[str]:
    """Route made.event_id to made.queue, audited first. What was done, as lines; NothingToDo
    when it was routed there already, and RouteRefused, unless force, when its jobs would not
    run there."""
    with table.reading():
        before = routed(store.routes(), made.event_id)
    if before is not None and before.queue == made.queue:
        raise NothingToDo(
            f"event {quote(made.event_id)} is routed to queue {escape(made.queue)} already "
            f"({route_text(before)})"
        )
    refusal = route_refusal(config, table, made.queue, sqs)
    if refusal is not None and not force:
        raise RouteRefused(f"{refusal}: {_FORCE_HINT}")
    audit("route", made.event_id, reason=made.reason, detail=f"to queue {made.queue}", force=force)
    with table.reading():
        store.route(made)
    lines = [f"routed {route_text(made)}"]
    if before is not None:
        lines.append(f"  it replaces the route to queue {escape(before.queue)}")
    if refusal is not None:
        lines.append(f"  warning: {refusal}")
    return lines


def clear_route(
    store: DynamoRoutes, table: Table, audit: Auditor, event_id: str, reason: str
) -> str:
    """Remove event_id's route, audited first; what was cleared. NothingToDo when it had none."""
    with table.reading():
        before = routed(store.routes(), event_id)
    if before is None:
        raise NothingToDo(f"event {quote(event_id)} has no route: nothing cleared")
    audit("route", event_id, reason=reason, detail="cleared")
    with table.reading():
        cleared = store.clear([event_id])
    # Cleared by someone else meanwhile: the route is gone all the same.
    return f"cleared the route of {route_text(cleared[0] if cleared else before)}"
