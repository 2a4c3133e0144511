"""The ledger of firings: every fire time the schedules imply in a window, and what became of each
(ran, running, a duplicate dropped, or missed and why), as `sqsjkr firings` and the dashboard show it.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sqsjkr.backends.audit import AuditEntry
from sqsjkr.backends.aws import make_client
from sqsjkr.backends.members import LOST_AFTER_REFRESHES, Member
from sqsjkr.backends.scheduler import EventSchedule
from sqsjkr.backends.sqs import dead_letter_queue_url
from sqsjkr.contract import safe_json
from sqsjkr.contract.firing import Firing, Origin
from sqsjkr.contract.run import RunOutcome, RunRecord, RunStart
from sqsjkr.crontab.fires import Window, fires_between
from sqsjkr.errors import ResourceMissingError
from sqsjkr.fleet.audit import entries_since
from sqsjkr.fleet.daemons import read_members
from sqsjkr.fleet.dead_letters import DeadLetter, Peek, queues_of, read_letters
from sqsjkr.fleet.history import Store, record_json
from sqsjkr.fleet.pipeline_steps import PipelineView
from sqsjkr.fleet.pipelines import with_pipelines
from sqsjkr.fleet.running import running_now
from sqsjkr.fleet.schedules import read_schedules
from sqsjkr.fleet.wording import format_span

#: The window a ledger covers unless told (`--since`).
DEFAULT_SINCE = 7 * 86400.0
#: A firing younger than this with no run yet is due, not missed: its message may be on its way
#: (the Scheduler's flexible window, SQS, a busy daemon).
DEFAULT_GRACE = 300.0
#: Most fire times one schedule lists in a window: a rate(1 minute) over 7 days is 10,080.
MAX_FIRES = 20_000
#: Run records read per firing in the window (duplicates, retries), plus a margin.
RUNS_PER_FIRING = 3
_RUNS_MARGIN = 20
#: The message attributes EventBridge Scheduler puts on a firing it could not deliver.
SCHEDULER_ERROR_CODE = "ERROR_CODE"
SCHEDULER_ERROR_MESSAGE = "ERROR_MESSAGE"
#: The reason of a firing skipped while its event was paused (FiringStatus.PAUSED).
PAUSED_REASON = "event paused"
#: Outcomes of a record that mean the firing's job did not run.
_NOT_RUN = {
    RunOutcome.CANCELLED: "cancelled: older than its life_time when a daemon took it",
    RunOutcome.ABORTED: "aborted: its lock was held (abort_if_locked)",
}


class FiringStatus(enum.Enum):
    RAN = "ran"
    RUNNING = "running"
    DUPLICATE = "duplicate dropped"  # only a duplicate's record: the run it duplicated is gone
    DUE = "due"  # within its grace, no run yet
    MISSED = "missed"
    #: Not run while its event (or every event) was paused on purpose: not missed.
    PAUSED = "skipped while paused"
    #: Missed, then run by a daemon's catch-up (the schedule's catch_up): reason says who
    #: noticed and how late it ran.
    CAUGHT_UP = "caught up"


@dataclass(frozen=True)
class FiringRow:
    """One firing of one schedule and what became of it: run is its run's record (RAN), reason
    why it did not run (MISSED), duplicates the records of its other messages, dropped."""

    event_id: str
    at: float
    schedule: str
    status: FiringStatus
    reason: str | None = None
    run: RunRecord | None = None
    duplicates: int = 0
    timezone: str = "UTC"  # the schedule's zone, which its fire times are read in
    #: Its other runs that ran (re-runs by `trigger --firing`): the row shows the newest.
    reruns: tuple[RunRecord, ...] = ()
    #: The run of the pipeline its root's run started, each step's state (fleet/pipeline_steps.py).
    pipeline: PipelineView | None = None

    @property
    def iso(self) -> str:
        return Firing(self.at, self.schedule).iso

    @property
    def local(self) -> str:
        """The time it was due in the schedule's zone, with its offset, as `trigger --firing`
        takes it: "2030-03-31T02:00:00+02:00" (the two 02:30 of a night whose clocks go back
        differ by their offsets)."""
        try:
            zone: tzinfo = ZoneInfo(self.timezone)
        except (ValueError, ZoneInfoNotFoundError):
            zone = timezone.utc
        return datetime.fromtimestamp(self.at, zone).isoformat()

    def as_json(self) -> dict[str, Any]:
        return {
            "event_id": self.event_id,
            "at": self.iso,
            "local": self.local,
            "timezone": self.timezone,
            "schedule": self.schedule,
            "status": self.status.value,
            "reason": self.reason,
            "duplicates": self.duplicates,
            "run": None if self.run is None else record_json(self.run, output=False),
            "reruns": [record_json(r, output=False) for r in self.reruns],
            "pipeline": None if self.pipeline is None else self.pipeline.as_json(),
        }


@dataclass(frozen=True)
class PauseSpan:
    """An event's pause from the audit trail: from, until (None: still paused); event None: all."""

    event_id: str | None
    start: float
    end: float | None

    def holds(self, event_id: str, at: float) -> bool:
        scoped = self.event_id is None or self.event_id == event_id
        return scoped and self.start <= at and (self.end is None or at < self.end)


