"""`sqsjkr history`: an event's last runs (or every event's), newest first, read from the run history.

It also holds what `sqsjkr status` shares with it: the options, the read-only store, time formats.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import click
from botocore.exceptions import ClientError

from sqsjkr.backends.aws import error_code, make_client, make_session
from sqsjkr.backends.history import DynamoHistory
from sqsjkr.commands.options import (
    UsageFailure,
    conf_option,
    load,
    lock_table_option,
    profile_option,
    region_option,
)
from sqsjkr.commands.waiting import timeout_of, timeout_option
from sqsjkr.contract.config import Config, Overrides
from sqsjkr.contract.run import RunRecord
from sqsjkr.errors import ResourceMissingError, quote
from sqsjkr.observability.logs import escape, moment

F = TypeVar("F", bound=Callable[..., Any])

#: Units of the spans shown to operators, largest first; a span shows its two largest.
_SPAN_UNITS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))


def store_options(command: F) -> F:
    """The options `run` also has that say where the history is: config, table, account."""
    for option in (
        region_option,
        profile_option,
        lock_table_option,
        conf_option,
    ):
        command = option(command)
    return command


@dataclass(frozen=True)
class Store:
    """The run history of a config's table, opened for reading, and the client under it."""

    history: DynamoHistory
    client: Any
    table: str
    config: Config
    session: Any  # for the other services a command reads beside the table

    def reading(self) -> AbstractContextManager[None]:
        return reading_table(self.table)


@contextmanager
def reading_table(name: str) -> Iterator[None]:
    """Name the lock table when it is not there (wrong --lock-table, region or account)."""
    try:
        yield
    except ClientError as exc:
        if error_code(exc) != "ResourceNotFoundException":
            raise
        raise ResourceMissingError(
            f"DynamoDB table {name!r} not found (check [lock] table or --lock-table, "
            "and the region)"
        ) from exc


def open_store(conf: str, lock_table: str | None, profile: str | None, region: str | None) -> Store:
    """The history the config's daemons write; a usage error when the config turns it off."""
    config = load(conf, Overrides(lock_table=lock_table, profile=profile, region=region))
    if config.history.backend == "none":
        raise UsageFailure(
            f'history is off in {conf} ([history] backend = "none"): no runs to show'
        )
    return store_of(config)


def store_of(config: Config) -> Store:
    """The config's history, whether or not its daemons write it."""
    session = make_session(region=config.account.region, profile=config.account.profile)
    client = make_client(session, "dynamodb")
    history = DynamoHistory(
        client, config.lock.table, retention_seconds=config.history.retention.seconds
    )
    return Store(history, client, config.lock.table, config, session)


def local_time(unix_seconds: float) -> str:
    """A moment in the reader's local time, ISO 8601 to the second, with its UTC offset."""
    return moment(unix_seconds)


def format_span(seconds: float) -> str:
    """A span in its two largest units, cut to whole seconds: "45s", "1h30m", "2d3h", "0s"."""
    rest = max(0, int(seconds))
    parts: list[str] = []
    for name, size in _SPAN_UNITS:
        count, rest = divmod(rest, size)
        if count or parts:
            parts.append(f"{count}{name}")
        if len(parts) == 2:
            break
    return "".join(part for part in parts if not part.startswith("0")) or "0s"


def format_duration(seconds: float) -> str:
    """A run's duration or wait: tenths of a second under a minute, else as format_span."""
    return f"{seconds:.1f}s" if abs(seconds) < 60 else format_span(seconds)


def aligned(rows: list[list[str]]) -> list[str]:
    """Rows of cells as lines, each column as wide as its widest cell; a cell's control characters
    escaped, so that no id or error that came from a message can forge a row or drive the terminal."""
    rows = [[escape(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in rows if i < len(row)) for i in range(max(map(len, rows)))]
    return ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]


def ended_how(record: RunRecord) -> str:
    """The exit code, the signal that ended the command, or "-" when no command ran."""
    if record.exit_code is not None:
        return str(record.exit_code)
    if record.signal is not None:
        try:
            return signal.Signals(record.signal).name
        except ValueError:
            return f"signal {record.signal}"
    return "-"


HISTORY_HEADER = [
    "ENDED",
    "OUTCOME",
    "EXIT",
    "DURATION",
    "QUEUE DELAY",
    "LOCK WAIT",
    "HOST",
    "MESSAGE ID",
    "ATTEMPT",
]


