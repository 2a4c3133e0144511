"""Pausing and resuming events fleet-wide, in the lock table, each audited first; a pause in words,
and when the daemons honour a change of the controls item (docs/semantics.md, "Pauses").
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqsjkr.backends.aws import describe
from sqsjkr.backends.controls import ControlItem
from sqsjkr.backends.pause import ALL_SCOPE, PauseStore, decode_pauses, in_effect
from sqsjkr.backends.pause import DynamoPauses as DynamoPauses
from sqsjkr.backends.pause import Pause as Pause
from sqsjkr.backends.pause import paused as paused
from sqsjkr.contract.config import Config
from sqsjkr.contract.duration import parse_duration
from sqsjkr.errors import AuditRefused, DurationError, RequestError, quote
from sqsjkr.fleet.audit import AuditEntry, Auditor
from sqsjkr.fleet.locks import Table, table_of
from sqsjkr.fleet.wording import format_duration, format_span, local_time
from sqsjkr.observability.logs import escape

_log = logging.getLogger(__name__)

# A date and a time (seconds optional), "T" or a blank between them, and an optional UTC offset.
_TIME = re.compile(r"(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}(?::\d{2})?)(Z|[+-]\d{2}:\d{2})?", re.I)
_TIME_HINT = (
    "give a time (2030-01-31T09:30:00+09:00, or 2030-01-31 09:30 in this host's time zone) "
    "or a duration from now (2h, 90m, 1d)"
)


def parse_until(text: str, now: float) -> float:
    """--until TEXT as unix seconds: RFC 3339, a local date and time in the host's zone, or a
    duration from now ("2h", "1d"). A past time, or one the local clock skips or repeats, is
    refused with a RequestError."""
    match = _TIME.fullmatch(text.strip())
    if match is not None:
        until = _instant(text, *match.groups())
    else:
        try:
            seconds = parse_duration(text.strip(), days=True).seconds
        except DurationError as exc:
            raise RequestError(f"--until {quote(text)}: {_TIME_HINT} ({exc})") from exc
        if seconds <= 0:
            raise RequestError(f"--until {quote(text)}: a duration must be longer than 0")
        until = now + seconds
    if until <= now:
        raise RequestError(
            f"--until {quote(text)} is in the past ({local_time(until)}; it is "
            f"{local_time(now)} now)"
        )
    return until


def _instant(text: str, day: str, clock: str, offset: str | None) -> float:
    if offset:
        zone = "+00:00" if offset.upper() == "Z" else offset
        try:
            return datetime.fromisoformat(f"{day}T{clock}{zone}").timestamp()
        except ValueError as exc:
            raise RequestError(f"--until {quote(text)}: {exc}") from exc
    try:
        naive = datetime.fromisoformat(f"{day}T{clock}")
    except ValueError as exc:
        raise RequestError(f"--until {quote(text)}: {exc}") from exc
    # Read in the host's zone: both folds of a local time that the clock repeats, neither of
    # one that it skips (that one does not read back as itself).
    candidates = {naive.replace(fold=fold).timestamp() for fold in (0, 1)}
    real = sorted(t for t in candidates if datetime.fromtimestamp(t) == naive)
    if not real:
        raise RequestError(
            f"--until {quote(text)} does not exist in this host's time zone (the clock skips "
            "it): give a time outside the skipped hour, or a UTC offset"
        )
    if len(real) > 1:
        raise RequestError(
            f"--until {quote(text)} happens twice in this host's time zone (daylight saving "
            "time ends): give it with a UTC offset (2030-10-27T02:30:00+02:00)"
        )
    return real[0]


def pause_text(pause: Pause, now: float) -> str:
    """A pause on one line: what, since when, until when, by whom, and why."""
    return f"{scope_text(pause)} {details_text(pause, now)}"


def scope_text(pause: Pause) -> str:
    return "all events" if pause.event_id is None else f"event {quote(pause.event_id)}"


def details_text(pause: Pause, now: float) -> str:
    """Since when, until when, by whom and why."""
    if pause.until is None:
        until = "until resumed"
    else:
        left = format_span(math.ceil(pause.until - now))
        until = f"until {local_time(pause.until)} ({left} left)"
    reason = f": {escape(pause.reason)}" if pause.reason else ""
    return f"since {local_time(pause.since)} {until}, by {escape(pause.by)}{reason}"


def pause_events(
    store: PauseStore,
    audit: Auditor,
    by: str,
    events: Sequence[str] | None,
    now: float,
    ends: float | None,
    reason: str,
) -> list[Pause]:
    """Pause events (None: all), each audited first, then all of them in one write; the pauses
    made. All or nothing: when an audit item or the write is refused, no pause is made and the
    items written are marked refused (the error is raised again), so that the trail never shows
    a pause that was not made."""
    scopes: Sequence[str | None] = [None] if events is None else events
    made = [Pause(event_id, now, ends, reason, by) for event_id in scopes]
    until_text = "until resumed" if ends is None else f"until {local_time(ends)}"
    written: list[AuditEntry] = []
    try:
        for pause in made:
            written.append(
                audit("pause", pause.event_id or "all events", reason=reason, detail=until_text)
            )
        store.pause(*made)
    except Exception as exc:
        why = f"not paused: {_failure(exc)}"
        for entry in written:
            problem = audit.refused(entry, why)
            if problem is not None:
                _log.warning("%s", problem)  # nothing was paused: the trail says more than was done
        raise
    return made


def _failure(exc: Exception) -> str:
    if isinstance(exc, AuditRefused):
        return "an audit item of the same pause could not be written"
    return escape(describe(exc))


def pauses_of(config: Config) -> DynamoPauses:
    """The pauses kept in the config's lock table."""
    return pauses_store(table_of(config))