@dataclass(frozen=True)
class Evidence:
    """What the ledger judges an event's firings by, read once."""

    records: Sequence[RunRecord] = ()
    running: Sequence[RunStart] = ()
    pauses: Sequence[PauseSpan] = ()
    members: Sequence[Member] = ()
    letters: Sequence[DeadLetter] = field(default_factory=tuple)


def fire_times(
    schedule: EventSchedule, since: float, until: float, warn: Callable[[str], None] | None = None
) -> list[float]:
    """Every time the schedule fires in (since, until], in its zone (a skipped local time does
    not fire, a repeated one fires once), disabled or not; none for a bad expression, and none
    before the schedule was created: a time its expression names before then was no firing.
    At most the newest MAX_FIRES: warn hears when older ones were cut."""
    if schedule.created is not None:
        since = max(since, schedule.created.timestamp())
    window = Window(schedule.start, schedule.end, schedule.created)
    times, seen = fires_between(
        schedule.expression, schedule.timezone, since, until, window, MAX_FIRES
    )
    if seen > MAX_FIRES and warn is not None:
        warn(
            f"schedule {schedule.name}: only its newest {MAX_FIRES:,} firings of {seen:,} in the "
            "window are listed (a shorter --since lists them all)"
        )
    return times


def pause_spans(entries: Iterable[AuditEntry]) -> list[PauseSpan]:
    """The pauses the audit trail's pause and resume entries describe, oldest first: each from
    its pause to its until (the entry's detail, "until <ISO 8601 time>"), to its resume, or to
    the next pause of its scope, which replaced it."""
    spans: list[PauseSpan] = []
    for entry in sorted(entries, key=lambda e: e.at):
        if entry.action == "pause":
            event = None if entry.target == "all events" else entry.target
            spans = _ended(spans, entry.at, {event})
            spans.append(PauseSpan(event, entry.at, _until(entry.detail)))
        elif entry.action == "resume":
            named: set[str | None] | None = (
                None if entry.target == "every pause" else set(entry.target.split(", "))
            )
            spans = _ended(spans, entry.at, named)
    return spans


def _ended(spans: list[PauseSpan], at: float, scopes: set[str | None] | None) -> list[PauseSpan]:
    """spans with those of these scopes (None: every one) still in effect at `at` ended then."""
    return [
        PauseSpan(s.event_id, s.start, at)
        if (scopes is None or s.event_id in scopes) and (s.end is None or s.end > at)
        else s
        for s in spans
    ]


def _until(detail: str) -> float | None:
    """A pause's until from its audit detail; None: until resumed (or not a time)."""
    if not detail.startswith("until "):
        return None
    try:
        return datetime.fromisoformat(detail.removeprefix("until ")).timestamp()
    except ValueError:
        return None


def _alive(member: Member, at: float) -> bool:
    ended = member.stopped_at
    if ended is None:
        ended = member.seen_at + LOST_AFTER_REFRESHES * member.refresh
    return member.started_at <= at <= ended


def letter_firing(letter: DeadLetter) -> tuple[str, float] | None:
    """The event_id and firing time a dead letter's body carries, or None."""
    try:
        body = safe_json.loads(letter.body)
        at = datetime.fromisoformat(str(body["firing"]["time"]).replace("Z", "+00:00"))
        return str(body["event_id"]), at.timestamp()
    except (ValueError, KeyError, TypeError):
        return None


def _attribute(letter: DeadLetter, name: str) -> str | None:
    value = letter.attributes.get(name)
    return None if value is None else str(value.get("StringValue"))


def _same(a: float | None, b: float) -> bool:
    return a is not None and abs(a - b) < 1.0


def _ours(schedule: EventSchedule, named: str | None) -> bool:
    return named is None or named == schedule.name or named.endswith("/" + schedule.name)


