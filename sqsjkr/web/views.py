"""What each page shows, built from the fleet's reads: the overview's counts and the events that need
someone (judged as `status --check` judges), the events table and its filters, an event's chart.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from sqsjkr.contract import safe_json
from sqsjkr.contract.run import EventSummary, RunOutcome, RunRecord
from sqsjkr.fleet.firings import FiringRow
from sqsjkr.fleet.history import run_type
from sqsjkr.fleet.late import Scheduler
from sqsjkr.fleet.locks import HeldLock
from sqsjkr.fleet.pause import Pause, paused
from sqsjkr.fleet.pipeline_steps import PipelineView
from sqsjkr.fleet.route import Route, routed
from sqsjkr.fleet.running import RunningNow
from sqsjkr.fleet.schedules import EventSchedule
from sqsjkr.fleet.status import (
    Finding,
    Level,
    age_problem,
    judge,
    lateness,
    overdue,
    with_scheduled,
)
from sqsjkr.web.fleet import STRIP_RUNS, Budget, Firings, Fleet, Schedules
from sqsjkr.web.pipeline_graph import Drawing, layout

#: The states an event can be filtered by, as the events page's select lists them.
STATES = ("failing", "late", "running", "stale", "paused", "ok")
EVENTS_PER_PAGE = 50
RUNS_PER_PAGE = 25


@dataclass(frozen=True)
class EventRow:
    """One event as the overview and the events page show it."""

    summary: EventSummary
    finding: Finding
    late: str | None  # why it is late, as status --check says it
    pause: Pause | None
    running: tuple[RunningNow, ...]
    runs: tuple[RunRecord, ...] | None  # its last runs, newest first; None: not read yet
    queue: str | None = None
    next_run: float | None = None  # unix seconds
    schedule: str | None = None
    #: Whether any of its schedules fires (False: every one is disabled; None: it has none).
    schedule_enabled: bool | None = None
    route: Route | None = None

    @property
    def event_id(self) -> str:
        return self.summary.event_id

    @property
    def states(self) -> set[str]:
        states = set()
        if self.summary.consecutive_failures:
            states.add("failing")
        if self.late:
            states.add("late")
        if any(not r.stale for r in self.running):
            states.add("running")
        if any(r.stale for r in self.running):
            states.add("stale")
        if self.pause is not None:
            states.add("paused")
        return states or {"ok"}

    @property
    def last_bad(self) -> RunRecord | None:
        """Its last final run that failed, from its runs (the summary's copy of its last run
        keeps no output); the summary's when its runs were not read yet."""
        bad = next((r for r in self.runs or () if r.final and r.outcome.failed), None)
        last = self.summary.last_run
        if bad is None and last is not None and last.final and last.outcome.failed:
            return last
        return bad

    @property
    def strip(self) -> list[RunRecord]:
        """The cells of its strip, oldest first."""
        return list(reversed(self.runs or ()))


@dataclass
class Overview:
    """The counts of what is wrong now, and the events that need someone, worst first."""

    counts: dict[str, int]
    attention: list[EventRow]
    daemons: int
    dead_letters: int
    unread: int  # events whose intervals were not learned yet (read at the next views)
    problems: list[str] = field(default_factory=list)
    missed: int = 0  # missed firings in the last day (FIRINGS_WINDOW)
    skipped: int = 0  # firings of the last day skipped while their event was paused
    firings_read_at: float | None = None  # when the firings were read (once a minute)


