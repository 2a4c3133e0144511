"""Following a run: its live output as its daemon writes it, which part of a tail is new, how often a
follower polls, and the run's record at its end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqsjkr.backends.live import DynamoLive, LiveStore
from sqsjkr.backends.live import LiveOutput as LiveOutput
from sqsjkr.contract.config import Config
from sqsjkr.contract.run import EventSummary, RunRecord, RunStart
from sqsjkr.errors import RunRecordLost, quote
from sqsjkr.fleet.history import Store, find_record

#: The longest wait between two polls; a shorter [history] live_output_interval polls at that.
MAX_POLL_SECONDS = 2.0


def live_output(client: Any, table: str, event_id: str, message_id: str) -> LiveOutput | None:
    """The live output of a run in progress as its daemon last wrote it: one GetItem (None:
    none written, or the run has ended)."""
    return DynamoLive(client, table).read(event_id, message_id)


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


def ended_last(summary: EventSummary | None, target: str) -> bool:
    """Whether the summary's last run is target's: its record is among the newest."""
    last = summary.last_run if summary is not None else None
    return last is not None and last.message_id == target


def poll_seconds(config: Config) -> float:
    """The wait between two polls of a run's live output: [history] live_output_interval, at most
    MAX_POLL_SECONDS."""
    return min(config.history.live_output_interval.seconds, MAX_POLL_SECONDS)


@dataclass(frozen=True)
class Poll:
    """What one poll of a followed run found: the run (None: none running yet), its start and
    how many other runs of its event run beside it while it runs, its live output if its daemon
    wrote any, and its record once it has ended."""

    target: str | None
    start: RunStart | None = None
    others: int = 0
    output: LiveOutput | None = None
    record: RunRecord | None = None


class Follower:
    """Follows message_id's run of event_id (None: the run running now, or the next to start)
    through the event's summary, the run's live item, and at its end the run's record; live:
    where the live items are (default: the store's table); every: the wait between two polls."""

    def __init__(
        self, store: Store, event_id: str, message_id: str | None, live: LiveStore | None = None
    ) -> None:
        self.store, self.event_id = store, event_id
        self.live = live or DynamoLive(store.client, store.table)
        self.every = poll_seconds(store.config)
        self.target = message_id
        self.seen_running = False  # the run was seen running: its end must leave a record
        self._searched = False  # its record was looked for once (it may have ended already)
        #: The last run to end when the follower began waiting for the next: a run that starts
        #: and ends between two polls (a job of milliseconds) is the next all the same.
        self._ended_before: tuple[str | None] | None = None

    def poll(self) -> Poll:
        """One look; RunRecordLost when a run seen running ended without a record."""
        summary = self.store.history.summary(self.event_id)
        running = {start.message_id: start for start in (summary.running if summary else ())}
        if self.target is None and running:
            self.target = max(running.values(), key=lambda start: start.started_at).message_id
        if self.target is None:
            last = summary.last_run.message_id if summary and summary.last_run else None
            if self._ended_before is None:
                self._ended_before = (last,)
            elif last is not None and (last,) != self._ended_before:
                self.target = last
        if self.target is None:
            return Poll(None)
        if self.target in running:
            self.seen_running = True
            output = self.live.read(self.event_id, self.target)
            return Poll(self.target, running[self.target], len(running) - 1, output)
        if not self._searched or self.seen_running or ended_last(summary, self.target):
            self._searched = True
            with self.store.reading():
                record = find_record(self.store.history, self.event_id, self.target)
            if record is not None:
                return Poll(self.target, record=record)
            if self.seen_running:  # its end and its record are one write: this is a loss
                raise RunRecordLost(
                    f"run {quote(self.target)} of event {quote(self.event_id)} is no longer "
                    f"running, but its record is not in table {self.store.table!r} (see its "
                    "daemon's log)"
                )
        return Poll(self.target)