def judge(
    schedule: EventSchedule, at: float, evidence: Evidence, now: float, grace: float
) -> FiringRow:
    """What became of the schedule's firing at `at`, by the evidence."""
    event_id = schedule.event_id or ""
    mine = [
        r for r in evidence.records if _same(r.firing_at, at) and _ours(schedule, r.firing_schedule)
    ]
    dropped = [r for r in mine if r.duplicate_of is not None]
    runs = [r for r in mine if r.duplicate_of is None]
    row = FiringRow(
        event_id,
        at,
        schedule.name,
        FiringStatus.MISSED,
        duplicates=len(dropped),
        timezone=schedule.timezone,
    )
    done = [r for r in runs if r.final and r.outcome not in _NOT_RUN]
    if done and done[-1].origin == Origin.CATCH_UP.value:
        # The firing's own run (the oldest) was a catch-up's: it ran, late.
        return _with(
            row,
            FiringStatus.CAUGHT_UP,
            run=done[0],
            reruns=tuple(done[1:]),
            reason=caught_up_reason(done[-1]),
        )
    if done:
        return _with(row, FiringStatus.RAN, run=done[0], reruns=tuple(done[1:]))
    if runs and not any(r.final for r in runs):
        return _with(row, FiringStatus.RUNNING, run=runs[0])
    if not runs and any(at - 1 <= s.sent_at <= at + grace for s in evidence.running):
        return _with(row, FiringStatus.RUNNING)
    if dropped and not runs:
        return _with(row, FiringStatus.DUPLICATE, reason=f"duplicate of {dropped[0].duplicate_of}")
    reason = missed_reason(schedule, at, evidence, runs)
    if reason is None and now - at < grace:
        return _with(row, FiringStatus.DUE)
    if reason == PAUSED_REASON:
        return _with(row, FiringStatus.PAUSED, reason=reason)
    return _with(row, FiringStatus.MISSED, reason=reason or "no message reached the queue")


def caught_up_reason(record: RunRecord) -> str:
    """Who noticed a caught-up firing, and how late its run started."""
    late = "" if record.lateness is None else f", started {format_span(record.lateness)} late"
    return f"caught up by daemon {record.triggered_by or '?'}{late}"


def _with(row: FiringRow, status: FiringStatus, **changes: Any) -> FiringRow:
    return FiringRow(**{**row.__dict__, "status": status, **changes})


def missed_reason(
    schedule: EventSchedule, at: float, evidence: Evidence, runs: Sequence[RunRecord]
) -> str | None:
    """Why a firing with no run did not run, checked in the ledger's order; None: not known."""
    if not schedule.enabled:
        return "schedule disabled"
    if any(span.holds(schedule.event_id or "", at) for span in evidence.pauses):
        return PAUSED_REASON
    for letter in evidence.letters:
        carried = letter_firing(letter)
        if carried is None or carried[0] != schedule.event_id or not _same(carried[1], at):
            continue
        code = _attribute(letter, SCHEDULER_ERROR_CODE)
        if code is not None:
            message = _attribute(letter, SCHEDULER_ERROR_MESSAGE) or ""
            return f"the scheduler could not deliver it: {code}: {message}".rstrip(": ")
        return f"dead-lettered: {letter.error or 'received too many times'}"
    for record in runs:
        if record.outcome in _NOT_RUN:
            return _NOT_RUN[record.outcome]
    if not any(_alive(member, at) for member in evidence.members):
        return "no live daemon then"
    return None


def ledger(
    schedules: Sequence[EventSchedule],
    evidence: dict[str, Evidence],
    since: float,
    now: float,
    grace: float = DEFAULT_GRACE,
    warn: Callable[[str], None] | None = None,
) -> list[FiringRow]:
    """Every firing of the schedules in (since, now], judged, newest first; warn hears of a
    schedule whose oldest firings were cut (MAX_FIRES)."""
    rows = [
        judge(schedule, at, evidence.get(schedule.event_id or "", Evidence()), now, grace)
        for schedule in schedules
        for at in fire_times(schedule, since, now, warn)
    ]
    return sorted(rows, key=lambda row: (row.at, row.schedule), reverse=True)


def read_evidence(
    store: Store,
    schedules: Sequence[EventSchedule],
    since: float,
    now: float,
    *,
    letters: bool = True,
) -> dict[str, Evidence]:
    """The run records, runs in progress, pauses, daemons and dead letters of the schedules'
    events: a Query per event, the trail, the daemons' items and each queue's DLQ read once
    (without letters, the DLQs are left alone: a reader hides their messages while it reads)."""
    config = store.config
    with store.reading():
        pauses = pause_spans(entries_since(store.client, store.table, since - DEFAULT_SINCE))
        members = read_members(config, store.client)
        summaries = {s.event_id: s for s in store.history.summaries()}
    dead = _letters(store, schedules) if letters else []
    found: dict[str, Evidence] = {}
    for event_id in sorted({s.event_id for s in schedules if s.event_id}):
        fires = sum(len(fire_times(s, since, now)) for s in schedules if s.event_id == event_id)
        limit = fires * RUNS_PER_FIRING + _RUNS_MARGIN
        summary = summaries.get(event_id)
        with store.reading():
            records = store.history.runs(event_id, limit)
            running = (
                [r.start for r in running_now(store, summary, now) if not r.stale]
                if summary
                else []
            )
        found[event_id] = Evidence(records, running, pauses, members, dead)
    return found