def history_row(record: RunRecord) -> list[str]:
    outcome = record.outcome.value + ("" if record.final else " (not final)")
    if record.triggered_by is not None:
        outcome += " (triggered)"
    return [
        local_time(record.ended_at),
        outcome,
        ended_how(record),
        format_duration(record.duration),
        format_duration(record.queue_delay),
        format_duration(record.lock_wait),
        record.host,
        record.message_id,
        str(record.attempt),
    ]


def recent_runs(history: DynamoHistory, limit: int, *, failed: bool) -> list[RunRecord]:
    """The last runs of every event, newest first: the events from the index of summaries, newest
    last run first, each queried for its own last runs until no event left can have a newer one
    than those found (no scan of the table)."""
    summaries = [summary for summary in history.summaries() if summary.last_run is not None]
    summaries.sort(key=lambda summary: ended_at(summary.last_run), reverse=True)
    found: list[RunRecord] = []
    for summary in summaries:
        if len(found) >= limit and ended_at(summary.last_run) < found[-1].ended_at:
            break  # this event's runs, and those of every event after it, are all older
        found += history.runs(summary.event_id, limit, failed=failed)
        found.sort(key=lambda record: record.ended_at, reverse=True)
        del found[limit:]
    return found


def ended_at(record: RunRecord | None) -> float:
    return 0.0 if record is None else record.ended_at


def history_lines(records: list[RunRecord], *, output: bool, events: bool = False) -> list[str]:
    """The table of runs; with output, each run's error and output tail indented under it;
    with events, each run's event first."""
    rows = [[*(["EVENT"] if events else []), *HISTORY_HEADER]]
    rows += [[*([r.event_id] if events else []), *history_row(r)] for r in records]
    lines = aligned(rows)
    if not output:
        return lines
    shown = lines[:1]
    for line, record in zip(lines[1:], records, strict=True):
        shown.append(line)
        if record.triggered_by is not None:
            shown.append(f"    {escape(triggered_text(record))}")
        if record.error:
            shown.append(f"    error: {escape(record.error)}")
        tail = record.output.splitlines() or ["(no output kept)"]
        shown += [f"    {escape(text)}" for text in tail]
    return shown


def triggered_text(record: RunRecord) -> str:
    """Who triggered the run (`sqsjkr trigger`) and why, on one line."""
    reason = f": {record.trigger_reason}" if record.trigger_reason else ""
    return f"triggered by {record.triggered_by}{reason}"


def record_json(record: RunRecord, *, output: bool) -> dict[str, Any]:
    """A record as `--json` shows it: the store keeps the merged output only, and that on request."""
    data = record.as_dict()
    del data["stdout"], data["stderr"]
    if not output:
        del data["output"]
    return data


@click.command()
@store_options
@click.argument("event_id", required=False)
@click.option(
    "--limit",
    type=click.IntRange(1, 100),
    default=10,
    show_default=True,
    help="How many runs to show.",
)
@click.option("--failed", is_flag=True, help="Only the runs that did not succeed.")
@click.option("--output", is_flag=True, help="Show each run's output tail under it.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array of run records.")
@click.option(
    "--follow",
    "-f",
    is_flag=True,
    help="Print EVENT_ID's running run's output as it grows, then its record; exit 0 only if "
    "it succeeded. With nothing running, wait for the next run.",
)
@click.option("--message-id", metavar="ID", help="With --follow: follow this run (its message id).")
@timeout_option("1h", "the run (--follow)")
def history(
    conf: str,
    lock_table: str | None,
    profile: str | None,
    region: str | None,
    event_id: str | None,
    limit: int,
    failed: bool,
    output: bool,
    as_json: bool,
    follow: bool,
    message_id: str | None,
    timeout: str,
) -> int:
    """Show the last runs of EVENT_ID, newest first; without EVENT_ID, the last runs of every
    event, each with its event (read-only)."""
    if follow or message_id is not None:
        # Imported here: follow.py builds on this module, and only --follow needs it.
        from sqsjkr.commands.follow import follow_run

        waits = timeout_of(timeout)
        return follow_run(conf, lock_table, profile, region, event_id, message_id, waits)
    store = open_store(conf, lock_table, profile, region)
    with store.reading():
        if event_id is None:
            records = recent_runs(store.history, limit, failed=failed)
        else:
            records = store.history.runs(event_id, limit, failed=failed)
    what = "failed runs" if failed else "runs"
    if not records and event_id is not None:
        raise click.ClickException(f"no {what} of event {quote(event_id)} in table {store.table!r}")
    if as_json:
        click.echo(json.dumps([record_json(r, output=output) for r in records], indent=2))
    elif not records:
        click.echo(f"no {what} recorded in table {store.table!r}", err=True)
    else:
        for line in history_lines(records, output=output, events=event_id is None):
            click.echo(line)
    return 0
