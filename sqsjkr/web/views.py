"""What each page shows, built from the fleet's reads: the overview's counts and the events that need
someone (judged as `status --check` judges), the events table and its filters, an event's chart.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sqsjkr.backends.history import run_type
from sqsjkr.backends.pause import Pause, paused
from sqsjkr.backends.routes import Route, routed
from sqsjkr.commands.next_runs import fire_text
from sqsjkr.commands.status import Finding, Level, age_problem, judge
from sqsjkr.contract.run import EventSummary, RunOutcome, RunRecord
from sqsjkr.web.fleet import Budget, Fleet, RunningNow, Schedules

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
    next_run: str | None = None
    schedule: str | None = None
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


def event_rows(fleet: Fleet, summaries: Sequence[EventSummary], budget: Budget) -> list[EventRow]:
    """Each event judged as `status --check` does, with its pause, runs in progress and runs."""
    now = fleet.clock()
    pauses = fleet.pauses()
    routes = fleet.routes()
    running: dict[str, list[RunningNow]] = {}
    for run in fleet.running():
        running.setdefault(run.start.event_id, []).append(run)
    rows = []
    for summary in summaries:
        runs = fleet.runs(summary, budget)
        past = functools.partial(lambda r: r or [], runs)
        pause = paused(pauses, summary.event_id, now)
        finding = judge(summary, past, fleet.policy, now, paused=pause is not None)
        late = None if pause is not None else age_problem(summary, past, fleet.policy, now)
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


def overview(fleet: Fleet) -> Overview:
    """The overview: one index query and batched reads of the summaries, then runs only of the
    events that ran since they were last read (at most RUNS_QUERIES_PER_VIEW)."""
    summaries = [s for s in fleet.summaries() if not s.one_off or s.consecutive_failures]
    budget = Budget()
    rows = event_rows(fleet, summaries, budget)
    counts = {state: sum(state in row.states for row in rows) for state in STATES}
    stale_elsewhere = [r for r in fleet.running() if r.stale]
    counts["stale"] = len(stale_elsewhere)
    attention = [row for row in rows if row.finding.level > Level.OK or "stale" in row.states]
    attention.sort(key=lambda row: (-row.finding.level, -row.summary.consecutive_failures))
    letters = fleet.dead_letter_counts()
    return Overview(
        counts,
        attention,
        daemons=len(fleet.live_members()),
        dead_letters=sum(d.count for d in letters),
        unread=budget.skipped,
        problems=[f"{d.queue}: {d.problem}" for d in letters if d.problem],
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
    summaries = fleet.summaries()
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
    first = own[0] if own else None
    return replace(
        row,
        queue=(first.target_arn or "").rsplit(":", 1)[-1] or None if first else None,
        next_run=None if fire is None else fire_text(fire),
        schedule=None if first is None else f"{first.expression} ({first.timezone})",
    )


def run_key(record: RunRecord) -> str:
    """The run's permalink key: its item's Type."""
    return run_type(record)


def chart_data(runs: Sequence[RunRecord]) -> dict[str, list[Any]]:
    """An event's durations and queue delays over time, oldest first, for its chart."""
    ordered = sorted(runs, key=lambda r: r.ended_at)
    return {
        "t": [round(r.ended_at, 3) for r in ordered],
        "duration": [round(r.duration, 3) for r in ordered],
        "delay": [round(r.queue_delay, 3) for r in ordered],
        "ok": [r.outcome is RunOutcome.SUCCEEDED for r in ordered],
    }
