"""`sqsjkr trigger`: run an event now by sending its schedule's exact message to its queue, noted as
triggered (by whom, why); with --wait, follow that run in the history to its end.
"""

from __future__ import annotations

import difflib
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import click

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
from sqsjkr.commands.audit import Auditor, command_auditor
from sqsjkr.commands.options import UsageFailure, load, reason_option
from sqsjkr.commands.store import store_options
from sqsjkr.commands.tables import history_lines
from sqsjkr.commands.waiting import Deadline, timeout_of, timeout_option
from sqsjkr.contract.config import Config, Overrides
from sqsjkr.contract.run import RunOutcome, RunRecord
from sqsjkr.errors import ResourceMissingError, quote
from sqsjkr.fleet.history import Store, store_of
from sqsjkr.fleet.schedules import read_schedules
from sqsjkr.observability.logs import escape

#: How often --wait reads the event's last runs (a Query each time).
WAIT_POLL_SECONDS = 2.0
#: How many of the event's last runs each read looks through for the triggered one.
WAIT_RUNS = 20


@dataclass(frozen=True)
class Destination:
    """The queue a triggered message goes to: its name, account and why that one."""

    name: str
    account: str
    why: str  # "its schedule's target", or the route that overrides it


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
        raise UsageFailure(
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


@dataclass(frozen=True)
class Triggered:
    """A message sent by a trigger: its id, the schedule whose message it is, and where it went."""

    message_id: str
    schedule: EventSchedule
    to: Destination


def trigger_event(
    config: Config,
    store: Store,
    audit: Auditor,
    event_id: str,
    schedule_name: str | None,
    reason: str,
    warn: Callable[[str], None],
) -> Triggered:
    """Send event_id's schedule's exact message to its queue (or route), audited first: what
    `trigger` and the dashboard's "run now" both do. warn hears a disabled schedule."""
    found = read_schedules(config, store.session)
    schedule = pick_schedule(found, event_id, schedule_name, where_looked(config, store.session))
    if schedule.message is None:
        raise ResourceMissingError(f"schedule {quote(schedule.name)} sends no input to send")
    with store.reading():
        to = destination(schedule, DynamoRoutes(store.client, store.table))
    if not schedule.enabled:
        warn(f"note: schedule {quote(schedule.name)} is disabled")
    entry = audit(
        "trigger", event_id, reason=reason, detail=f"schedule {schedule.name} to queue {to.name}"
    )
    message_id = send_now(make_client(store.session, "sqs"), schedule, to, entry.user, reason)
    return Triggered(message_id, schedule, to)


def follow(store: Store, event_id: str, message_id: str, deadline: Deadline) -> RunRecord:
    """Wait for the final record of the message's run and return it; each run before it that
    ends but runs again (a retry, a stopped daemon) is said on stderr. WaitTimedOut once the
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
                click.echo(
                    f"sqsjkr: the run on {escape(record.host)} ended {record.outcome.value}, "
                    "and runs again; waiting",
                    err=True,
                )
        still = f"the message stays queued or runs; `sqsjkr history {quote(event_id)}` shows it"
        deadline.pause(WAIT_POLL_SECONDS, f"the run of message {message_id}", escape(still))


@click.command()
@store_options
@click.argument("event_id")
@click.option(
    "--schedule",
    "schedule_name",
    metavar="NAME",
    help="The schedule to send, when the event has several that send different messages.",
)
@click.option(
    "--wait", is_flag=True, help="Follow the run to its end; exit 0 only if it succeeded."
)
@timeout_option("1h", "the run (--wait)")
@reason_option
def trigger(
    conf: str,
    lock_table: str | None,
    profile: str | None,
    region: str | None,
    event_id: str,
    schedule_name: str | None,
    wait: bool,
    timeout: str,
    reason: str,
) -> int:
    """Run EVENT_ID now: send its schedule's exact message (to its queue, in its FIFO group),
    noted as triggered by you and why; prints the message id.

    The schedule is the one whose message carries EVENT_ID, whatever its name, read from
    [schedule] group in EventBridge Scheduler, or with [schedule] engine = "rules" from the rules
    that target the queues. An event routed elsewhere (`sqsjkr route`) is sent to its route.
    """
    limit = timeout_of(timeout)
    config = load(conf, Overrides(lock_table=lock_table, profile=profile, region=region))
    if wait and config.history.backend == "none":
        raise UsageFailure(
            '--wait follows the run history, which is off ([history] backend = "none")'
        )
    store = store_of(config)
    sent = trigger_event(
        config,
        store,
        command_auditor(config),
        event_id,
        schedule_name,
        reason,
        lambda line: click.echo(f"sqsjkr: {line}", err=True),
    )
    message_id, to = sent.message_id, sent.to
    click.echo(message_id)
    click.echo(f"sqsjkr: sent to queue {escape(to.name)}: {escape(to.why)}", err=True)
    if not wait:
        return 0
    record = follow(store, event_id, message_id, Deadline(limit))
    for line in history_lines([record], output=True):
        click.echo(line)
    return 0 if record.outcome is RunOutcome.SUCCEEDED else 1
