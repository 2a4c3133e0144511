"""Triggering an event: send its schedule's exact message to its queue (or its route) now, noted
as triggered, audited with the message it sent; and the wait for that message's run to end.
"""

from __future__ import annotations

import difflib
import json
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Any

from sqsjkr.backends.aws import make_client
from sqsjkr.backends.history import run_type
from sqsjkr.backends.routes import DynamoRoutes, routed
from sqsjkr.backends.scheduler import EventSchedule, job_message
from sqsjkr.backends.sqs import group_id_of, queue_of_arn, resolve_queue_url, send_noted
from sqsjkr.contract.config import Config
from sqsjkr.contract.firing import Firing, Origin
from sqsjkr.contract.pipeline import Pipeline, PipelineRun, parse_pipeline, step_fields
from sqsjkr.contract.run import RunRecord
from sqsjkr.crontab.eventbridge import load_zone
from sqsjkr.crontab.fires import Window, next_fires
from sqsjkr.errors import (
    AlreadyDone,
    InvalidJobError,
    RequestError,
    ResourceMissingError,
    ScheduleExpressionError,
    quote,
)
from sqsjkr.fleet.audit import Auditor
from sqsjkr.fleet.history import Store
from sqsjkr.fleet.pipelines import pipelines_of
from sqsjkr.fleet.schedules import read_schedules
from sqsjkr.fleet.waiting import Deadline
from sqsjkr.observability.logs import escape

#: How often a wait reads the event's last runs (a Query each time).
WAIT_POLL_SECONDS = 2.0
#: How many of the event's last runs each read looks through for the triggered one.
WAIT_RUNS = 20
#: Runs read a page at a time, newest first, looking for a run of the firing --firing names.
FIRING_PAGE = 50


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
    firing: Firing | None = None  # the firing it was sent as (trigger --firing)


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
    if len({(_job_of(s.message), s.target_arn, s.group_id) for s in mine}) > 1:
        names = ", ".join(quote(s.name) for s in mine)
        raise RequestError(
            f"event {quote(event_id)} has schedules that send different messages or to "
            f"different queues ({names}): name one with --schedule NAME"
        )
    return mine[0]


def _job_of(message: str | None) -> str:
    """A schedule's message but its firing: the schedules of one event (on weekdays, on
    Sundays) send one job, each as its own firings."""
    fields = job_message(message)
    fields.pop("firing", None)
    return json.dumps(fields, sort_keys=True)


def destination(schedule: EventSchedule, routes: DynamoRoutes) -> Destination:
    """The schedule's target queue, or the queue the event is routed to."""
    queue = queue_of_arn(schedule.target_arn)
    if queue is None:
        raise ResourceMissingError(
            f"schedule {quote(schedule.name)} targets {quote(schedule.target_arn or '(none)')}, "
            "not an SQS queue"
        )
    account, name = queue
    to = Destination(name, account, f"schedule {schedule.name}'s target")
    return routed_from(to, schedule.event_id or "", routes)


def routed_from(to: Destination, event_id: str, routes: DynamoRoutes) -> Destination:
    """to, or the queue event_id is routed to from there (`sqsjkr route`)."""
    route = routed(routes.routes(), event_id)
    if route is None or route.queue == to.name:
        return to
    why = f"the event is routed there from {to.name} (`sqsjkr route`)"
    return Destination(route.queue, to.account, why)


def firing_time(text: str, schedule: EventSchedule) -> float:
    """--firing's TIME: RFC 3339 with its offset, or without one a wall time in the schedule's
    zone (as the ledger shows it); RequestError for what is not a time."""
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise RequestError(
            f"--firing {quote(text)}: not a time (2030-01-31T02:00:00+01:00, or a wall time in "
            f"the schedule's zone, {schedule.timezone})"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=load_zone(schedule.timezone))
    return moment.timestamp()


