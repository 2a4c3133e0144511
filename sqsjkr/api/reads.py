"""The API's reads (scope read): events with their verdicts, an event's runs and one run with its
output, live output, the ledger of firings, schedules, daemons, locks, dead letters, the audit.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from sqsjkr.api.access import blueprint, caller
from sqsjkr.api.cursors import binding, cursor_of, position_of
from sqsjkr.api.models import (
    AuditEntries,
    AuditQuery,
    Daemons,
    DeadLetters,
    Event,
    EventPath,
    Events,
    Firings,
    FiringsQuery,
    JobPath,
    Letter,
    LetterQuery,
    Live,
    Locks,
    Page,
    QueueQuery,
    Run,
    RunPath,
    Runs,
    RunsQuery,
    Schedules,
)
from sqsjkr.api.problems import ApiProblem
from sqsjkr.api.queues import fleet_queue
from sqsjkr.errors import PageError
from sqsjkr.fleet.audit import entry_json
from sqsjkr.fleet.client import Fleet
from sqsjkr.fleet.daemons import daemon_key, daemons_json
from sqsjkr.fleet.dead_letters import DeadLetter
from sqsjkr.fleet.firings import FiringRow
from sqsjkr.fleet.history import record_json
from sqsjkr.fleet.locks import holdings_page
from sqsjkr.fleet.paging import Paged, Position, page_after, position
from sqsjkr.fleet.schedules import Scheduled, schedule_json
from sqsjkr.fleet.status_data import status_json

T = TypeVar("T")
api = blueprint("reads", __name__, "What the fleet did and does")


@api.get("/events", responses={200: Events})
def events(query: Page) -> dict[str, Any]:
    """Every event, with its verdict (scope read)

    Each event's summary, as `status --json` shows it, and `status --check`'s verdict on it."""
    bound, after = _where(query)
    start = _checked(after, (str,))
    page = _paged(lambda: page_after(_events(caller("read")), _event_key, start, query.limit))
    return _shown(bound, page)


@api.get("/events/<event_id>", responses={200: Event})
def event(path: EventPath) -> dict[str, Any]:
    """One event, with its verdict (scope read)"""
    for shown in _events(caller("read")):
        if shown["event_id"] == path.event_id:
            return shown
    raise ApiProblem(404, "not-found", f"no event {path.event_id!r} has run")


@api.get("/events/<event_id>/runs", responses={200: Runs})
def runs(path: EventPath, query: RunsQuery) -> dict[str, Any]:
    """An event's last runs, newest first (scope read)"""
    bound, after = _where(query)
    fleet = caller("read")
    page = _paged(
        lambda: fleet.history_page(
            path.event_id, after=after, limit=query.limit, failed=query.failed
        )
    )
    return _shown(bound, page, lambda r: record_json(r, output=False))


@api.get("/events/<event_id>/runs/<message_id>", responses={200: Run})
def run(path: RunPath) -> dict[str, Any]:
    """One run, with its output (scope read)"""
    record = caller("read").run(path.event_id, path.message_id)
    if record is None:
        raise ApiProblem(404, "not-found", f"no run of message {path.message_id!r} is kept")
    return record_json(record, output=True)


@api.get("/events/<event_id>/runs/<message_id>/live", responses={200: Live})
def live(path: RunPath) -> dict[str, Any]:
    """A running run's output so far (scope read)

    As its daemon last wrote it; 404 once the run has ended (its record holds its output)."""
    found = caller("read").live_output(path.event_id, path.message_id)
    if found is None:
        raise ApiProblem(404, "not-found", f"no live output of message {path.message_id!r}")
    return {**vars(found)}


@api.get("/firings", responses={200: Firings})
def firings(query: FiringsQuery) -> dict[str, Any]:
    """The ledger of firings, newest first (scope read)

    Every firing the schedules imply in the span, and what became of it."""
    bound, after = _where(query)
    start = _checked(after, (float, str, str))
    rows = caller("read").firings(query.event_id, query.since, missed_only=query.missed)
    page = _paged(lambda: page_after(rows, _firing_key, start, query.limit))
    return _shown(bound, page, lambda row: row.as_json())


@api.get("/schedules", responses={200: Schedules})
def schedules(query: Page) -> dict[str, Any]:
    """Every schedule, with its next fire times (scope read)"""
    bound, after = _where(query)
    start = _checked(after, (str,))
    found = caller("read").schedules()
    page = _paged(lambda: page_after(found, _schedule_key, start, query.limit))
    return _shown(bound, page, lambda s: schedule_json(s.schedule, s.timing, None))


