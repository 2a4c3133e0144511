"""`sqsjkr status`: one line per event from the run history, `--check`, a monitoring check plugin,
and `--forget`, which drops an event from both.

The judging (failures in a row, the usual interval learned from past runs, ages) is the fleet layer's
(sqsjkr/fleet/status.py); this module reads through it and prints.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

import click

from sqsjkr.commands.options import UsageFailure, note
from sqsjkr.commands.store import Where, auditor, store_options
from sqsjkr.commands.tables import aligned, echo_lines
from sqsjkr.contract.duration import parse_duration
from sqsjkr.contract.run import EventSummary
from sqsjkr.errors import ConfigError, DurationError, quote
from sqsjkr.fleet.history import Store, forget_events
from sqsjkr.fleet.pause import Pause, pause_text, paused
from sqsjkr.fleet.route import Route, route_text, routed
from sqsjkr.fleet.running import Running
from sqsjkr.fleet.schedules import Upcoming
from sqsjkr.fleet.status import CheckPolicy, check_verdict, read_status, scheduled_too
from sqsjkr.fleet.status_data import known_next_runs, status_data
from sqsjkr.fleet.wording import (
    failures_text,
    fire_text,
    format_span,
    local_time,
    triggered_text,
    waiting_text,
)

# -- the check's options ------------------------------------------------------------------------


def parse_max_ages(values: Sequence[str]) -> dict[str, float]:
    """--max-age EVENT=DURATION options, in seconds by event_id; days are allowed ("2d")."""
    ages: dict[str, float] = {}
    for value in values:
        event_id, sep, text = value.rpartition("=")
        if not sep or not event_id:
            raise UsageFailure(f"--max-age {quote(value)}: expected EVENT=DURATION (nightly=2d)")
        try:
            seconds = parse_duration(text, days=True).seconds
        except DurationError as exc:
            raise UsageFailure(f"--max-age {quote(value)}: {exc}") from exc
        if seconds <= 0:
            raise UsageFailure(f"--max-age {quote(value)}: the duration must be positive")
        if event_id in ages:
            raise UsageFailure(f"--max-age names event {quote(event_id)} twice")
        ages[event_id] = seconds
    return ages


# -- showing ------------------------------------------------------------------------------------


#: The columns of `status`; the last holds its runs in progress and its marks.
STATUS_HEADER = ["EVENT", "LAST RUN", "LAST SUCCESS", "FAILURES", "NEXT RUN", "NOW"]


def status_row(
    summary: EventSummary, running: Sequence[Running], now: float, next_run: str = ""
) -> list[str]:
    last = summary.last_run
    success = summary.last_success_at
    row = [
        summary.event_id,
        f"{last.outcome.value} {local_time(last.ended_at)} on {last.host}"
        + ("" if last.triggered_by is None else f" ({triggered_text(last)})")
        if last
        else "no run ended yet",
        "never succeeded" if success is None else f"last success {format_span(now - success)} ago",
        failures_text(summary.consecutive_failures),
    ]
    if next_run:
        row.append(next_run)
    for run in running:
        stale = " (stale)" if run.stale else ""
        since = f"on {run.start.host} since {local_time(run.start.started_at)}"
        if run.start.waiting_for:
            row.append(f"waiting {since} for {waiting_text(run.start)}{stale}")
        else:
            row.append(f"running {since}{stale}")
    return row


def next_run_cell(event_id: str, schedules: Upcoming | None) -> str:
    """The next-run column: the soonest fire time of the event's schedules, in their zone."""
    if schedules is None:
        return "next run ?"
    if event_id in schedules.disabled:
        return "no next run: schedule DISABLED"
    fire = schedules.soonest.get(event_id)
    return "no next run" if fire is None else f"next run {fire_text(fire)}"


def show_status(store: Store, *, as_json: bool, now: float) -> None:
    fleet = read_status(store, now)
    pauses, routes, summaries, running = fleet.pauses, fleet.routes, fleet.summaries, fleet.running
    known = known_next_runs(store, now)
    if isinstance(known, str):
        click.echo(f"sqsjkr: next runs unknown: {known}", err=True)
    soonest = None if isinstance(known, str) else known
    if soonest is not None:
        fleet = scheduled_too(fleet, [*soonest.soonest, *soonest.disabled])
        summaries, running = fleet.summaries, fleet.running
    if as_json:
        click.echo(json.dumps(status_data(fleet, soonest, now), indent=2))
        return
    for held in pauses:
        click.echo(f"PAUSED {pause_text(held, now)}")
    for moved in routes:
        click.echo(f"ROUTED {route_text(moved)}")
    if not summaries:
        note(f"no runs recorded in table {store.table!r}")
        return
    rows_text = [STATUS_HEADER] + [
        status_row(s, r, now, next_run_cell(s.event_id, soonest))
        + routed_mark(routed(routes, s.event_id))
        + paused_mark(paused(pauses, s.event_id, now))
        + one_off_mark(s)
        for s, r in zip(summaries, running, strict=True)
    ]
    echo_lines(aligned(rows_text))


