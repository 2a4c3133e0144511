"""Claims taken ahead: the received jobs that will wait for a worker are claimed in one write.

A host of few workers receives more jobs than it runs at once (prefetch): one call claims them, the
heartbeat renews them as they wait, and each run is noted in progress once it has gone on a while.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from sqsjkr.backends.dedupe import Claim
from sqsjkr.backends.routes import job_id
from sqsjkr.backends.sqs import Message
from sqsjkr.contract.job import Job

#: How long a run whose claim was taken ahead runs before its event's summary shows it running:
#: a shorter run's end says all that its note would have, without a write of its own.
NOTE_AFTER_SECONDS = 0.1


class Ahead:
    """One job's claim taken ahead: written by the receive loop, waited for by the job's worker."""

    def __init__(self) -> None:
        self._written = threading.Event()
        self._claim: Claim | None = None

    def settle(self, claim: Claim | None) -> None:
        """The claim taken, or None: the worker claims the job itself when its turn comes."""
        self._claim = claim
        self._written.set()

    def wait(self) -> Claim | None:
        self._written.wait()
        return self._claim


class LateNote:
    """A run's start, noted only if the run still goes on NOTE_AFTER_SECONDS after it began: run
    on a thread of its own, while the run is within it (a with block), whose end it never
    lands after."""

    def __init__(self, write: Callable[[], None]) -> None:
        self._write = write
        self._ended = threading.Event()
        #: Held while the note is written: the run's end waits for a write under way.
        self._mutex = threading.Lock()

    def run(self, delay: float = NOTE_AFTER_SECONDS) -> None:
        if self._ended.wait(delay):
            return
        with self._mutex:
            if not self._ended.is_set():
                self._write()

    def __enter__(self) -> LateNote:
        return self

    def __exit__(self, *exc_info: object) -> None:
        """The run has ended: no note is written from now on, and one under way has landed."""
        self._ended.set()
        with self._mutex:
            pass


def plain(message: Message, job: Job) -> bool:
    """Whether message's job may be claimed ahead: claimed by the message's own id, with nothing
    to hold before it runs. A firing, a pipeline's step, a FIFO group's message, a job with a
    lock or a concurrency group, or a routed copy is claimed only as its turn comes."""
    return (
        message.group_id is None
        and job.firing is None
        and job.pipeline is None
        and not job.lock_id
        and not job.concurrency_key
        and job_id(message) == job.message_id
    )
