"""Triggering an event: send its schedule's exact message to its queue (or its route) now, noted
as triggered, audited with the message it sent; and the wait for that message's run to end.
"""

from __future__ import annotations

import difflib
import json
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqsjkr.backends.aws import make_client
from sqsjkr.backends.routes import DynamoRoutes, routed
from sqsjkr.backends.scheduler import EventSchedule
from sqsjkr.backends.sqs import (
    fifo_send_parameters,
    group_id_of,
    is_fifo,
    resolve_queue_url,
    trigger_attributes,
)
from sqsjkr.contract.config import Config
from sqsjkr.contract.firing import Firing, Origin
from sqsjkr.contract.run import RunRecord
from sqsjkr.errors import RequestError, ResourceMissingError, quote
from sqsjkr.fleet.audit import Auditor
from sqsjkr.fleet.history import Store
from sqsjkr.fleet.schedules import read_schedules
from sqsjkr.fleet.waiting import Deadline
from sqsjkr.observability.logs import escape

#: How often a wait reads the event's last runs (a Query each time).
WAIT_POLL_SECONDS = 2.0
#: How many of the event's last runs each read looks through for the triggered one.
WAIT_RUNS = 20


@dataclass(frozen=True)
class Destination:
    """The queue a triggered message goes to: its name, account and why that one."""

    name: str
    account: str
    why: str  # "its schedule's target", or the route that overrides it


@dataclass(frozen=True)
class Triggered:
    """A message sent by a trigger: its id, the schedule whose message it is, and where it went;
    warning: why its audit item does not name the message, when the trail could not amend it."""

    message_id: str
    schedule: EventSchedule
    to: Destination
    warning: str | None = None


def where_looked(config: Config, session: Any) -> str:
    """Where the schedules were read, as an error names it."""
    region = config.account.region or session.region_name
    if config.schedule.engine == "rules":
        queues = ", ".join(quote(queue.name) for queue in config.all_queues())
        return f"the EventBridge rules that target queue {queues} in region {region}"
    return f"EventBridge Scheduler group {quote(config.schedule.group)} in region {region}"


def pick_schedule(
    found: Sequence[EventSchedule], event_id: str, name: str | None, where: str
) -> EventSchedule:
    """The schedule whose message carries event_id (and is named name, when given): its
    several schedules must all send the same message to the same queue, or name one."""
    mine = [s for s in found if s.event_id == event_id and (name is None or s.name == name)]
    if not mine:
        named = f" named {quote(name)}" if name is not None else ""
        close = difflib.get_close_matches(event_id, sorted({s.event_id or "" for s in found}), 3)
        hint = f" (events with schedules there include {', '.join(map(quote, close))})"
        raise ResourceMissingError(
            f"no schedule{named} sends event {quote(event_id)}: looked in {where}"
            + (hint if close else "")
        )
    if len({(s.message, s.target_arn, s.group_id) for s in mine}) > 1:
        names = ", ".join(quote(s.name) for s in mine)
        raise RequestError(
            f"event {quote(event_id)} has schedules that send different messages or to "
            f"different queues ({names}): name one with --schedule NAME"
        )
    return mine[0]


def destination(schedule: EventSchedule, routes: DynamoRoutes) -> Destination:
    """The schedule's target queue, or the queue the event is routed to."""
    parts = (schedule.target_arn or "").split(":")
    if len(parts) != 6 or parts[2] != "sqs":
        raise ResourceMissingError(
            f"schedule {quote(schedule.name)} targets {quote(schedule.target_arn or '(none)')}, "
            "not an SQS queue"
        )
    route = routed(routes.routes(), schedule.event_id or "")
    if route is not None and route.queue != parts[5]:
        why = f"the event is routed there from {parts[5]} (`sqsjkr route`)"
        return Destination(route.queue, parts[4], why)
    return Destination(parts[5], parts[4], f"schedule {schedule.name}'s target")


