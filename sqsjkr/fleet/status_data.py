"""What `status --json` shows of the fleet, as data: the pauses, the routes and an object per event
(its last runs, runs in progress, next run by its schedules and route), and the next runs known.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from sqsjkr.backends.routes import Route, routed
from sqsjkr.contract.run import EventSummary
from sqsjkr.fleet.failures import failure_text
from sqsjkr.fleet.history import Store, record_json
from sqsjkr.fleet.running import Running
from sqsjkr.fleet.schedules import Upcoming, read_upcoming
from sqsjkr.fleet.status import FleetStatus
from sqsjkr.fleet.wording import fire_text


def status_data(fleet: FleetStatus, soonest: Upcoming | None, now: float) -> dict[str, Any]:
    """`status --json`'s object; soonest: the next runs, None when they could not be read."""
    rows = [
        {
            **status_json(s, r, now),
            "next_run": next_run_json(s.event_id, soonest),
            "schedule_disabled": disabled_json(s.event_id, soonest),
            "routed_to": route_queue(routed(fleet.routes, s.event_id)),
        }
        for s, r in zip(fleet.summaries, fleet.running, strict=True)
    ]
    return {
        "pauses": [p.as_dict() for p in fleet.pauses],
        "routes": [r.as_dict() for r in fleet.routes],
        "events": rows,
    }


def status_json(summary: EventSummary, running: Sequence[Running], now: float) -> dict[str, Any]:
    success = summary.last_success_at
    return {
        "event_id": summary.event_id,
        "last_run": None
        if summary.last_run is None
        else record_json(summary.last_run, output=False),
        "last_success_at": success,
        "last_success_age": None if success is None else now - success,
        "last_failure_at": summary.last_failure_at,
        "consecutive_failures": summary.consecutive_failures,
        "one_off": summary.one_off,
        "running": [{**asdict(run.start), "stale": run.stale} for run in running],
    }


def known_next_runs(store: Store, now: float) -> Upcoming | str:
    """Each event's next run by its schedules, or why they cannot be read."""
    try:
        return read_upcoming(store.config, store.session, now)
    except Exception as exc:
        # failure_text raises again what is neither an AWS failure nor one of sqsjkr's errors.
        return failure_text(exc)


def next_run_json(event_id: str, schedules: Upcoming | None) -> str | None:
    fire = None if schedules is None else schedules.soonest.get(event_id)
    return None if fire is None else fire_text(fire)


def disabled_json(event_id: str, schedules: Upcoming | None) -> bool | None:
    """Whether every schedule of the event is disabled; None when they cannot be read."""
    return None if schedules is None else event_id in schedules.disabled


def route_queue(route: Route | None) -> str | None:
    return None if route is None else route.queue