def firing_of(schedule: EventSchedule, at: float, now: float) -> Firing:
    """The firing of schedule due at `at`, as its own message would carry it: its ARN as the
    Scheduler (or a rule's event) names it, its expression and zone. RequestError for a time
    not yet come, or one the schedule does not fire at (when its fire times are known)."""
    firing = Firing(at, schedule.arn or schedule.name, schedule.expression, schedule.timezone)
    if at > now:
        raise RequestError(f"--firing {firing.iso} has not come yet: trigger runs past firings")
    if schedule.created is not None and at < schedule.created.timestamp():
        created = schedule.created.astimezone(timezone.utc).isoformat(timespec="seconds")
        raise RequestError(
            f"--firing {firing.iso} is before schedule {quote(schedule.name)} was created "
            f"({created.replace('+00:00', 'Z')}): it has no firing then"
        )
    moment = datetime.fromtimestamp(at, timezone.utc)
    window = Window(schedule.start, schedule.end, schedule.created)
    try:
        fires = next_fires(
            schedule.expression, schedule.timezone, moment - timedelta(seconds=1), 1, window
        )
    except ScheduleExpressionError:
        return firing  # an expression sqsjkr cannot compute: the schedule's word stands
    # Compared by key, to the second: a rate()'s fire times carry its start's microseconds.
    if fires.exact and [Firing(t.timestamp(), firing.schedule).key for t in fires.times] != [
        firing.key
    ]:
        then = "none" if not fires.times else fires.times[0].isoformat()
        raise RequestError(
            f"schedule {quote(schedule.name)} ({schedule.expression}, {schedule.timezone}) "
            f"does not fire at {firing.iso}: its next firing after it is {then}"
        )
    return firing


def message_of(schedule: EventSchedule, firing: Firing | None) -> str:
    """The schedule's message as a trigger sends it: origin "trigger", and as firing the one
    given; without one (run now) no firing, and never the placeholders EventBridge fills in."""
    fields = job_message(schedule.message)
    fields["origin"] = Origin.TRIGGER.value
    fields.pop("firing", None)
    if firing is not None:
        fields["firing"] = firing.as_fields()
    return json.dumps(fields, ensure_ascii=False)


def runs_of_firing(store: Store, event_id: str, firing: Firing) -> list[RunRecord]:
    """The event's runs of that firing (its own and its re-runs, not duplicates), newest first:
    its runs read newest first, down to those that ended before the firing was due (one Query
    a page). Firings are compared by key, not by their float times."""
    found: list[RunRecord] = []
    before: str | None = None
    while True:
        with store.reading():
            page = store.history.runs(event_id, FIRING_PAGE, before=before)
        found += [r for r in page if r.duplicate_of is None and _of_firing(r, firing)]
        if len(page) < FIRING_PAGE or page[-1].ended_at < firing.at:
            return found
        before = run_type(page[-1])


def _of_firing(record: RunRecord, firing: Firing) -> bool:
    if record.firing_at is None or record.firing_schedule is None:
        return False
    return Firing(record.firing_at, record.firing_schedule).key == firing.key


def send_now(
    sqs: Any, schedule: EventSchedule, to: Destination, by: str, reason: str, body: str
) -> str:
    """Send body, the schedule's message as a trigger sends it, to the queue; its message id."""
    group = schedule.group_id or group_id_of(schedule.event_id)
    return send_triggered(sqs, to, by, reason, body, group)


def send_triggered(sqs: Any, to: Destination, by: str, reason: str, body: str, group: str) -> str:
    """Send body, as a trigger sends a message, to the queue; its message id."""
    url = resolve_queue_url(sqs, to.name, to.account)
    # On a FIFO queue, a deduplication id of its own: content-based deduplication would drop it
    # as a repeat of the schedule's last message if that was sent in the last five minutes.
    return send_noted(sqs, url, body, (by, reason), group, f"trigger-{secrets.token_hex(16)}")


def trigger_event(
    config: Config,
    store: Store,
    audit: Auditor,
    event_id: str,
    schedule_name: str | None,
    reason: str,
    warn: Callable[[str], None],
    *,
    firing: str | None = None,
    force: bool = False,
) -> Triggered:
    """Send event_id's schedule's message (origin "trigger") to its queue (or route), audited
    first and its audit item amended with the message sent. warn hears a disabled schedule.

    firing: the time of one of its firings (see firing_time), sent as that firing, so that the
    ledger sees it filled; RequestError if a run of it is recorded, unless force."""
    found = read_schedules(config, store.session)
    step = None
    try:
        schedule = pick_schedule(
            found, event_id, schedule_name, where_looked(config, store.session)
        )
    except ResourceMissingError:
        # A pipeline's step has no schedule of its own: its root's carries it.
        step = step_of(found, event_id)
        if step is None:
            raise
        schedule = step.schedule
    if schedule.message is None:
        raise ResourceMissingError(f"schedule {quote(schedule.name)} sends no input to send")
    fired = None
    if firing is not None:
        fired = _as_rerun(
            store, event_id, firing_of(schedule, firing_time(firing, schedule), time.time()), force
        )
    with store.reading():
        to = destination(schedule, DynamoRoutes(store.client, store.table))
    if not schedule.enabled:
        warn(f"note: schedule {quote(schedule.name)} is disabled")
    detail = f"schedule {schedule.name} to queue {to.name}" + (
        "" if fired is None else f" as its firing of {fired.iso}"
    )
    if fired is not None and fired.rerun is not None:
        detail += f", a re-run {fired.rerun}"
    if step is not None:
        detail += f", step {step.name} of pipeline {step.pipeline.name}"
    if step is None:
        body, asked = message_of(schedule, fired), None
    else:
        body, asked = step.message(store, fired)
    entry = audit("trigger", event_id, reason=reason, detail=detail, force=force)
    if asked is not None:
        asked()  # after its audit, before its message: the daemons run the step so asked
    sqs = make_client(store.session, "sqs")
    message_id = send_now(sqs, schedule, to, entry.user, reason, body)
    problem = audit.amend(entry, f"{detail}, message {message_id}")
    return Triggered(message_id, schedule, to, problem, fired)