def routed_mark(route: Route | None) -> list[str]:
    """The cell of an event routed to another queue (`sqsjkr route`)."""
    return [] if route is None else [f"routed to queue {route.queue}"]


def paused_mark(pause: Pause | None) -> list[str]:
    """The last cell of a paused event's line."""
    if pause is None:
        return []
    return ["PAUSED" if pause.event_id is not None else "PAUSED (all events)"]


def one_off_mark(summary: EventSummary) -> list[str]:
    """The last cell of a one-off job's line: why --check leaves it out."""
    return ["one-off (no event_id)"] if summary.one_off else []


def forget(store: Store, event_ids: Sequence[str], reason: str = "") -> int:
    """--forget: delete each event's summary; 1 if one of them had none."""
    failed = 0
    for event_id, old in forget_events(store, auditor(store), event_ids, reason):
        if old is None:
            click.echo(f"sqsjkr: no event {quote(event_id)} in table {store.table!r}", err=True)
            failed = 1
            continue
        click.echo(f"forgot event {quote(event_id)}; its run records expire as before")
        if old.running:
            click.echo(
                f"  it had {len(old.running)} run(s) in progress: each lists it again when it ends"
            )
    return failed


def opened(where: Where) -> Store:
    """where's store, for --check: a usage error of the config is one of sqsjkr's errors, which
    the check reports UNKNOWN."""
    try:
        return where.store()
    except UsageFailure as exc:
        raise ConfigError(exc.format_message()) from exc


@click.command()
@store_options
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print a JSON object: "pauses", the pauses in effect, "routes", and "events", an object '
    "per event.",
)
@click.option(
    "--check",
    is_flag=True,
    help="Monitoring check: one line, exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN.",
)
@click.option(
    "--max-failures",
    type=click.IntRange(min=1),
    help="With --check: this many final failures in a row are critical (default 1).",
)
@click.option(
    "--max-age",
    "max_ages",
    multiple=True,
    metavar="EVENT=DURATION",
    help="With --check: EVENT is critical without a success for this long (e.g. nightly=2d); "
    "repeat. Other events: twice their usual interval, learned from their history.",
)
@click.option(
    "--include-one-off",
    is_flag=True,
    help="With --check: judge jobs sent without an event_id too (left out by default).",
)
@click.option(
    "--min-daemons",
    type=click.IntRange(min=1),
    help="With --check: fewer daemons running than this is critical (see `sqsjkr daemons`).",
)
@click.option(
    "--schedules",
    "with_schedules",
    is_flag=True,
    help="With --check: read the scheduler's schedules too (one GetSchedule each): an event "
    "whose schedules are all disabled is not late, and one no firing has reached yet is judged "
    "by its schedule.",
)
@click.option(
    "--forget",
    "forgotten",
    multiple=True,
    metavar="EVENT_ID",
    help="Delete the event's summary, so that it leaves status and --check until it runs again "
    "(its run records expire as before); repeat.",
)
@click.option("--reason", default="", help="With --forget: why, for the audit trail.")
def status(
    where: Where,
    as_json: bool,
    check: bool,
    max_failures: int | None,
    max_ages: tuple[str, ...],
    include_one_off: bool,
    min_daemons: int | None,
    with_schedules: bool,
    forgotten: tuple[str, ...],
    reason: str,
) -> int:
    """Show each event's last run, last success, failures in a row and runs in progress.

    Read-only but for --forget, which deletes the summary of an event that is no more.

    The pauses in effect and the routes come first, a line each; a routed event's line says to
    which queue, a paused event's line ends in PAUSED, and a job sent without an event_id ends
    in "one-off".
    """
    if not check and (max_failures is not None or max_ages or include_one_off):
        raise UsageFailure(
            "--max-failures, --max-age and --include-one-off only apply with --check"
        )
    if not check and min_daemons is not None:
        raise UsageFailure("--min-daemons only applies with --check")
    if not check and with_schedules:
        raise UsageFailure("--schedules only applies with --check")
    if reason and not forgotten:
        raise UsageFailure("--reason only applies with --forget")
    if forgotten and (check or as_json):
        raise UsageFailure("--forget changes the history: give it without --check and --json")
    if check and as_json:
        raise UsageFailure("--check prints one line; give --check or --json, not both")
    policy = CheckPolicy(
        max_failures or 1,
        parse_max_ages(max_ages),
        include_one_off,
        min_daemons,
        read_schedules=with_schedules,
    )
    if forgotten:
        return forget(where.store(), forgotten, reason)
    if check:
        # A check that cannot judge is UNKNOWN (3), never CRITICAL (2): a bad config, history
        # off and AWS errors alike. Only the options themselves are usage errors.
        level, line = check_verdict(lambda: opened(where), policy, time.time())
        click.echo(line)
        return int(level)
    show_status(where.store(), as_json=as_json, now=time.time())
    return 0