#: Most runs a deleted schedule's ledger reads (one Query).
RECORDED_RUNS = 500


def recorded_firings(
    store: Store,
    event_id: str,
    since: float,
    missed_only: bool,
    warn: Callable[[str], None] | None,
) -> list[FiringRow]:
    """The firings of an event no schedule sends any more, as its runs since `since` recorded
    them (its missed ones are not known without the schedule), newest first. ResourceMissingError
    when no run of it recorded a firing either."""
    with store.reading():
        records = store.history.runs(event_id, RECORDED_RUNS)
    fired = [r for r in records if r.firing_at is not None and r.firing_schedule is not None]
    if not fired:
        raise ResourceMissingError(f"no schedule sends event {event_id!r}, and no run of it fired")
    if warn is not None and all(r.pipeline_step for r in fired):
        # A pipeline's step has no schedule: its runs carry its root's firings.
        warn(
            f"event {event_id!r} is a step of a pipeline, with no schedule of its own: its "
            "root's firings as its runs recorded them (`sqsjkr firings ROOT` lists them all)"
        )
    elif warn is not None:
        warn(
            f"no schedule sends event {event_id!r} any more (deleted?): its firings as its runs "
            "recorded them; its missed ones are not known"
        )
    rows: dict[str, FiringRow] = {}
    for record in fired:
        assert record.firing_at is not None and record.firing_schedule is not None
        firing = Firing(record.firing_at, record.firing_schedule)
        if record.firing_at <= since or firing.key in rows:
            continue
        schedule = EventSchedule(firing.schedule, "", "UTC", True, event_id, None, None)
        rows[firing.key] = judge(schedule, firing.at, Evidence(records=fired), time.time(), 0)
    found = sorted(rows.values(), key=lambda row: row.at, reverse=True)
    return [r for r in found if r.status is FiringStatus.MISSED] if missed_only else found


def _letters(store: Store, schedules: Sequence[EventSchedule]) -> list[DeadLetter]:
    """The dead letters of each queue's dead-letter queue, and of the schedules' own (a FIFO
    queue's schedules dead-letter into a standard queue: the Scheduler refuses a FIFO one)."""
    letters: list[DeadLetter] = []
    read: set[str] = set()
    for queue in store.config.all_queues():
        try:
            queues = queues_of(store.config, queue.name)
        except ResourceMissingError:
            continue  # a queue without a dead-letter queue dead-letters nothing
        letters += read_letters(queues, counted=True)
        read.add(queues.dlq_url)
    sqs = make_client(store.session, "sqs")
    for arn in sorted({s.dead_letter_arn for s in schedules if s.dead_letter_arn}):
        try:
            url = dead_letter_queue_url(sqs, arn)
        except ResourceMissingError:
            continue  # deleted since: the Scheduler's delivery fails there too
        if url not in read:
            read.add(url)
            with Peek(sqs, url) as peek:
                letters += [letter for page in peek.pages() for letter in page]
    return letters


def firings(
    store: Store,
    event_id: str | None,
    since: float,
    now: float,
    *,
    missed_only: bool = False,
    grace: float | None = None,
    letters: bool = True,
    pipelines: bool = True,
    warn: Callable[[str], None] | None = None,
) -> list[FiringRow]:
    """The ledger of the config's schedules (of event_id's, when given) from now - since to now,
    newest first; missed_only keeps the missed firings; without letters, the dead-letter queues
    are not read (a firing the scheduler could not deliver is missed for another reason);
    without pipelines, the steps of the pipelines the firings started are not read.
    grace: how long a firing is due before it is missed (default: [check] grace, as the check
    calls it late)."""
    if grace is None:
        grace = store.config.check.grace.seconds
    found = [
        s
        for s in read_schedules(store.config, store.session)
        if s.event_id is not None and (event_id is None or s.event_id == event_id)
    ]
    start = now - since
    if event_id is not None and not found:
        # Its schedule was deleted (or never existed): its past firings are its runs'.
        rows = recorded_firings(store, event_id, start, missed_only, warn)
    else:
        evidence = read_evidence(store, found, start, now, letters=letters)
        rows = ledger(found, evidence, start, now, grace, warn)
    if missed_only:
        return [r for r in rows if r.status is FiringStatus.MISSED]
    if not pipelines:
        return rows
    return with_pipelines(store, rows, lambda row, view: _with(row, row.status, pipeline=view))