@dataclass(frozen=True)
class PipelineStep:
    """A pipeline's step, found in its root's schedule's message."""

    schedule: EventSchedule
    pipeline: Pipeline
    name: str

    def message(self, store: Store, firing: Firing | None) -> tuple[str, Callable[[], None] | None]:
        """The step's message as a trigger sends it, and the write that asks the daemons for it
        in its run (to make after the audit, before the send). Of a firing: that firing's run
        of the pipeline as it began (a re-run of the step in it, when it ran), which must
        exist; RequestError if not. Without one (run now): the step's job alone, as a job of its
        event that starts no run and moves no pipeline on."""
        if firing is None:
            fields = dict(self.pipeline.steps[self.name].job or {})
            fields.setdefault("event_id", self.name)
            fields["origin"] = Origin.TRIGGER.value
            return json.dumps(fields, ensure_ascii=False), None
        runs = pipelines_of(store)
        state = runs.state(firing.key)
        if state is None:
            raise RequestError(
                f"no run of pipeline {quote(self.pipeline.name)} for the {firing.iso} firing is "
                f"kept (its root has not ended, or the run has expired): trigger its root "
                f"{quote(self.pipeline.root)} with --firing to begin it"
            )
        begun = (
            self.pipeline
            if state.pipeline is None
            else parse_pipeline({"pipeline": state.pipeline})
        )
        if begun is None or self.name not in begun.steps:
            raise RequestError(
                f"step {quote(self.name)} was not in pipeline {quote(self.pipeline.name)} when "
                f"its {firing.iso} run began: that run follows the pipeline it began with"
            )
        run = PipelineRun(begun, self.name, firing.key)
        fields = step_fields(begun, firing.key, self.name, firing.as_fields(), Origin.TRIGGER.value)
        asked = run.asked(firing.rerun)

        def ask() -> None:
            if not runs.ask(firing.key, asked):
                raise RequestError(f"the run {quote(firing.key)} is no longer kept")

        return json.dumps(fields, ensure_ascii=False), ask


def step_of(found: Sequence[EventSchedule], event_id: str) -> PipelineStep | None:
    """The pipeline step whose event is event_id, in the first schedule's message that has one."""
    for schedule in found:
        try:
            pipeline = parse_pipeline(job_message(schedule.message))
        except InvalidJobError:
            continue
        if pipeline is None:
            continue
        for name, step in pipeline.steps.items():
            if name != pipeline.root and (step.job or {}).get("event_id", name) == event_id:
                return PipelineStep(schedule, pipeline, name)
    return None


def trigger_firing(
    config: Config,
    store: Store,
    audit: Auditor,
    event_id: str,
    at: str,
    reason: str,
    warn: Callable[[str], None],
    *,
    schedule_name: str | None = None,
    force: bool = False,
) -> Triggered:
    """Run the firing of event_id's schedule due at `at` (a missed one, say): its message sent
    as that firing (see trigger_event); RequestError if it already ran, unless force."""
    return trigger_event(
        config, store, audit, event_id, schedule_name, reason, warn, firing=at, force=force
    )


def _as_rerun(store: Store, event_id: str, firing: Firing, force: bool) -> Firing:
    """The firing as trigger sends it: a firing with no run is sent as itself, to fill it; one
    whose run was recorded is claimed already, so it is sent as a re-run of its own (Firing.rerun)
    that the claim does not drop. AlreadyDone for one whose command ran, unless force: a firing
    cancelled for its life_time or aborted on its lock never ran, and runs without force."""
    runs = runs_of_firing(store, event_id, firing)
    ran = [r for r in runs if r.started_at is not None]
    if ran and not force:
        last = ran[0]
        raise AlreadyDone(
            f"the {firing.iso} firing of event {quote(event_id)} already ran (message "
            f"{last.message_id} on {last.host}, {last.outcome.value}): --force to run it again"
        )
    return replace(firing, rerun=secrets.token_hex(16)) if runs else firing


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