def event_rows(fleet: Fleet, summaries: Sequence[EventSummary], budget: Budget) -> list[EventRow]:
    """Each event judged as `status --check` does, with its pause, runs in progress and runs."""
    now = fleet.clock()
    pauses = fleet.pauses()
    routes = fleet.routes()
    running: dict[str, list[RunningNow]] = {}
    for run in fleet.running():
        running.setdefault(run.start.event_id, []).append(run)
    scheduler = _scheduler(fleet.schedules())
    pipelines = fleet.pipeline_verdicts(summaries)
    rows = []
    for summary in summaries:
        runs = fleet.runs(summary, budget)
        past = functools.partial(lambda r: r or [], runs)
        pause = paused(pauses, summary.event_id, now)
        pipeline = pipelines.get(summary.event_id)
        finding = judge(
            summary,
            past,
            fleet.policy,
            now,
            paused=pause is not None,
            scheduler=scheduler,
            pipeline=pipeline,
        )
        late = None
        if pause is None and pipeline is not None and pipeline.is_step:
            late = overdue(summary, past, fleet.policy, now, scheduler, pipeline)
        elif pause is None:
            # As the verdict says it: a late firing first, else too long without a success.
            _, late = lateness(summary.event_id, summary, fleet.policy, now, scheduler, past)
            late = late or age_problem(summary, past, fleet.policy, now)
        rows.append(
            EventRow(
                summary,
                finding,
                late,
                pause,
                tuple(running.get(summary.event_id, ())),
                None if runs is None else tuple(runs),
                route=routed(routes, summary.event_id),
            )
        )
    return rows


def _scheduler(schedules: Schedules) -> Scheduler | None:
    """The scheduler's schedules as the verdicts read them, when they could be read."""
    return None if schedules.problem else Scheduler.of(schedules.schedules)


def _with_scheduled(summaries: Sequence[EventSummary], schedules: Schedules) -> list[EventSummary]:
    return with_scheduled(summaries, (s.event_id for s in schedules.schedules if s.event_id))


def overview(fleet: Fleet) -> Overview:
    """The overview: one index query and batched reads of the summaries, then runs only of the
    events that ran since they were last read (at most RUNS_QUERIES_PER_VIEW)."""
    summaries = [s for s in fleet.summaries() if not s.one_off or s.consecutive_failures]
    summaries = _with_scheduled(summaries, fleet.schedules())
    budget = Budget()
    rows = event_rows(fleet, summaries, budget)
    counts = {state: sum(state in row.states for row in rows) for state in STATES}
    stale_elsewhere = [r for r in fleet.running() if r.stale]
    counts["stale"] = len(stale_elsewhere)
    attention = [row for row in rows if row.finding.level > Level.OK or "stale" in row.states]
    attention.sort(key=lambda row: (-row.finding.level, -row.summary.consecutive_failures))
    letters = fleet.dead_letter_counts()
    problems = [f"{d.queue}: {d.problem}" for d in letters if d.problem]
    # The ledger of every scheduled event: read only when there are schedules to judge.
    ledger = fleet.firings() if fleet.schedules().schedules else Firings()
    if ledger.problem:
        problems.append(f"firings: {ledger.problem}")
    return Overview(
        counts,
        attention,
        daemons=len(fleet.live_members()),
        dead_letters=sum(d.count for d in letters),
        unread=budget.skipped,
        problems=problems,
        missed=len(ledger.missed),
        skipped=len(ledger.paused),
        firings_read_at=ledger.read_at,
    )


@dataclass(frozen=True)
class EventFilter:
    """The events page's filters, from its query string."""

    state: str = ""
    queue: str = ""
    text: str = ""
    page: int = 1

    @classmethod
    def of(cls, args: Any) -> EventFilter:
        state = args.get("state", "")
        page = args.get("page", "1")
        return cls(
            state if state in STATES else "",
            args.get("queue", "")[:200],
            args.get("q", "")[:200],
            # ASCII digits only ("²" is a digit to str.isdigit), and few: int() refuses 5,000.
            max(1, int(page)) if page.isascii() and page.isdigit() and len(page) <= 9 else 1,
        )

    def keeps(self, row: EventRow) -> bool:
        if self.state and self.state not in row.states:
            return False
        if self.queue and row.queue != self.queue:
            return False
        needle = self.text.lower()
        command = row.summary.last_run.command if row.summary.last_run else ""
        return not needle or needle in row.event_id.lower() or needle in command.lower()


@dataclass
class EventsPage:
    rows: list[EventRow]
    total: int
    pages: int
    queues: list[str]
    unread: int
    schedule_problem: str | None


