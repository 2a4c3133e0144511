"""`sqsjkr pause` and `sqsjkr resume`: a fleet-wide pause of some events or of all, in the lock table.

Every daemon reads the pause state from the table (docs/semantics.md, "Pauses"); these commands write it.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterator, Sequence
from datetime import datetime

import click

from sqsjkr.backends.pause import ALL_SCOPE, DynamoPauses, Pause, PauseStore
from sqsjkr.commands.audit import Auditor, command_auditor, os_user
from sqsjkr.commands.options import UsageFailure, load, reason_option
from sqsjkr.commands.store import store_options
from sqsjkr.contract.config import Config, Overrides
from sqsjkr.contract.duration import parse_duration
from sqsjkr.errors import DurationError, quote
from sqsjkr.fleet.locks import table_of
from sqsjkr.fleet.wording import format_duration, format_span, local_time
from sqsjkr.observability.logs import escape

# A date and a time (seconds optional), "T" or a blank between them, and an optional UTC offset.
_TIME = re.compile(r"(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}(?::\d{2})?)(Z|[+-]\d{2}:\d{2})?", re.I)
_TIME_HINT = (
    "give a time (2030-01-31T09:30:00+09:00, or 2030-01-31 09:30 in this host's time zone) "
    "or a duration from now (2h, 90m, 1d)"
)


def parse_until(text: str, now: float) -> float:
    """--until TEXT as unix seconds: RFC 3339, a local date and time in the host's zone, or a
    duration from now ("2h", "1d"). A past time, or one the local clock skips or repeats, is
    refused with a UsageFailure."""
    match = _TIME.fullmatch(text.strip())
    if match is not None:
        until = _instant(text, *match.groups())
    else:
        try:
            seconds = parse_duration(text.strip(), days=True).seconds
        except DurationError as exc:
            raise UsageFailure(f"--until {quote(text)}: {_TIME_HINT} ({exc})") from exc
        if seconds <= 0:
            raise UsageFailure(f"--until {quote(text)}: a duration must be longer than 0")
        until = now + seconds
    if until <= now:
        raise UsageFailure(
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
            raise UsageFailure(f"--until {quote(text)}: {exc}") from exc
    try:
        naive = datetime.fromisoformat(f"{day}T{clock}")
    except ValueError as exc:
        raise UsageFailure(f"--until {quote(text)}: {exc}") from exc
    # Read in the host's zone: both folds of a local time that the clock repeats, neither of
    # one that it skips (that one does not read back as itself).
    candidates = {naive.replace(fold=fold).timestamp() for fold in (0, 1)}
    real = sorted(t for t in candidates if datetime.fromtimestamp(t) == naive)
    if not real:
        raise UsageFailure(
            f"--until {quote(text)} does not exist in this host's time zone (the clock skips "
            "it): give a time outside the skipped hour, or a UTC offset"
        )
    if len(real) > 1:
        raise UsageFailure(
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


def scopes(event_ids: Sequence[str], all_events: bool) -> list[str] | None:
    """The events a command names (None: --all); exactly one of the two is allowed."""
    if all_events and event_ids:
        raise UsageFailure("give EVENT_IDs or --all, not both")
    if not all_events and not event_ids:
        raise UsageFailure("give the EVENT_IDs to act on, or --all for every event")
    if all_events:
        return None
    for event_id in event_ids:
        if event_id in ("", ALL_SCOPE):
            raise UsageFailure(f"{quote(event_id)} is not an event id (--all acts on every event)")
    return sorted(set(event_ids))


def pause_events(
    store: PauseStore,
    audit: Auditor,
    by: str,
    events: Sequence[str] | None,
    now: float,
    ends: float | None,
    reason: str,
) -> Iterator[Pause]:
    """Pause events (None: all), each audited first: what `pause` and the dashboard both do.
    Yields each pause once made; AuditRefused before the first one not audited."""
    for event_id in [None] if events is None else events:
        made = Pause(event_id, now, ends, reason, by)
        until_text = "until resumed" if ends is None else f"until {local_time(ends)}"
        audit("pause", event_id or "all events", reason=reason, detail=until_text)
        store.pause(made)
        yield made


def resume_events(
    store: PauseStore, audit: Auditor, events: Sequence[str] | None, reason: str
) -> list[Pause]:
    """Lift the pauses of events (None: every pause), audited first; the pauses lifted."""
    audit("resume", "every pause" if events is None else ", ".join(events), reason=reason)
    return store.resume(events)


@click.command()
@store_options
@click.argument("event_ids", nargs=-1, metavar="[EVENT_ID]...")
@click.option("--all", "all_events", is_flag=True, help="Pause every event.")
@click.option(
    "--until",
    metavar="TIME",
    help="End of the pause: RFC 3339 (2030-01-31T09:30:00+09:00), a local '2030-01-31 09:30' "
    "in this host's time zone, or a duration from now (2h, 90m, 1d). Default: until resumed.",
)
@click.option("--reason", default="", help="Why, for whoever runs `sqsjkr status`.")
def pause(
    conf: str,
    lock_table: str | None,
    profile: str | None,
    region: str | None,
    event_ids: tuple[str, ...],
    all_events: bool,
    until: str | None,
    reason: str,
) -> None:
    """Pause EVENT_IDs (or --all) on every daemon of the fleet: their jobs wait on the queue.

    Each daemon honours it within [kicker] pause_refresh (a minute) of its next messages; jobs
    already running go on. A paused job's message is not run and not deleted: it stays on the
    queue, and runs after `sqsjkr resume` or the --until time (life_time still cancels what went
    stale). A pause of the same events replaces the one before.
    """
    events = scopes(event_ids, all_events)
    now = time.time()
    ends = None if until is None else parse_until(until, now)
    config = load(conf, Overrides(lock_table=lock_table, profile=profile, region=region))
    table = table_of(config)
    store = DynamoPauses(table.client, table.name)
    for made in pause_events(store, command_auditor(config), os_user(), events, now, ends, reason):
        click.echo(f"paused {pause_text(made, now)}")
    honour_note(config)


def honour_note(config: Config) -> None:
    """Say on stderr when the fleet's daemons see a pause or a route of this config's."""
    click.echo(f"sqsjkr: {honour_text(config)}", err=True)


def honour_text(config: Config) -> str:
    """When the fleet's daemons see a change of the controls item (a pause, a route)."""
    refresh = format_duration(config.kicker.pause_refresh.seconds)
    return (
        f"daemons honour it within {refresh} ([kicker] pause_refresh) of their next messages; "
        "jobs already running go on"
    )


