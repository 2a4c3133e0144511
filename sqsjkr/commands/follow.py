"""`sqsjkr history EVENT_ID --follow`: a running run's output as it grows, like `tail -f`, then its record.

It polls the event's summary (which runs are running) and the run's live item, which its daemon writes.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import click

from sqsjkr.backends.live import DynamoLive, LiveStore
from sqsjkr.commands.history import Store, history_lines, local_time, open_store
from sqsjkr.commands.options import UsageFailure
from sqsjkr.contract.run import EventSummary, RunOutcome, RunRecord, RunStart
from sqsjkr.errors import quote
from sqsjkr.fleet.waiting import Deadline
from sqsjkr.observability.logs import escape

#: The longest wait between two polls; a shorter [history] live_output_interval polls at that.
MAX_POLL_SECONDS = 2.0
#: How many of the event's last runs are searched for the run named by --message-id.
RUNS_SEARCHED = 100


def new_part(tail: str, printed: int, seen: int) -> tuple[int, bytes]:
    """Of a tail that ends at byte printed of a run's output, the bytes past seen; and how many
    bytes between seen and the tail's start the reader missed (the tail is only a window)."""
    data = tail.encode()
    new = printed - seen
    if new <= 0:
        return 0, b""
    if new <= len(data):
        return 0, data[len(data) - new :]
    return new - len(data), data


@dataclass
class Printer:
    """Prints a run's output as it grows: only what was not printed yet, each line escaped as
    `history --output` escapes it, so that no job can drive the reader's terminal."""

    echo: Callable[[str], None]
    seen: int = 0  # bytes of the output printed (or skipped) so far
    _open: bool = False  # the last line printed has no end yet
    _decoder: codecs.IncrementalDecoder = field(
        default_factory=lambda: codecs.getincrementaldecoder("utf-8")(errors="replace")
    )

    def show(self, tail: str, printed: int) -> None:
        skipped, data = new_part(tail, printed, self.seen)
        self.seen = max(self.seen, printed)
        if skipped:
            self._decoder.reset()
            self.end_line()
            self.echo(f"[... {skipped} bytes skipped ...]\n")
        text = self._decoder.decode(data)
        if not text:
            return
        lines = re.split(r"\r?\n", text)
        self.echo("\n".join(escape(line) for line in lines))
        self._open = lines[-1] != ""

    def end_line(self) -> None:
        if self._open:
            self.echo("\n")
            self._open = False


def _echo(text: str) -> None:
    click.echo(text, nl=False)


def follow_run(
    conf: str,
    lock_table: str | None,
    profile: str | None,
    region: str | None,
    event_id: str | None,
    message_id: str | None,
    timeout: float | None,
) -> int:
    """history --follow: 0 if the run succeeded, 1 if not, 130 at Ctrl-C, WAIT_TIMEOUT_EXIT
    once timeout seconds (None: no limit) have passed."""
    if event_id is None:
        raise UsageFailure("--follow needs an EVENT_ID")
    store = open_store(conf, lock_table, profile, region)
    live = DynamoLive(store.client, store.table)
    poll = min(store.config.history.live_output_interval.seconds, MAX_POLL_SECONDS)
    try:
        with store.reading():
            return follow(store, live, event_id, message_id, poll=poll, deadline=Deadline(timeout))
    except KeyboardInterrupt:
        return 130  # Ctrl-C is how a follower stops: no message


def follow(
    store: Store,
    live: LiveStore,
    event_id: str,
    message_id: str | None,
    *,
    poll: float,
    deadline: Deadline,
) -> int:
    """Follow message_id's run of event_id (None: the run running now, or the next to start)
    until it ends; 0 if it succeeded, 1 otherwise. WaitTimedOut once the deadline has passed."""
    printer = Printer(_echo)
    told: set[str] = set()
    target = message_id
    searched = False
    while True:
        summary = store.history.summary(event_id)
        running = {start.message_id: start for start in (summary.running if summary else ())}
        if target is None and running:
            target = max(running.values(), key=lambda start: start.started_at).message_id
        if target is None:
            _tell(told, "next", f"no run of event {quote(event_id)} is running: waiting for "
                                "the next one to start (Ctrl-C to stop)")  # fmt: skip
        elif target in running:
            _tell(told, "following", _following(running[target], len(running)))
            found = live.read(event_id, target)
            if found is not None:
                printer.show(found.output, found.printed)
        elif not searched or "following" in told or _ended_last(summary, target):
            searched = True
            record = _record(store, event_id, target)
            if record is not None:
                return _finish(printer, record)
            if "following" in told:  # its end and its record are one write: this is a loss
                raise click.ClickException(
                    f"run {quote(target)} of event {quote(event_id)} is no longer running, but "
                    f"its record is not in table {store.table!r} (see its daemon's log)"
                )
        if target is not None and target not in running and "following" not in told:
            _tell(told, "target", f"run {quote(target)} of event {quote(event_id)} has not "
                                  "started: waiting for it (Ctrl-C to stop)")  # fmt: skip
        what = f"a run of event {quote(event_id)}" if target is None else f"run {quote(target)}"
        deadline.pause(poll, escape(what), "the run goes on")


def _following(start: RunStart, running: int) -> str:
    others = f" ({running - 1} other run(s) of it running too)" if running > 1 else ""
    return (
        f"following run {quote(start.message_id)} of event {quote(start.event_id)} on "
        f"{quote(start.host)}, started at {local_time(start.started_at)}{others}"
    )


def _tell(told: set[str], key: str, line: str) -> None:
    """Tell the reader on stderr what the follower does, once for each state (key)."""
    if key not in told:
        told.add(key)
        click.echo(escape(line), err=True)


def _ended_last(summary: EventSummary | None, target: str) -> bool:
    """Whether the summary's last run is target's: its record is among the newest."""
    last = summary.last_run if summary is not None else None
    return last is not None and last.message_id == target


def _record(store: Store, event_id: str, message_id: str) -> RunRecord | None:
    """The newest record of message_id's runs (a retry runs it again), if among the last ones."""
    with store.reading():
        records = store.history.runs(event_id, RUNS_SEARCHED)
    return next((record for record in records if record.message_id == message_id), None)


def _finish(printer: Printer, record: RunRecord) -> int:
    """Print what the run printed after the last poll, then its record; its exit code."""
    if record.output_bytes is not None:
        printer.show(record.output, record.output_bytes)
    elif printer.seen == 0:  # an older daemon's record: its whole tail
        printer.show(record.output, len(record.output.encode()))
    printer.end_line()
    for line in history_lines([record], output=False):
        click.echo(line)
    if record.error:
        click.echo(f"    error: {escape(record.error)}")
    return 0 if record.outcome is RunOutcome.SUCCEEDED else 1
