"""The end of a job's run: record it, give back its lock and slot, finish or release its claim.

All in one write when the history store can fold them; each alone, tried until answered, if not.
The daemon loop may write it behind the worker (ClosingRun), which takes its next job at once.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass

from sqsjkr.backends.dedupe import DedupeStore
from sqsjkr.backends.groups import Groups
from sqsjkr.backends.history import NOT_FOLDED, Ended, History
from sqsjkr.backends.lease import Lease
from sqsjkr.backends.locks import Locker
from sqsjkr.contract.firing import Firing
from sqsjkr.contract.run import RunRecord
from sqsjkr.daemon.heartbeat import InFlight
from sqsjkr.daemon.leases import LeaseKeeper
from sqsjkr.daemon.runs import Ending, RunListener, RunProgress
from sqsjkr.observability.logs import JobLog

#: How long a run record that cannot be written is tried again before it is logged instead.
RECORD_RETRY_SECONDS = 30.0
#: How long the write of a run's end closed behind its worker may wait to share the call of a
#: next job's claim (Transactions.write's linger): one worker's end and next claim, one call.
BEHIND_LINGER_SECONDS = 0.1
#: The same for a plain job's run (claimed on receipt, ahead.plain), whose end waits for the
#: next receive's claims: under a backlog a receive loop's turn (receive, claim, gather free
#: workers) takes 0.1-0.2 s with 10 ms to AWS, and with 0.1 s one TransactWriteItems in six
#: carried ends alone. Other ends ride a worker's next claim, which comes sooner: lingering
#: longer saved them no calls, only made the claims their workers wait for bigger.
AHEAD_LINGER_SECONDS = 0.25


#: The longest a claim waits for the end of a run of the same claim written behind: a write that
#: AWS keeps refusing is tried on for longer, and the claim then goes as before (it finds the run
#: in progress and hides its message).
BEHIND_WAIT_SECONDS = 5.0


class EndsBehind:
    """The claims whose run's end is being written behind its worker, for the whole daemon: a
    copy of that message (SQS's, a route's) claimed meanwhile would find the run still in
    progress and hide for a lease; it waits for the end instead, and is then a duplicate."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._ends: dict[str, threading.Event] = {}

    def begin(self, claim_id: str) -> Callable[[], None]:
        """Note claim_id's end as being written; the function returned says it is done."""
        done = threading.Event()
        with self._mutex:
            self._ends[claim_id] = done

        def written() -> None:
            with self._mutex:
                if self._ends.get(claim_id) is done:
                    del self._ends[claim_id]
            done.set()

        return written

    def wait(self, claim_id: str, timeout: float = BEHIND_WAIT_SECONDS) -> None:
        """Return once no end of claim_id is being written behind (or after timeout)."""
        with self._mutex:
            done = self._ends.get(claim_id)
        if done is not None:
            done.wait(timeout)


@dataclass(frozen=True)
class ClosingRun:
    """A run that has ended, its end not yet written: finish(linger) writes it (as
    RunCloser.close) and says what to do with its message, which must stay on the queue until
    then. linger: a next job is about to claim (a prefetched one waits for a worker, or a full
    receive's next batch is coming: Intake.claims_coming), so the write may wait up to
    BEHIND_LINGER_SECONDS (AHEAD_LINGER_SECONDS for a plain job's) for that claim's call to
    carry it."""

    finish: Callable[[bool], Ending]


class RunCloser:
    """Closes one job's run after its Ending is known; safe to call from many threads at once."""

    def __init__(
        self,
        *,
        dedupe: DedupeStore,
        locker: Locker,
        groups: Groups,
        history: History,
        listener: RunListener,
        keeper: LeaseKeeper,
        clock: Callable[[], float],
    ) -> None:
        self._dedupe = dedupe
        self._locker = locker
        self._groups = groups
        self._history = history
        self._listener = listener
        self._keeper = keeper
        self._clock = clock

    def close(
        self,
        entry: InFlight,
        ending: Ending,
        progress: RunProgress,
        jlog: JobLog,
        *,
        linger: float = 0.0,
    ) -> None:
        """Record the run, if it was one; release the lock; finish or release the claim. A claim
        left unfinished would let a redelivery of the message run the job again once its lease
        ends. linger: how long the record's write may wait to share another's call."""
        keeper = self._keeper
        # Taken out of the entry first: a renewal failing after this is a release, not a loss.
        claim, entry.claim = entry.claim, None
        lock, entry.lock = entry.lock, None
        slot, entry.slot = entry.slot, None
        finished = ending.settle.delete
        record = None if ending.run is None else progress.record(ending, self._clock())
        ended = NOT_FOLDED
        if record is not None:
            held = claim if finished else None
            ended = self._record(record, held, lock, slot, jlog, progress.job.firing, linger)
        for lease, answer, release, what in (
            (lock, ended.lock, self._locker.unlock, "lock"),
            (slot, ended.slot, self._groups.leave, "concurrency group slot"),
        ):
            if lease is None:
                continue
            if answer is None:
                keeper.release(lease, release, what, jlog)
            elif not answer:
                keeper.lost(what, lease, jlog)
        if claim is not None:
            if ending.retry is not None:
                keeper.until_answered(
                    lambda: self._dedupe.release(claim, ending.retry),
                    "keep its claim for its retry",
                    jlog,
                )
            elif ended.claim is None:
                outcome = None if ending.run is None else ending.run.value
                self._end_claim(claim, jlog, finished=finished, outcome=outcome)
            elif not ended.claim:
                keeper.lost("claim on its message", claim, jlog)
        if record is not None:
            self._listener.report(record)
            firing = progress.job.firing
            if firing is not None and record.final and not record.one_off:
                self._listener.fired(record.event_id, firing)

    def _record(
        self,
        record: RunRecord,
        claim: Lease | None,
        lock: Lease | None,
        slot: Lease | None,
        jlog: JobLog,
        firing: Firing | None = None,
        linger: float = 0.0,
    ) -> Ended:
        """history.finished, tried again for a while: a record never fails its job or keeps its
        message. What it did not do with claim, lock and slot is left to their stores."""
        answered, ended = self._keeper.until_answered(
            lambda: self._history.finished(
                record, claim=claim, lock=lock, slot=slot, firing=firing, linger=linger
            ),
            "record its run",
            jlog,
            give_up_after=RECORD_RETRY_SECONDS,
        )
        if not answered or ended is None:
            data = record.as_dict()
            for name in ("output", "stdout", "stderr"):  # logged line by line as it ran
                del data[name]
            jlog.error("its run record is lost: %s", json.dumps(data))
            return NOT_FOLDED
        return ended

    def duplicate(self, record: RunRecord, jlog: JobLog) -> None:
        """Record a duplicate of a firing's run (RunOutcome.DUPLICATE): its own record only,
        which reporters are not told of, as no run ended."""
        self._record(record, None, None, None, jlog)

    def _end_claim(
        self, lease: Lease, jlog: JobLog, *, finished: bool, outcome: str | None = None
    ) -> None:
        if not finished:
            self._keeper.until_answered(
                lambda: self._dedupe.release(lease), "release the claim on its message", jlog
            )
            return
        answered, ours = self._keeper.until_answered(
            lambda: self._dedupe.finish(lease, outcome), "mark its claim finished", jlog
        )
        if answered and not ours:
            self._keeper.lost("claim on its message", lease, jlog)
