"""The dashboard's reads of a fleet: through the fleet layer (sqsjkr/fleet/) alone, behind the
one short cache, each page view for a bounded number of AWS calls (no Scan but the locks page's).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from sqsjkr.contract.config import Config
from sqsjkr.contract.run import EventSummary, RunRecord
from sqsjkr.fleet.audit import AuditEntry, entries_since
from sqsjkr.fleet.daemons import Member, live, members_in
from sqsjkr.fleet.dead_letters import DeadLetter, Queues, letter_count, queues_of, read_letters
from sqsjkr.fleet.failures import failure_text
from sqsjkr.fleet.firings import FiringRow, FiringStatus, firings
from sqsjkr.fleet.history import Store, store_of
from sqsjkr.fleet.live import LiveOutput, live_output
from sqsjkr.fleet.locks import HeldLock, Holdings, Table, held, lock_of
from sqsjkr.fleet.pause import Pause, pauses_in_effect, read_controls
from sqsjkr.fleet.pipeline_steps import PipelineState, PipelineView, stuck_reasons
from sqsjkr.fleet.pipeline_verdicts import PipelineVerdict, last_run_keys, pipeline_verdicts
from sqsjkr.fleet.pipelines import may_be_stuck, read_states, read_view, read_views
from sqsjkr.fleet.route import Route, routes_in
from sqsjkr.fleet.running import RunningNow, read_claims, running_against
from sqsjkr.fleet.schedules import EventSchedule, next_runs, read_schedules
from sqsjkr.fleet.status import CheckPolicy
from sqsjkr.web.cache import Cache

#: Runs kept per event for its strip of cells and its learned interval (status --check learns
#: from 20 of them).
STRIP_RUNS = 30
#: At most this many events' runs are queried for one page view; the rest at the next views.
#: An event's runs are read again only once it has run again.
RUNS_QUERIES_PER_VIEW = 50
#: The schedules change seldom, and reading them costs a call per schedule.
SCHEDULES_FRESH = 60.0
#: A queue's URL and dead-letter queue do not change while the dashboard runs.
QUEUES_FRESH = 600.0
#: An event's runs stay cached this long after it last ran: they change only when it runs.
RUNS_FRESH = 3600.0
#: The firings the dashboard shows: the last day's, read again each minute (a Query per
#: scheduled event, the audit trail, the daemons' items and the dead-letter queues).
FIRINGS_WINDOW = 86400.0
FIRINGS_FRESH = 60.0


@dataclass
class Budget:
    """The run queries one page view may still make."""

    left: int = RUNS_QUERIES_PER_VIEW
    skipped: int = 0  # events whose runs were not read this view


@dataclass(frozen=True)
class DeadLetters:
    """A queue's dead-letter queue and what it holds (or why it could not be read)."""

    queue: str
    dlq: str | None
    letters: tuple[DeadLetter, ...] = ()
    count: int = 0
    problem: str | None = None


@dataclass(frozen=True)
class Schedules:
    """The fleet's schedules, each event's next run, and why they are unknown (None: known)."""

    schedules: tuple[EventSchedule, ...] = ()
    next_run: dict[str, datetime] = field(default_factory=dict)
    problem: str | None = None
    #: When they were read (unix seconds): they are read once a minute (SCHEDULES_FRESH).
    read_at: float | None = None

    def of(self, event_id: str) -> list[EventSchedule]:
        return [s for s in self.schedules if s.event_id == event_id]


@dataclass(frozen=True)
class Firings:
    """The last FIRINGS_WINDOW's firings, newest first, or why they could not be read."""

    rows: tuple[FiringRow, ...] = ()
    problem: str | None = None
    #: When they were read (unix seconds): they are read once a minute (FIRINGS_FRESH), and a
    #: page says how old they are once they are older than the cache's FRESH_SECONDS.
    read_at: float | None = None

    @property
    def missed(self) -> list[FiringRow]:
        return [row for row in self.rows if row.status is FiringStatus.MISSED]

    @property
    def paused(self) -> list[FiringRow]:
        """Skipped while their event was paused on purpose: shown apart from the missed."""
        return [row for row in self.rows if row.status is FiringStatus.PAUSED]

    @property
    def caught_up(self) -> list[FiringRow]:
        """Missed, then run by a daemon's catch-up: shown with who noticed and how late."""
        return [row for row in self.rows if row.status is FiringStatus.CAUGHT_UP]


