"""Live output of running jobs: each job's output tail, written every live_output_interval if it grew.

LiveTails is where the runners put each running job's Tail; LiveWriter is the one thread that writes them all.
"""

from __future__ import annotations

import contextlib
import logging
import math
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import TracebackType

from sqsjkr.backends.aws import AWS_ERRORS, describe
from sqsjkr.backends.live import LIVE_KEEP_SECONDS, LiveOutput, LiveStore
from sqsjkr.contract.job import Job
from sqsjkr.daemon.output import Tail
from sqsjkr.observability.logs import JobLog

log = logging.getLogger("sqsjkr.live")

#: This host's name, as live items give it (daemon/runs.py's HOST: runs imports the runners).
HOST = socket.gethostname()


@dataclass(eq=False)
class _Running:
    """One running job's output, and what of it was last written."""

    job: Job
    tail: Tail
    due: float  # monotonic: when the writer next looks at it
    written: int = 0  # bytes printed when last written: nothing printed is nothing to write
    written_at: float | None = None  # unix seconds
    closed: bool = False
    #: Held while its item is written, and by the job's end: no write lands after the end.
    mutex: threading.Lock = field(default_factory=threading.Lock)


class LiveTails:
    """The Tails of the jobs running now, which the runners feed and the LiveWriter reads.

    A job is first looked at one interval after it starts, so that a job shorter than that
    costs no write.
    """

    def __init__(self, interval: float, *, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self._monotonic = monotonic
        self._changed = threading.Condition()
        self._running: set[_Running] = set()
        self._woken = False
        #: When the writer's wait ends by itself (monotonic; inf: it waits for a job): a job
        #: due later, as every job started while others run is, need not wake it.
        self._wait_until = math.inf

    @contextlib.contextmanager
    def watching(self, job: Job, limit: int) -> Iterator[Tail]:
        """A Tail of limit bytes for job's merged output, read by the writer until the job ends
        (the with block's end), which waits for a write under way."""
        running = _Running(job, Tail(limit), self._monotonic() + self.interval)
        with self._changed:
            self._running.add(running)
            if running.due < self._wait_until:
                self._changed.notify_all()
        try:
            yield running.tail
        finally:
            with running.mutex:
                running.closed = True
            with self._changed:
                self._running.discard(running)

    def wake(self) -> None:
        """Make a wait_due under way return (the writer is stopping)."""
        with self._changed:
            self._woken = True
            self._changed.notify_all()

    def wait_due(self) -> list[_Running] | None:
        """Wait until some job is due to be looked at; those jobs, or None once woken."""
        with self._changed:
            while not self._woken:
                now = self._monotonic()
                due = [running for running in self._running if running.due <= now]
                if due:
                    for running in due:
                        running.due = now + self.interval
                    return due
                soonest = min((running.due for running in self._running), default=math.inf)
                self._wait_until = soonest
                self._changed.wait(None if soonest == math.inf else soonest - now)
            return None


class LiveWriter:
    """The thread that writes each running job's output tail to store when it has grown since
    its last write, every interval. Whoever starts it stops it (a with block does both).

    A write that fails is logged and tried at the next interval: a job never waits for it
    beyond a write under way when it ends.
    """

    def __init__(
        self, store: LiveStore, tails: LiveTails, *, clock: Callable[[], float] = time.time
    ) -> None:
        self._store = store
        self._tails = tails
        self._clock = clock
        self._thread = threading.Thread(target=self._run, name="sqsjkr-live-output")
        self._failing = False

    def __enter__(self) -> LiveWriter:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._tails.wake()
        self._thread.join()

    def _run(self) -> None:
        while (due := self._tails.wait_due()) is not None:
            for running in due:
                self._write(running)

    def _write(self, running: _Running) -> None:
        with running.mutex:
            if running.closed:
                return
            text, printed = running.tail.snapshot()
            now = self._clock()
            stale = (
                running.written_at is not None and now - running.written_at > LIVE_KEEP_SECONDS / 2
            )
            if printed == running.written and not stale:
                return
            job = running.job
            live = LiveOutput(job.event_id, job.message_id, text, printed, now, HOST)
            try:
                self._store.write(live)
            except AWS_ERRORS as exc:
                self._failed(job, describe(exc))
                return
            except Exception:
                JobLog(log, job).exception("could not write its live output")
                return
            running.written, running.written_at = printed, now
        if self._failing:
            log.info("live output is written again")
        self._failing = False

    def _failed(self, job: Job, why: str) -> None:
        # Once per outage at WARNING: a table out of reach is logged by the jobs' own calls.
        level = logging.DEBUG if self._failing else logging.WARNING
        self._failing = True
        JobLog(log, job).log(
            level,
            "could not write its live output (%s); `history --follow` shows it at the next "
            "write that gets through",
            why,
        )


def watching(
    live: LiveTails | None, job: Job, limit: int
) -> contextlib.AbstractContextManager[Tail]:
    """live's Tail for job, or a Tail of its own when the daemon writes no live output."""
    if live is None:
        return contextlib.nullcontext(Tail(limit))
    return live.watching(job, limit)
