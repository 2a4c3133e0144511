"""`sqsjkr history EVENT_ID --follow`: a running run's output as it grows, like `tail -f`, then its record.

It polls the event's summary (which runs are running) and the run's live item, which its daemon writes.
"""

from __future__ import annotations

import codecs
import re
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType

import click

from sqsjkr.commands.options import UsageFailure
from sqsjkr.commands.store import Where
from sqsjkr.commands.tables import echo_lines, history_lines
from sqsjkr.contract.run import RunOutcome, RunRecord, RunStart
from sqsjkr.contract.text import escape
from sqsjkr.errors import RunRecordLost, quote
from sqsjkr.fleet.history import Store
from sqsjkr.fleet.live import Follower, new_part
from sqsjkr.fleet.waiting import Deadline
from sqsjkr.fleet.wording import local_time


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
    where: Where,
    event_id: str | None,
    message_id: str | None,
    timeout: float | None,
) -> int:
    """history --follow: 0 if the run succeeded, 1 if not, 130 at Ctrl-C, WAIT_TIMEOUT_EXIT
    once timeout seconds (None: no limit) have passed."""
    if event_id is None:
        raise UsageFailure("--follow needs an EVENT_ID")
    store = where.store()
    try:
        with store.reading(), ctrl_c_noted() as interrupted:
            return follow(store, event_id, message_id, Deadline(timeout), interrupted)
    except KeyboardInterrupt:
        return 130  # Ctrl-C is how a follower stops: no message


@contextmanager
def ctrl_c_noted() -> Iterator[Callable[[], bool]]:
    """Ctrl-C noted as well as raised, for as long as the block runs: Python prints and drops a
    KeyboardInterrupt that lands while a finalizer runs (a socket's or a response's, between two
    polls), and a follower waiting for a run that never comes would wait on for ever."""
    seen: list[int] = []

    def note(signum: int, frame: FrameType | None) -> None:
        seen.append(signum)
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield lambda: False  # only the main thread takes signals
        return
    previous = signal.signal(signal.SIGINT, note)
    try:
        yield lambda: bool(seen)
    finally:
        signal.signal(signal.SIGINT, previous)


def follow(
    store: Store,
    event_id: str,
    message_id: str | None,
    deadline: Deadline,
    interrupted: Callable[[], bool] = lambda: False,
) -> int:
    """Follow message_id's run of event_id (None: the run running now, or the next to start)
    until it ends; 0 if it succeeded, 1 otherwise. WaitTimedOut once the deadline has passed;
    KeyboardInterrupt once interrupted() says a Ctrl-C came, checked at each poll."""
    printer = Printer(_echo)
    told: set[str] = set()
    follower = Follower(store, event_id, message_id)
    while True:
        if interrupted():
            raise KeyboardInterrupt
        try:
            found = follower.poll()
        except RunRecordLost as exc:
            raise click.ClickException(str(exc)) from exc
        if found.record is not None:
            return _finish(printer, found.record)
        target = found.target
        if target is None:
            _tell(told, "next", f"no run of event {quote(event_id)} is running: waiting for "
                                "the next one to start (Ctrl-C to stop)")  # fmt: skip
        elif found.start is not None:
            _tell(told, "following", _following(found.start, found.others + 1))
            if found.output is not None:
                printer.show(found.output.output, found.output.printed)
        elif not follower.seen_running:
            _tell(told, "target", f"run {quote(target)} of event {quote(event_id)} has not "
                                  "started: waiting for it (Ctrl-C to stop)")  # fmt: skip
        what = f"a run of event {quote(event_id)}" if target is None else f"run {quote(target)}"
        deadline.pause(follower.every, escape(what), "the run goes on")


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


def _finish(printer: Printer, record: RunRecord) -> int:
    """Print what the run printed after the last poll, then its record; its exit code."""
    if record.output_bytes is not None:
        printer.show(record.output, record.output_bytes)
    elif printer.seen == 0:  # an older daemon's record: its whole tail
        printer.show(record.output, len(record.output.encode()))
    printer.end_line()
    echo_lines(history_lines([record], output=False))
    if record.error:
        click.echo(f"    error: {escape(record.error)}")
    return 0 if record.outcome is RunOutcome.SUCCEEDED else 1