def events_page(fleet: Fleet, wanted: EventFilter) -> EventsPage:
    """The events of one page of the filtered list; runs are read for that page's events only
    (state filters that need them judge every event, within the budget)."""
    schedules = fleet.schedules()
    summaries = _with_scheduled(fleet.summaries(), schedules)
    budget = Budget()
    # Filters by the cheap fields first: only the events left are judged.
    cheap = EventFilter(queue=wanted.queue, text=wanted.text)
    rows = [_scheduled(row, schedules) for row in event_rows(fleet, summaries, Budget(left=0))]
    rows = [row for row in rows if cheap.keeps(row)]
    if wanted.state:
        rows = event_rows(fleet, [r.summary for r in rows], budget)
        rows = [_scheduled(row, schedules) for row in rows if wanted.keeps(row)]
    pages = max(1, -(-len(rows) // EVENTS_PER_PAGE))
    start = (min(wanted.page, pages) - 1) * EVENTS_PER_PAGE
    shown = rows[start : start + EVENTS_PER_PAGE]
    if not wanted.state:
        shown = [
            _scheduled(row, schedules)
            for row in event_rows(fleet, [r.summary for r in shown], budget)
        ]
    queues = sorted({q.name for q in fleet.config.all_queues()})
    return EventsPage(shown, len(rows), pages, queues, budget.skipped, schedules.problem)


def _scheduled(row: EventRow, schedules: Schedules) -> EventRow:
    """row with its schedule, next run and queue, from the scheduler's schedules."""
    own = schedules.of(row.event_id)
    fire = schedules.next_run.get(row.event_id)
    # An enabled schedule is the one shown, when there is one: it is the one that fires.
    first = next((s for s in own if s.enabled), own[0] if own else None)
    return replace(
        row,
        queue=(first.target_arn or "").rsplit(":", 1)[-1] or None if first else None,
        next_run=None if fire is None else fire.timestamp(),
        schedule=None if first is None else f"{first.expression} ({first.timezone})",
        schedule_enabled=None if first is None else first.enabled,
    )


#: The firings of a pipeline's root an event's page links to, newest first.
PIPELINE_FIRINGS = 24


@dataclass
class EventPage:
    """An event's page: its row (None: no summary), a page of its runs, its lock and who holds
    it, and its schedules."""

    event_id: str
    row: EventRow | None
    runs: list[RunRecord]
    more: str | None  # the key the next page of runs starts before
    lock_id: str | None
    lock: HeldLock | None
    schedules: Schedules
    #: Its schedules' firings of the last day, oldest first (its strip when it has schedules).
    firings: Firings = Firings()
    #: The run of a pipeline drawn: the one asked for, else its newest firing's or run's.
    pipeline: PipelineView | None = None

    @property
    def drawing(self) -> Drawing | None:
        return None if self.pipeline is None else layout(self.pipeline)

    @property
    def pipeline_firings(self) -> list[FiringRow]:
        """Its last day's firings that started a run of a pipeline, newest first: each a link
        (to its run's key: the drawn run alone is read)."""
        rows = [row for row in self.firings.rows if row.run is not None and row.run.pipeline_key]
        return rows[:PIPELINE_FIRINGS]

    @property
    def firing_strip(self) -> list[FiringRow]:
        return list(reversed(self.firings.rows[:STRIP_RUNS]))


def event_page(
    fleet: Fleet, event_id: str, before: str | None, pipeline_key: str | None = None
) -> EventPage | None:
    """The event's page; None when the history knows nothing of it. Its first page's runs are
    the very read its strip and verdict are made of, so that header, strip, table and chart
    agree on every refresh. pipeline_key: the run of a pipeline to draw (default: the one its
    newest firing, or else its newest run, belongs to)."""
    summary = fleet.summary(event_id)
    if summary is None and fleet.schedules().of(event_id):
        summary = EventSummary(event_id)  # scheduled, not run yet: its firings say why
    budget = Budget()
    rows = event_rows(fleet, [summary], budget) if summary is not None else []
    row = rows[0] if rows else None
    if before is None and row is not None and row.runs is not None:
        runs = list(row.runs[:RUNS_PER_PAGE])
        full = len(row.runs) > RUNS_PER_PAGE
    else:
        runs = fleet.event_runs(event_id, RUNS_PER_PAGE, before)
        full = len(runs) == RUNS_PER_PAGE
    if row is None and not runs:
        return None
    lock_id = _lock_of(row, runs, fleet.schedules().of(event_id))
    ledger = fleet.firings(event_id)
    return EventPage(
        event_id,
        row,
        runs,
        run_key(runs[-1]) if full else None,
        lock_id,
        fleet.lock(lock_id) if lock_id else None,
        fleet.schedules(),
        ledger,
        _pipeline_of(fleet, ledger, runs, pipeline_key),
    )


def _pipeline_of(
    fleet: Fleet, ledger: Firings, runs: Sequence[RunRecord], key: str | None
) -> PipelineView | None:
    """The run of a pipeline the event page draws: key's, else its newest firing's, else its
    newest run's. Read as often as every other part of the page: the ledger, read once a
    minute, would draw a step run again since as it was before."""
    fired = {r.run.pipeline_key: r.event_id for r in ledger.rows if r.run and r.run.pipeline_key}
    if key is None:
        key = next(iter(fired), None)  # the ledger is newest first
    if key is None:
        key = next((r.pipeline_key for r in runs if r.pipeline_key), None)
    # A firing's row names the run's root's event: its steps are found as the ledger found them.
    return None if key is None else fleet.pipeline(key, fired.get(key))


def _lock_of(
    row: EventRow | None, runs: Sequence[RunRecord], schedules: Sequence[EventSchedule]
) -> str | None:
    """The event's lock_id: its runs in progress name it first (an event that has not ended a
    run yet may hold it now), then its last runs, then its schedules' messages."""
    for start in row.running if row else ():
        if start.start.lock_id:
            return start.start.lock_id
    for record in runs:
        if record.lock_id:
            return record.lock_id
    for schedule in schedules:
        lock_id = _message_lock(schedule.message)
        if lock_id:
            return lock_id
    return None


def _message_lock(message: str | None) -> str | None:
    try:
        data = safe_json.loads(message or "")
    except ValueError:  # safe_json's JsonError
        return None
    lock_id = data.get("lock_id") if isinstance(data, dict) else None
    return lock_id if isinstance(lock_id, str) and lock_id else None


def running_run(fleet: Fleet, message_id: str) -> RunningNow | None:
    """The run in progress of message_id, for the kill's confirm step (None: none now)."""
    return next((r for r in fleet.running() if r.start.message_id == message_id), None)


def may_rerun(fleet: Fleet, record: RunRecord) -> bool:
    """Whether record's step may be run again within its pipeline's run (`trigger STEP --run`):
    a step, not the root, that failed in that run and has not succeeded since."""
    key, step = record.pipeline_key, record.pipeline_step
    if not key or not step or not record.final or not record.outcome.failed:
        return False
    state = fleet.pipeline_state(key)
    return state is not None and step != state.root and step in state.failed - state.succeeded


def run_key(record: RunRecord) -> str:
    """The run's permalink key: its item's Type."""
    return run_type(record)


def chart_data(runs: Sequence[RunRecord], now: float) -> dict[str, Any]:
    """An event's durations and queue delays over time, oldest first, for its chart; with the
    dashboard's UTC offset, so that its axis writes times as every other place on the page."""
    ordered = sorted(runs, key=lambda r: r.ended_at)
    offset = datetime.fromtimestamp(ordered[-1].ended_at if ordered else now).astimezone()
    return {
        "offset": int((offset.utcoffset() or timedelta()).total_seconds()),
        "zone": offset.strftime("%z")[:3] + ":" + offset.strftime("%z")[3:],
        "t": [round(r.ended_at, 3) for r in ordered],
        "duration": [round(r.duration, 3) for r in ordered],
        "delay": [round(r.queue_delay, 3) for r in ordered],
        "ok": [r.outcome is RunOutcome.SUCCEEDED for r in ordered],
    }