def send_now(sqs: Any, schedule: EventSchedule, to: Destination, by: str, reason: str) -> str:
    """Send the schedule's message as it is to the queue; its message id."""
    url = resolve_queue_url(sqs, to.name, to.account)
    request: dict[str, Any] = {
        "QueueUrl": url,
        "MessageBody": schedule.message,
        "MessageAttributes": trigger_attributes(by, reason),
    }
    if is_fifo(url):
        # A deduplication id of its own: content-based deduplication would drop it as a repeat
        # of the schedule's last message if that was sent in the last five minutes.
        group = schedule.group_id or group_id_of(schedule.event_id)
        request.update(fifo_send_parameters(group, f"trigger-{secrets.token_hex(16)}"))
    return str(sqs.send_message(**request)["MessageId"])


def trigger_event(
    config: Config,
    store: Store,
    audit: Auditor,
    event_id: str,
    schedule_name: str | None,
    reason: str,
    warn: Callable[[str], None],
) -> Triggered:
    """Send event_id's schedule's exact message to its queue (or route), audited first and its
    audit item amended with the message sent. warn hears a disabled schedule."""
    found = read_schedules(config, store.session)
    schedule = pick_schedule(found, event_id, schedule_name, where_looked(config, store.session))
    if schedule.message is None:
        raise ResourceMissingError(f"schedule {quote(schedule.name)} sends no input to send")
    with store.reading():
        to = destination(schedule, DynamoRoutes(store.client, store.table))
    if not schedule.enabled:
        warn(f"note: schedule {quote(schedule.name)} is disabled")
    detail = f"schedule {schedule.name} to queue {to.name}"
    entry = audit("trigger", event_id, reason=reason, detail=detail)
    message_id = send_now(make_client(store.session, "sqs"), schedule, to, entry.user, reason)
    problem = audit.amend(entry, f"{detail}, message {message_id}")
    return Triggered(message_id, schedule, to, problem)


def trigger_firing(
    config: Config,
    store: Store,
    auditor: Auditor,
    event_id: str,
    firing_at: float,
    *,
    force: bool = False,
    reason: str = "",
) -> Triggered:
    """Send event_id's schedule's message as its firing at firing_at (noted as triggered),
    audited; RequestError when that firing already ran, unless force.

    A minimal stand-in written by f27-ledger for the dashboard's "Run this firing": f27-messages
    writes the real one (`sqsjkr trigger --firing`), which the merge keeps."""
    found = read_schedules(config, store.session)
    schedule = pick_schedule(found, event_id, None, where_looked(config, store.session))
    if schedule.message is None:
        raise ResourceMissingError(f"schedule {quote(schedule.name)} sends no input to send")
    firing = Firing(firing_at, schedule.name, schedule.expression, schedule.timezone)
    with store.reading():
        runs = store.history.runs(event_id, WAIT_RUNS * 5)
        to = destination(schedule, DynamoRoutes(store.client, store.table))
    ran = [r for r in runs if r.firing_at is not None and abs(r.firing_at - firing_at) < 1]
    if ran and not force:
        raise RequestError(
            f"the {firing.iso} firing of {quote(event_id)} already ran (message "
            f"{ran[0].message_id}): force it to run it again"
        )
    body = {**json.loads(schedule.message), "firing": firing.as_fields()}
    body["origin"] = Origin.TRIGGER.value
    detail = f"firing {firing.iso} of schedule {schedule.name} to queue {to.name}"
    entry = auditor("trigger", event_id, reason=reason, detail=detail)
    as_firing = replace(schedule, message=json.dumps(body))
    message_id = send_now(make_client(store.session, "sqs"), as_firing, to, entry.user, reason)
    problem = auditor.amend(entry, f"{detail}, message {message_id}")
    return Triggered(message_id, schedule, to, problem)


def wait_for_run(
    store: Store,
    event_id: str,
    message_id: str,
    deadline: Deadline,
    rerun: Callable[[RunRecord], None],
) -> RunRecord:
    """Wait for the final record of the message's run and return it; rerun hears each run
    before it that ends but runs again (a retry, a stopped daemon). WaitTimedOut once the
    deadline has passed."""
    told: set[float] = set()
    while True:
        with store.reading():
            runs = store.history.runs(event_id, WAIT_RUNS)
        for record in reversed(runs):
            if record.message_id != message_id:
                continue
            if record.final:
                return record
            if record.ended_at not in told:
                told.add(record.ended_at)
                rerun(record)
        still = f"the message stays queued or runs; `sqsjkr history {quote(event_id)}` shows it"
        deadline.pause(WAIT_POLL_SECONDS, f"the run of message {message_id}", escape(still))
