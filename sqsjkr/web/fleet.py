"""The dashboard's reads of a fleet: through the backends and the commands' own helpers, behind the
one short cache, each page view for a bounded number of AWS calls (no Scan but the locks page's).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from sqsjkr.backends.audit import AuditEntry, DynamoAudit
from sqsjkr.backends.aws import make_client
from sqsjkr.backends.controls import ControlItem
from sqsjkr.backends.dedupe import THROTTLE_TYPE
from sqsjkr.backends.index import BATCH_GET_LIMIT
from sqsjkr.backends.live import DynamoLive, LiveOutput
from sqsjkr.backends.locks import LOCK_TYPE
from sqsjkr.backends.members import DynamoRoster, Member
from sqsjkr.backends.pause import Pause, decode_pauses, in_effect
from sqsjkr.backends.routes import Route, decode_routes
from sqsjkr.backends.scheduler import EventSchedule
from sqsjkr.commands.daemons import live
from sqsjkr.commands.failures import aws_failure
from sqsjkr.commands.history import Store, store_of
from sqsjkr.commands.locks import HeldLock, Holdings, Table, held
from sqsjkr.commands.next_runs import next_runs, read_schedules
from sqsjkr.commands.status import CheckPolicy, claim_is_live
from sqsjkr.contract.config import Config
from sqsjkr.contract.run import EventSummary, RunRecord, RunStart
from sqsjkr.errors import SqsjkrError
from sqsjkr.fleet.dead_letters import DeadLetter, Peek, Queues, queues_of
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


@dataclass(frozen=True)
class RunningNow:
    """A run the summaries show in progress, against its claim: stale when its daemon died."""

    start: RunStart
    stale: bool
    lease_until: float | None

    def lease_left(self, now: float) -> float | None:
        return None if self.lease_until is None else self.lease_until - now


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

    def of(self, event_id: str) -> list[EventSchedule]:
        return [s for s in self.schedules if s.event_id == event_id]


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
        return make_client(self.store.session, "sqs")

    # -- the table ------------------------------------------------------------------------------

    def summaries(self) -> list[EventSummary]:
        """Every event's summary: the TypeExpiredIndex's query and batched reads."""
        return self.cache.get("summaries", self._read(self.store.history.summaries))

    def summary(self, event_id: str) -> EventSummary | None:
        return next((s for s in self.summaries() if s.event_id == event_id), None)

    def pauses(self) -> list[Pause]:
        """The pauses in effect, from the controls item."""
        return in_effect(decode_pauses(self._controls()), self.clock())

    def routes(self) -> list[Route]:
        """The routes, from the controls item."""
        return decode_routes(self._controls())

    def _controls(self) -> dict[str, Any]:
        """The controls item that holds the pauses and the routes: one GetItem serves both."""
        item = ControlItem(self.store.client, self.store.table)
        return self.cache.get("controls", self._read(item.read_attributes))

    def live(self, event_id: str, message_id: str) -> LiveOutput | None:
        """The live output of a run in progress, as its daemon last wrote it: one GetItem."""
        live = DynamoLive(self.store.client, self.store.table)
        read = functools.partial(live.read, event_id, message_id)
        return self.cache.get(("live", event_id, message_id), self._read(read))

    def members(self) -> list[Member]:
        roster = DynamoRoster(self.store.client, self.store.table)
        return self.cache.get("members", self._read(roster.members))

    def live_members(self) -> list[Member]:
        return live(self.members(), self.clock())

    def holdings(self) -> Holdings:
        """The held locks and group slots: `sqsjkr locks`'s Scan, once per cache period."""
        return self.cache.get("holdings", functools.partial(held, self.table))

    def lock(self, lock_id: str) -> HeldLock | None:
        """Who holds lock_id now: one GetItem (None: free)."""

        def read() -> HeldLock | None:
            key = {"Id": {"S": lock_id}, "Type": {"S": LOCK_TYPE}}
            item = self.store.client.get_item(TableName=self.store.table, Key=key).get("Item")
            return HeldLock.from_item(item) if item and "EventId" in item else None

        return self.cache.get(("lock", lock_id), self._read(read))

    def audit(self, since: float) -> list[AuditEntry]:
        trail = DynamoAudit(self.store.client, self.store.table)
        # Keyed by the minute: every tab asking for "the last 7 days" shares one read.
        key = ("audit", int(since // 60))
        return self.cache.get(key, self._read(functools.partial(trail.entries, since)))

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
        claims = self.cache.get(
            ("claims", tuple(s.message_id for s in starts)),
            self._read(functools.partial(self._claims, starts)),
        )
        now = self.clock()
        shown = []
        for start in sorted(starts, key=lambda s: s.started_at):
            claim = claims.get(start.message_id)
            until = claim.get("LeaseUntil", {}).get("N") if claim else None
            shown.append(
                RunningNow(
                    start, not claim_is_live(claim, now), None if until is None else float(until)
                )
            )
        return shown

    def _claims(self, starts: Sequence[RunStart]) -> dict[str, dict[str, Any]]:
        """The dedupe claims of these runs by message id, read BATCH_GET_LIMIT a call."""
        keys = list({s.message_id: None for s in starts})
        found: dict[str, dict[str, Any]] = {}
        table = self.store.table
        for i in range(0, len(keys), BATCH_GET_LIMIT):
            batch = [
                {"Id": {"S": k}, "Type": {"S": THROTTLE_TYPE}}
                for k in keys[i : i + BATCH_GET_LIMIT]
            ]
            pending: dict[str, Any] = {table: {"Keys": batch, "ConsistentRead": True}}
            while pending:
                response = self.store.client.batch_get_item(RequestItems=pending)
                for item in response["Responses"].get(table, []):
                    found[item["Id"]["S"]] = item
                pending = response.get("UnprocessedKeys") or {}
        return found

    # -- the scheduler and the queues -----------------------------------------------------------

    def schedules(self) -> Schedules:
        return self.cache.get("schedules", self._read_schedules, SCHEDULES_FRESH)

    def _read_schedules(self) -> Schedules:
        try:
            found = read_schedules(self.config, self.store.session)
        except Exception as exc:
            return Schedules(problem=failure_text(exc))
        now = datetime.fromtimestamp(self.clock(), timezone.utc)
        return Schedules(tuple(found), next_runs(found, now))

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
    attributes = queues.sqs.get_queue_attributes(
        QueueUrl=queues.dlq_url, AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]
    count = int(attributes.get("ApproximateNumberOfMessages", 0))
    return DeadLetters(queues.name, queues.dlq_name, count=count)


def _letters(queues: Queues) -> DeadLetters:
    with Peek(queues.sqs, queues.dlq_url) as peek:
        letters = [letter for page in peek.pages() for letter in page]
    letters.sort(key=lambda letter: letter.sent_at)
    return DeadLetters(queues.name, queues.dlq_name, tuple(letters), len(letters))


def failure_text(exc: Exception) -> str:
    """Why a read failed, for a page: an AWS failure or one of sqsjkr's own errors."""
    if isinstance(exc, SqsjkrError):
        return str(exc)
    message = aws_failure(exc)
    if message is None:
        raise exc
    return message
