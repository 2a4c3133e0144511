"""The API's reads (scope read): events with their verdicts, an event's runs and one run with its
output, live output, the ledger of firings, schedules, daemons, locks, dead letters, the audit.
"""

from __future__ import annotations

import time
from typing import Any

from sqsjkr.api.access import blueprint, caller, page
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
from sqsjkr.fleet.audit import entry_json
from sqsjkr.fleet.client import Fleet
from sqsjkr.fleet.daemons import daemons_json
from sqsjkr.fleet.history import RUNS_SEARCHED, record_json
from sqsjkr.fleet.schedules import schedule_json
from sqsjkr.fleet.status_data import status_json

api = blueprint("reads", __name__, "What the fleet did and does")


@api.get("/events", responses={200: Events})
def events(query: Page) -> dict[str, Any]:
    """Every event, with its verdict (scope read)

    Each event's summary, as `status --json` shows it, and `status --check`'s verdict on it."""
    return _page(_events(caller("read")), query.cursor, query.limit)


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
    found = caller("read").history(path.event_id, RUNS_SEARCHED, failed=query.failed)
    return _page([record_json(r, output=False) for r in found], query.cursor, query.limit)


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
    rows = caller("read").firings(query.event_id, query.since, missed_only=query.missed)
    return _page([row.as_json() for row in rows], query.cursor, query.limit)


@api.get("/schedules", responses={200: Schedules})
def schedules(query: Page) -> dict[str, Any]:
    """Every schedule, with its next fire times (scope read)"""
    found = caller("read").schedules()
    shown = [schedule_json(s.schedule, s.timing, None) for s in found]
    return _page(shown, query.cursor, query.limit)


@api.get("/daemons", responses={200: Daemons})
def daemons(query: Page) -> dict[str, Any]:
    """The fleet's daemons: running, then lost, then stopped (scope read)"""
    shown = daemons_json(caller("read").daemons(), time.time())["daemons"]
    return _page(shown, query.cursor, query.limit)


@api.get("/locks", responses={200: Locks})
def locks() -> dict[str, Any]:
    """The held locks, the held slots of concurrency groups, the jobs waiting (scope read)"""
    return caller("read").locks().as_json(time.time())


@api.get("/dead-letters", responses={200: DeadLetters})
def dead_letters(query: QueueQuery) -> dict[str, Any]:
    """The dead letters of a queue, oldest first (scope read)"""
    fleet = caller("read")
    letters = fleet.dead_letters(fleet_queue(fleet, query.queue))
    return _page([letter.as_json() for letter in letters], query.cursor, query.limit)


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
    entries = caller("read").audit(time.time() - query.since)
    return _page([entry_json(e) for e in entries], query.cursor, query.limit)


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


def _page(items: list[dict[str, Any]], cursor: str | None, limit: int) -> dict[str, Any]:
    shown, after = page(items, cursor, limit)
    return {"items": shown, "next": after}