def pauses_store(table: Table) -> DynamoPauses:
    """The pauses kept in table."""
    return DynamoPauses(table.client, table.name)


def read_controls(client: Any, table: str) -> dict[str, Any]:
    """The controls item that holds the pauses and the routes, read consistently: one GetItem
    serves pauses_in_effect and fleet.route.routes_in."""
    return ControlItem(client, table).read_attributes()


def pauses_in_effect(controls: dict[str, Any], now: float) -> list[Pause]:
    """The pauses of the controls item as read (read_controls) that are in effect at now."""
    return in_effect(decode_pauses(controls), now)


def event_scopes(event_ids: Sequence[str], all_events: bool) -> list[str] | None:
    """The events a pause or resume names (None: all of them); exactly one of the two is allowed."""
    if all_events and event_ids:
        raise RequestError("give EVENT_IDs or --all, not both")
    if not all_events and not event_ids:
        raise RequestError("give the EVENT_IDs to act on, or --all for every event")
    if all_events:
        return None
    for event_id in event_ids:
        if event_id in ("", ALL_SCOPE):
            raise RequestError(f"{quote(event_id)} is not an event id (--all acts on every event)")
    return sorted(set(event_ids))


@dataclass(frozen=True)
class Unpaused:
    """What a resume of named events left: the events that had no pause, and the pause of all
    events, still in effect, that holds them all the same."""

    missed: list[str]
    of_all: Pause | None


def unpaused(store: PauseStore, events: Sequence[str], lifted: Sequence[Pause]) -> Unpaused:
    done = {p.event_id for p in lifted}
    missed = [event_id for event_id in events if event_id not in done]
    return Unpaused(missed, next((p for p in store.pauses() if p.event_id is None), None))


def resume_events(
    store: PauseStore, audit: Auditor, events: Sequence[str] | None, reason: str
) -> list[Pause]:
    """Lift the pauses of events (None: every pause), audited first; the pauses lifted. Its
    audit item is marked refused when nothing was paused, and names the events that were not."""
    entry = audit("resume", "every pause" if events is None else ", ".join(events), reason=reason)
    lifted = store.resume(events)
    done = {p.event_id for p in lifted}
    missed = [] if events is None else [e for e in events if e not in done]
    problem = None
    if not lifted:
        problem = audit.refused(entry, "nothing was paused")
    elif missed:
        problem = audit.amend(entry, f"no pause of {', '.join(missed)}")
    if problem is not None:
        _log.warning("%s", problem)  # the resume is done: the trail only says less of it
    return lifted


def honour_text(config: Config) -> str:
    """When the fleet's daemons see a change of the controls item (a pause, a route)."""
    refresh = format_duration(config.kicker.pause_refresh.seconds)
    return (
        f"daemons honour it within {refresh} ([kicker] pause_refresh) of their next messages; "
        "jobs already running go on"
    )
