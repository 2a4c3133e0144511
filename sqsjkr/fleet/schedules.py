"""The fleet's schedules and when each fires next, read from EventBridge Scheduler's group or the
rules, per [schedule] engine; and what the history says of each scheduled event.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from typing import Any

from botocore.exceptions import ClientError

from sqsjkr.backends.aws import make_client
from sqsjkr.backends.fleet import DynamoControls
from sqsjkr.backends.pause import Pause, paused
from sqsjkr.backends.routes import Route, routed
from sqsjkr.backends.rules import list_rules
from sqsjkr.backends.scheduler import EventSchedule as EventSchedule
from sqsjkr.backends.scheduler import (
    get_event_schedule,
    list_schedules,
    list_states,
    queue_target,
)
from sqsjkr.backends.sqs import resolve_queue_url
from sqsjkr.contract.config import Config
from sqsjkr.contract.run import EventSummary
from sqsjkr.crontab.fires import Fires, Window, next_fires
from sqsjkr.errors import ResourceMissingError, ScheduleExpressionError
from sqsjkr.fleet.history import Store, record_json
from sqsjkr.fleet.late import Scheduler
from sqsjkr.fleet.running import Running, running_now
from sqsjkr.fleet.wording import command_line, fire_text

#: How many of its next fire times each schedule shows.
FIRES_SHOWN = 3


@dataclass(frozen=True)
class Timing:
    """A schedule's next fire times, or why they are not known."""

    fires: Fires
    problem: str | None = None


def read_schedules(config: Config, session: Any) -> list[EventSchedule]:
    """The schedules of the config's engine: the group's, or the rules on the config's queues."""
    if config.schedule.engine == "rules":
        sqs = make_client(session, "sqs")
        arns = [
            queue_target(sqs, resolve_queue_url(sqs, queue.name, config.account.id)).arn
            for queue in config.all_queues()
        ]
        return list_rules(make_client(session, "events"), arns)
    return list_schedules(make_client(session, "scheduler"), config.schedule.group)


def unseen_schedules(
    config: Config, session: Any, summaries: Sequence[EventSummary]
) -> Scheduler | None:
    """What the plain check knows of the scheduler, at a ListSchedules call per 100 schedules:
    every schedule's state, and whole (a GetSchedule each) only the schedules no event's
    summary names yet, whose events have never run: a scheduled event is judged from its first
    firing on. None for the rules engine (`--schedules` reads rules)."""
    if config.schedule.engine != "scheduler":
        return None
    client = make_client(session, "scheduler")
    group = config.schedule.group
    try:
        listed = list_states(client, group)
        named = {s.schedule: s.event_id for s in summaries if s.schedule}
        unseen = [get_event_schedule(client, group, s.name) for s in listed if s.arn not in named]
    except (ClientError, ResourceMissingError):
        # The plain check judges by the summaries alone then, as it did before it read any.
        return None
    read = Scheduler.of([s for s in unseen if s is not None])
    off = {named[s.arn] for s in listed if not s.enabled and s.arn in named}
    on = {named[s.arn] for s in listed if s.enabled and s.arn in named}
    return replace(read, disabled=read.disabled | (off - on - set(read.enabled)), partial=True)


def timing(schedule: EventSchedule, now: datetime, count: int = FIRES_SHOWN) -> Timing:
    """When the schedule fires next; none while it is disabled."""
    if not schedule.enabled:
        return Timing(Fires(()))
    window = Window(schedule.start, schedule.end, schedule.created)
    try:
        return Timing(next_fires(schedule.expression, schedule.timezone, now, count, window))
    except ScheduleExpressionError as exc:
        return Timing(Fires(()), str(exc))


@dataclass(frozen=True)
class Scheduled:
    """A schedule and its next fire times (or why they are not known)."""

    schedule: EventSchedule
    timing: Timing


def scheduled_now(config: Config, session: Any, now: float) -> list[Scheduled]:
    """Every schedule of the config's engine with its next FIRES_SHOWN fire times from now."""
    instant = datetime.fromtimestamp(now, timezone.utc)
    return [Scheduled(s, timing(s, instant)) for s in read_schedules(config, session)]


def next_runs(schedules: Sequence[EventSchedule], now: datetime) -> dict[str, datetime]:
    """Each event's next run: the soonest next fire time of its enabled schedules."""
    soonest: dict[str, datetime] = {}
    for schedule in schedules:
        fires = timing(schedule, now, 1).fires.times
        if schedule.event_id is None or not fires:
            continue
        if schedule.event_id not in soonest or fires[0] < soonest[schedule.event_id]:
            soonest[schedule.event_id] = fires[0]
    return soonest


@dataclass(frozen=True)
class Upcoming:
    """What the schedules say of each event: its next run, and whether they are all disabled."""

    soonest: dict[str, datetime]
    #: Events that have schedules, every one of them disabled: they run only when sent by hand.
    disabled: frozenset[str]


def upcoming(schedules: Sequence[EventSchedule], now: datetime) -> Upcoming:
    """next_runs, and the events whose every schedule is disabled."""
    enabled = {s.event_id for s in schedules if s.enabled}
    disabled = {s.event_id for s in schedules if not s.enabled and s.event_id not in enabled}
    return Upcoming(next_runs(schedules, now), frozenset(e for e in disabled if e is not None))


def read_upcoming(config: Config, session: Any, now: float) -> Upcoming:
    """Each event's next run, and the events whose every schedule is disabled, read now."""
    return upcoming(read_schedules(config, session), datetime.fromtimestamp(now, timezone.utc))


@dataclass(frozen=True)
class EventState:
    """What the history says of a schedule's event: its summary, runs in progress, its pause."""

    summary: EventSummary | None
    running: Sequence[Running]
    held: Pause | None  # the pause that holds the event
    route: Route | None = None  # the queue its jobs are routed to, if they are


def event_states(
    store: Store, schedules: Sequence[EventSchedule], now: float
) -> dict[str, EventState]:
    """The history's word on each scheduled event, by event_id."""
    with store.reading():
        controls = DynamoControls(store.client, store.table).controls()
        summaries: Mapping[str, EventSummary] = (
            {}
            if store.config.history.backend == "none"
            else {s.event_id: s for s in store.history.summaries()}
        )
        states = {}
        for event_id in {s.event_id for s in schedules if s.event_id is not None}:
            summary = summaries.get(event_id)
            running = running_now(store, summary, now) if summary else []
            states[event_id] = EventState(
                summary,
                running,
                paused(controls.pauses, event_id, now),
                routed(controls.routes, event_id),
            )
    return states


def schedule_json(
    schedule: EventSchedule, when: Timing, state: EventState | None
) -> dict[str, Any]:
    """`schedules --json`'s object of one schedule, with its event's state when read."""
    shown: dict[str, Any] = {
        "name": schedule.name,
        "expression": schedule.expression,
        "timezone": schedule.timezone,
        "enabled": schedule.enabled,
        "next": [fire_text(fire) for fire in when.fires.times],
        "next_exact": when.fires.exact,
        "problem": when.problem,
        "event_id": schedule.event_id,
        "command": None if schedule.command is None else command_line(schedule.command),
        "target_arn": schedule.target_arn,
    }
    if state is not None:
        last = state.summary.last_run if state.summary else None
        shown["last_run"] = None if last is None else record_json(last, output=False)
        shown["running"] = [{**asdict(run.start), "stale": run.stale} for run in state.running]
        shown["paused"] = None if state.held is None else state.held.as_dict()
        shown["route"] = None if state.route is None else state.route.as_dict()
    return shown