@api.get("/daemons", responses={200: Daemons})
def daemons(query: Page) -> dict[str, Any]:
    """The fleet's daemons: running, then lost, then stopped (scope read)"""
    bound, after = _where(query)
    start = _checked(after, (int, str, float, str))
    now = time.time()
    found = caller("read").daemons()
    page = _paged(lambda: page_after(found, lambda m: daemon_key(m, now), start, query.limit))
    return _shown(bound, Paged(daemons_json(page.items, now)["daemons"], page.after))


@api.get("/locks", responses={200: Locks})
def locks(query: Page) -> dict[str, Any]:
    """The held locks, the held slots of concurrency groups, the jobs waiting (scope read)

    Each one an item of its kind (lock, slot, waiting), in that order."""
    bound, after = _where(query)
    holdings = caller("read").locks()
    return _shown(bound, _paged(lambda: holdings_page(holdings, time.time(), after, query.limit)))


@api.get("/dead-letters", responses={200: DeadLetters})
def dead_letters(query: QueueQuery) -> dict[str, Any]:
    """The dead letters of a queue, oldest first (scope read)"""
    bound, after = _where(query)
    start = _checked(after, (float, str))
    fleet = caller("read")
    letters = fleet.dead_letters(fleet_queue(fleet, query.queue))
    page = _paged(lambda: page_after(letters, _letter_key, start, query.limit))
    return _shown(bound, page, lambda letter: letter.as_json())


@api.get("/dead-letters/<message_id>", responses={200: Letter})
def dead_letter(path: JobPath, query: LetterQuery) -> dict[str, Any]:
    """One dead letter, by its id in the dead-letter queue or its original's (scope read)"""
    fleet = caller("read")
    letter = fleet.dead_letter(path.message_id, fleet_queue(fleet, query.queue))
    if letter is None:
        raise ApiProblem(404, "not-found", f"no dead letter {path.message_id!r}")
    return letter.as_json()


@api.get("/audit", responses={200: AuditEntries})
def audit(query: AuditQuery) -> dict[str, Any]:
    """The audit trail, newest first (scope read)"""
    bound, after = _where(query)
    fleet = caller("read")
    since = time.time() - query.since
    page = _paged(lambda: fleet.audit_page(since, after=after, limit=query.limit))
    return _shown(bound, page, entry_json)


def _events(fleet: Fleet) -> list[dict[str, Any]]:
    """Each event's status object with its verdict, in the order of the status."""
    now = time.time()
    status = fleet.status()
    verdicts = {f.event_id: f for f in fleet.check(include_one_off=True)}
    shown = []
    for summary, running in zip(status.summaries, status.running, strict=True):
        finding = verdicts.get(summary.event_id)
        shown.append(
            {
                **status_json(summary, running, now),
                "verdict": "UNKNOWN" if finding is None else finding.level.name,
                "reasons": [] if finding is None else list(finding.reasons),
            }
        )
    return shown


def _where(query: Page) -> tuple[str, Position | None]:
    """This request's list (its route and filters) and where its cursor says the page starts."""
    bound = binding(query)
    return bound, position_of(bound, query.cursor)


def _checked(after: Position | None, shape: tuple[type, ...]) -> Position | None:
    return None if after is None else _paged(lambda: position(after, shape))


def _paged(read: Callable[[], T]) -> T:
    """read(), a position that is none of its list's a 400 naming cursor."""
    try:
        return read()
    except PageError as exc:
        raise ApiProblem(400, "bad-cursor", f"cursor: {exc}") from exc


def _shown(
    bound: str, page: Paged[Any], show: Callable[[Any], dict[str, Any]] | None = None
) -> dict[str, Any]:
    items = page.items if show is None else [show(item) for item in page.items]
    after = None if page.after is None else cursor_of(bound, page.after)
    return {"items": items, "next": after}


def _event_key(shown: dict[str, Any]) -> Position:
    return (str(shown["event_id"]),)


def _firing_key(row: FiringRow) -> Position:
    # Newest first; the firings of one time by event and schedule.
    return (-row.at, row.event_id, row.schedule)


def _schedule_key(scheduled: Scheduled) -> Position:
    return (scheduled.schedule.name,)


def _letter_key(letter: DeadLetter) -> Position:
    # Oldest first, as the queue's reader gives them; of one millisecond, by id.
    return (letter.sent_at, letter.message_id)