class Fleet:
    """What the fleet of one config shows, read through the cache."""

    def __init__(
        self, config: Config, cache: Cache | None = None, clock: Callable[[], float] = time.time
    ) -> None:
        self.config = config
        self.store: Store = store_of(config)
        self.cache = cache or Cache()
        self.clock = clock
        self.policy = CheckPolicy()

    @property
    def table(self) -> Table:
        return Table(self.store.client, self.store.table)

    @functools.cached_property
    def sqs(self) -> Any:
        """One SQS client for every read and action of the dashboard's queues."""
        return self.store.service_client("sqs")

    # -- the table ------------------------------------------------------------------------------

    def summaries(self) -> list[EventSummary]:
        """Every event's summary: the TypeExpiredIndex's query and batched reads."""
        return self.cache.get("summaries", self._read(self.store.history.summaries))

    def summary(self, event_id: str) -> EventSummary | None:
        return next((s for s in self.summaries() if s.event_id == event_id), None)

    def pauses(self) -> list[Pause]:
        """The pauses in effect, from the controls item."""
        return pauses_in_effect(self._controls(), self.clock())

    def routes(self) -> list[Route]:
        """The routes, from the controls item."""
        return routes_in(self._controls())

    def _controls(self) -> dict[str, Any]:
        """The controls item that holds the pauses and the routes: one GetItem serves both."""
        read = functools.partial(read_controls, self.store.client, self.store.table)
        return self.cache.get("controls", self._read(read))

    def live(self, event_id: str, message_id: str) -> LiveOutput | None:
        """The live output of a run in progress, as its daemon last wrote it: one GetItem."""
        client, table = self.store.client, self.store.table
        read = functools.partial(live_output, client, table, event_id, message_id)
        return self.cache.get(("live", event_id, message_id), self._read(read))

    def members(self) -> list[Member]:
        read = functools.partial(members_in, self.store.client, self.store.table)
        return self.cache.get("members", self._read(read))

    def live_members(self) -> list[Member]:
        return live(self.members(), self.clock())

    def holdings(self) -> Holdings:
        """The held locks and group slots: `sqsjkr locks`'s Scan, once per cache period."""
        return self.cache.get("holdings", functools.partial(held, self.table))

    def lock(self, lock_id: str) -> HeldLock | None:
        """Who holds lock_id now: one GetItem (None: free)."""
        read = functools.partial(lock_of, self.table, lock_id)
        return self.cache.get(("lock", lock_id), self._read(read))

    def audit(self, since: float) -> list[AuditEntry]:
        read = functools.partial(entries_since, self.store.client, self.store.table, since)
        # Keyed by the minute: every tab asking for "the last 7 days" shares one read.
        return self.cache.get(("audit", int(since // 60)), self._read(read))

    def runs(self, summary: EventSummary, budget: Budget | None = None) -> list[RunRecord] | None:
        """The event's last STRIP_RUNS runs, newest first; cached until it runs again. None
        when the page view's budget of queries is spent."""
        last = summary.last_run
        key = ("runs", summary.event_id, None if last is None else (last.message_id, last.ended_at))
        if last is None:
            return []
        hit = self.cache.peek(key)
        if hit is not None:
            return hit  # type: ignore[no-any-return]
        if budget is not None:
            if budget.left <= 0:
                budget.skipped += 1
                return None
            budget.left -= 1
        history, ended = self.store.history, last.ended_at

        def read() -> list[RunRecord]:
            # As of the summary: a run that ended since it was read waits for the next one, so
            # that the failures in a row and the strip agree.
            runs = history.runs(summary.event_id, STRIP_RUNS)
            return [r for r in runs if r.ended_at <= ended]

        return self.cache.get(key, self._read(read), RUNS_FRESH)

    def event_runs(self, event_id: str, limit: int, before: str | None) -> list[RunRecord]:
        """A page of the event's runs, newest first: one Query."""
        history = self.store.history
        read = functools.partial(history.runs, event_id, limit, before=before)
        return self.cache.get(("page", event_id, limit, before), self._read(read))

    def run(self, event_id: str, type_: str) -> RunRecord | None:
        """One run by its key: one GetItem (a run's record does not change)."""
        read = functools.partial(self.store.history.record_of, event_id, type_)
        return self.cache.get(("run", event_id, type_), self._read(read), RUNS_FRESH)

    def running(self) -> list[RunningNow]:
        """Every run in progress, oldest first, each checked against its claim (batched)."""
        starts = [start for s in self.summaries() for start in s.running]
        ids = tuple(s.claim_item for s in starts)
        read = functools.partial(read_claims, self.store.client, self.store.table, ids)
        claims = self.cache.get(("claims", ids), self._read(read))
        return running_against(starts, claims, self.clock())

    # -- the scheduler and the queues -----------------------------------------------------------

    def schedules(self) -> Schedules:
        return self.cache.get("schedules", self._read_schedules, SCHEDULES_FRESH)

    def _read_schedules(self) -> Schedules:
        read_at = self.clock()
        try:
            found = read_schedules(self.config, self.store.session)
        except Exception as exc:
            return Schedules(problem=failure_text(exc), read_at=read_at)
        now = datetime.fromtimestamp(read_at, timezone.utc)
        return Schedules(tuple(found), next_runs(found, now), read_at=read_at)

    def firings(self, event_id: str | None = None) -> Firings:
        """The ledger of the last FIRINGS_WINDOW, of event_id's schedules (None: of all)."""
        return self.cache.get(
            ("firings", event_id), functools.partial(self._read_firings, event_id), FIRINGS_FRESH
        )

    def _read_firings(self, event_id: str | None) -> Firings:
        if event_id is not None and not self.schedules().of(event_id):
            return Firings()
        read_at = self.clock()
        try:
            # The overview counts without reading the dead-letter queues: a reader hides their
            # messages while it reads, and only an event's page names each firing's reason.
            # Nor any page the steps of the pipelines the firings started: an event's page
            # draws one of them, read as often as the rest of the page (Fleet.pipeline).
            one = event_id is not None
            rows = firings(
                self.store, event_id, FIRINGS_WINDOW, read_at, letters=one, pipelines=False
            )
        except Exception as exc:
            return Firings(problem=failure_text(exc), read_at=read_at)
        return Firings(tuple(rows), read_at=read_at)

    def pipeline_verdicts(self, summaries: Sequence[EventSummary]) -> dict[str, PipelineVerdict]:
        """What the run of a pipeline each event's last run belongs to says, by event: the
        runs' states read by key (a BatchGetItem per 100, only for events whose last run was a
        pipeline's), and the runs that may be stuck read further, all at once."""
        # Every event's at once, so that each page's subsets of events share one read.
        keys = tuple(last_run_keys([*self.summaries(), *summaries]))
        if not keys:
            return {}
        read = functools.partial(read_states, self.store, keys)
        states = self.cache.get(("pipeline states", keys), self._read(read))
        stuck = self._stuck(states)
        return pipeline_verdicts(
            summaries, {s.key: s for s in states}, lambda s: stuck.get(s.key, [])
        )

    def _stuck(self, states: Sequence[PipelineState]) -> dict[str, list[str]]:
        """Why each of the runs of states is stuck, by key: those that may be by their state
        alone read together (every event's summary once, a Query per step event)."""
        now = self.clock()
        candidates = [s for s in states if may_be_stuck(s, now)]
        if not candidates:
            return {}
        read = functools.partial(read_views, self.store, candidates, None, self.summaries())
        views = self.cache.get(("stuck", tuple(s.key for s in candidates)), self._read(read))
        return {v.key: stuck_reasons(v, now) for v in views}

    def pipeline(self, key: str, root_event: str | None = None) -> PipelineView | None:
        """The run of a pipeline of that key, each step's state (None: none kept); root_event:
        its root's event, when a firing names it."""
        # Who runs which step now, from the summaries every page reads anyway.
        read = functools.partial(read_view, self.store, key, root_event, self.summaries())
        return self.cache.get(("pipeline", key, root_event), self._read(read))

    def pipeline_state(self, key: str) -> PipelineState | None:
        """The kept state of the run of a pipeline of that key (one GetItem; None: none kept)."""
        read = functools.partial(read_states, self.store, [key])
        found = self.cache.get(("pipeline state", key), self._read(read))
        return found[0] if found else None

    def queues(self) -> list[Queues | str]:
        """Each queue of the config with its dead-letter queue, or why it has none."""
        return self.cache.get("queues", self._read_queues, QUEUES_FRESH)

    def _read_queues(self) -> list[Queues | str]:
        opened: list[Queues | str] = []
        for queue in self.config.all_queues():
            try:
                opened.append(queues_of(self.config, queue.name, self.sqs))
            except Exception as exc:
                opened.append(f"{queue.name}: {failure_text(exc)}")
        return opened

    def dead_letter_counts(self) -> list[DeadLetters]:
        """How many messages each dead-letter queue holds: a GetQueueAttributes each."""
        return self.cache.get("dlq counts", functools.partial(self._each_dlq, _count))

    def dead_letters(self) -> list[DeadLetters]:
        """Every dead letter of every queue, read as `sqsjkr dlq list` reads them (and left)."""
        return self.cache.get("dlq letters", functools.partial(self._each_dlq, _letters))

    def _each_dlq(self, read: Callable[[Queues], DeadLetters]) -> list[DeadLetters]:
        """read of each queue's dead-letter queue; a queue without one says why."""
        return [
            DeadLetters(queues.split(":", 1)[0], None, problem=queues)
            if isinstance(queues, str)
            else read(queues)
            for queues in self.queues()
        ]

    def _read(self, read: Callable[[], Any]) -> Callable[[], Any]:
        """read under the table's own error: a missing table is named."""

        def reading() -> Any:
            with self.store.reading():
                return read()

        return reading


def _count(queues: Queues) -> DeadLetters:
    return DeadLetters(queues.name, queues.dlq_name, count=letter_count(queues))


def _letters(queues: Queues) -> DeadLetters:
    # As many as SQS counts: the page does not wait on each view for a receive that proves
    # none is left.
    letters = read_letters(queues, counted=True)
    return DeadLetters(queues.name, queues.dlq_name, tuple(letters), len(letters))