@click.command()
@store_options
@click.argument("event_ids", nargs=-1, metavar="[EVENT_ID]...")
@click.option(
    "--all", "all_events", is_flag=True, help="Lift every pause, of all and of each event."
)
@reason_option
def resume(
    conf: str,
    lock_table: str | None,
    profile: str | None,
    region: str | None,
    event_ids: tuple[str, ...],
    all_events: bool,
    reason: str,
) -> None:
    """Lift the pauses of EVENT_IDs (or every pause, --all) and say what was lifted.

    Daemons run what accumulated on the queue within about a minute. Exit 1 if nothing was paused.
    """
    events = scopes(event_ids, all_events)
    config = load(conf, Overrides(lock_table=lock_table, profile=profile, region=region))
    table = table_of(config)
    store = DynamoPauses(table.client, table.name)
    lifted = resume_events(store, command_auditor(config), events, reason)
    now = time.time()
    for lifted_pause in lifted:
        click.echo(f"resumed {scope_text(lifted_pause)}, paused {details_text(lifted_pause, now)}")
    if events is None:
        if not lifted:
            raise click.ClickException("nothing was paused")
        return
    done = {p.event_id for p in lifted}
    missed = [event_id for event_id in events if event_id not in done]
    of_all = next((p for p in store.pauses() if p.event_id is None), None)
    note = ""
    if of_all is not None:
        note = f"all events are still paused ({pause_text(of_all, now)}): `resume --all` lifts that"
    if not lifted:
        raise click.ClickException(
            f"nothing was paused: {_events(missed)} had no pause" + (f"; {note}" if note else "")
        )
    if missed:
        click.echo(f"sqsjkr: {_events(missed)} had no pause", err=True)
    if note:
        click.echo(f"sqsjkr: warning: {note}", err=True)


def _events(event_ids: Sequence[str]) -> str:
    names = ", ".join(quote(event_id) for event_id in event_ids)
    return f"event{'' if len(event_ids) == 1 else 's'} {names}"
