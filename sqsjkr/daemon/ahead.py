"""Plain jobs' claims: a receive's plain jobs claimed in one write as they are handed over, and
their runs noted in progress only once they have gone on a while.

One call claims a receive's jobs (those that wait for a worker, prefetched, as those that start
at once) before their workers take them up, and the heartbeat renews the claims of those that
wait. A plain job's claim writes its item alone, and a short run's end says all that its note
would have.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

from sqsjkr.backends.routes import job_id
from sqsjkr.backends.sqs import Message
from sqsjkr.contract.job import Job

#: How long a plain job's run goes on before its event's summary shows it running:
#: a shorter run's end says all that its note would have, without a write of its own.
NOTE_AFTER_SECONDS = 0.1


class LateNote:
    """A run's start, to be noted only if the run still goes on once due: the run is within it
    (a with block), and the note never lands after the run's end."""

    def __init__(self, write: Callable[[], None], due: float) -> None:
        self.due = due
        self._write = write
        #: Held while the note is written: the run's end waits for a write under way.
        self._mutex = threading.Lock()
        self._ended = False

    @property
    def ended(self) -> bool:
        """Whether the note is no longer to be written (read without the mutex: a hint)."""
        return self._ended

    def write(self) -> None:
        """Write the note, unless the run has ended (or it was written): at most once."""
        with self._mutex:
            if not self._ended:
                self._ended = True
                self._write()

    def __enter__(self) -> LateNote:
        return self

    def __exit__(self, *exc_info: object) -> None:
        """The run has ended: no note is written from now on, and one under way has landed."""
        with self._mutex:
            self._ended = True


class LateNotes:
    """The late notes of one queue's runs, kept by one thread that wakes only when the first
    note not yet ended is due, and hands its write to hand (a pool's submit). A run shorter
    than the delay costs no wake-up of any thread: its note is dropped when the thread next
    looks. Entered (a with block) to start the thread; leaving it waits for the notes left."""

    def __init__(
        self,
        hand: Callable[[Callable[[], None]], object],
        *,
        delay: float = NOTE_AFTER_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._hand = hand
        self._delay = delay
        self._clock = clock
        self._changed = threading.Condition()
        # One delay for all: the order notes are taken in is the order they fall due.
        self._notes: deque[LateNote] = deque()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="sqsjkr-late-notes")

    def note(self, write: Callable[[], None]) -> LateNote:
        """A note that write() makes once the delay has passed, unless the run (within the note
        returned) has ended by then. RuntimeError once the notes are being left."""
        late = LateNote(write, self._clock() + self._delay)
        with self._changed:
            if self._stopping:
                raise RuntimeError("late notes are no longer taken")
            self._notes.append(late)
            if len(self._notes) == 1:
                self._changed.notify()
        return late

    def __enter__(self) -> LateNotes:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        with self._changed:
            self._stopping = True
            self._changed.notify()
        self._thread.join()

    def _run(self) -> None:
        while (due := self._next_due()) is not None:
            try:
                self._hand(due.write)
            except RuntimeError:  # the pool is shut down
                due.write()

    def _next_due(self) -> LateNote | None:
        """Wait for the next note that is due and not ended; None once stopping with none left."""
        notes = self._notes
        with self._changed:
            while True:
                while notes and notes[0].ended:
                    notes.popleft()
                if not notes:
                    if self._stopping:
                        return None
                    self._changed.wait()
                    continue
                left = notes[0].due - self._clock()
                if left <= 0:
                    return notes.popleft()
                self._changed.wait(left)


def plain(message: Message, job: Job) -> bool:
    """Whether message's job is plain: claimed by the message's own id, with nothing to hold
    before it runs; it may be claimed ahead, and its run is noted late. A firing, a pipeline's
    step, a FIFO group's message, a job with a lock or a concurrency group, or a routed copy is
    claimed only as its turn comes, its run noted by its claim's write."""
    return (
        message.group_id is None
        and job.firing is None
        and job.pipeline is None
        and not job.lock_id
        and not job.concurrency_key
        and job_id(message) == job.message_id
    )
