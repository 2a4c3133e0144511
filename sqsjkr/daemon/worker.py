"""One job's path on a worker thread: claim the message, check life_time, lock, run, give back.

Worker.handle says how the job ended and what to do with its message; the daemon loop does it.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

from sqsjkr.backends.aws import AWS_ERRORS, Backoff, describe, is_transient
from sqsjkr.backends.dedupe import ClaimState, DedupeStore, Retry
from sqsjkr.backends.history import NOT_FOLDED, Ended, History, NoHistory
from sqsjkr.backends.lease import FRESH_LEASE_SHARE, Lease
from sqsjkr.backends.locks import Held, Locker
from sqsjkr.contract.job import Job, is_expired
from sqsjkr.contract.limits import LONGEST_HIDE_SECONDS, bounded_wait
from sqsjkr.contract.run import RunOutcome, RunRecord
from sqsjkr.daemon.heartbeat import InFlight
from sqsjkr.daemon.runner import JobRunner, RunResult, StopReason, StopSwitch
from sqsjkr.daemon.runs import (
    DELETE,
    GIVE_BACK,
    LEAVE,
    PAUSE,
    Ending,
    NoListener,
    RunListener,
    RunProgress,
    Settle,
)
from sqsjkr.errors import HostFault, StoreTooSlow, quote
from sqsjkr.observability.logs import JobLog, shorten_command
from sqsjkr.observability.stats import Outcome

log = logging.getLogger("sqsjkr.worker")

T = TypeVar("T")

#: Renewals tried to bring a stale lease back to a fresh share before the store counts as too
#: slow to hold one.
FRESHEN_TRIES = 3
#: How long a run record that cannot be written is tried again before it is logged instead.
RECORD_RETRY_SECONDS = 30.0
#: The outcomes a job's `retries` run again; a cancel for life_time or an abort is final.
RETRIED = frozenset({RunOutcome.ERRORED, RunOutcome.TIMED_OUT})
#: The longest wait before a retry, however often retry_delay has doubled.
MAX_RETRY_DELAY = 86400.0


@dataclass(frozen=True)
class WorkerSettings:
    life_time_trigger: str | None = None
    lock_retry_interval: float = 5.0
    job_timeout: float | None = None
    #: A message whose job runs elsewhere is hidden until that lease ends plus this margin.
    hide_margin: int = 15
    #: The lease of locks and claims: a job starts only with FRESH_LEASE_SHARE of it left.
    lease: float = 60.0


class Worker:
    """Takes one in-flight job from claim to its end; safe to call from many threads at once."""

    def __init__(
        self,
        *,
        dedupe: DedupeStore,
        locker: Locker,
        runner: JobRunner,
        stopping: threading.Event,
        settings: WorkerSettings,
        clock: Callable[[], float] = time.time,
        trigger: Callable[[str, Job, StopSwitch], RunResult],
        lease_lost: Callable[[], None] = lambda: None,
        history: History | None = None,
        listener: RunListener | None = None,
    ) -> None:
        self._dedupe = dedupe
        self._locker = locker
        self._runner = runner
        self._stopping = stopping
        self._settings = settings
        self._clock = clock
        self._trigger = trigger
        self._lease_lost = lease_lost
        self._history = history or NoHistory()
        self._listener = listener or NoListener()

    def handle(self, entry: InFlight) -> Ending:
        job = entry.job
        jlog = JobLog(log, job)
        progress = RunProgress(job, entry.message, self._clock())
        try:
            # The run shows as in progress in its event's summary from its claim on: in the
            # claim's own write when the store can.
            claim = self._dedupe.claim(job.message_id, running=progress.note())
        except AWS_ERRORS as exc:
            # Not run: unlike the Go daemon, a job that may be a duplicate waits for a later try.
            jlog.error(
                "not started: its dedupe record could not be written (%s); the message stays "
                "on the queue for a later try",
                describe(exc),
            )
            return Ending(PAUSE)
        if claim.state is ClaimState.FINISHED:
            jlog.info("duplicate message deleted: its job has run")
            return Ending(DELETE, (Outcome.DUPLICATE,))
        if claim.state is ClaimState.RUNNING:
            held_for = (claim.held_until or 0) - self._clock()
            hide = _hide_for(held_for + self._settings.hide_margin)
            jlog.info("is in progress on another daemon: message hidden for %ds", hide)
            return Ending(Settle(visible_in=hide), (Outcome.DUPLICATE,))
        if claim.state is ClaimState.WAITING:
            hide = _hide_for((claim.held_until or 0) - self._clock())
            jlog.info("waits for its retry: message hidden for %ds", hide)
            return Ending(Settle(visible_in=hide))
        assert claim.lease is not None
        jlog.debug("claimed its message (lease until %.3f)", claim.lease.until)
        entry.claim = claim.lease
        progress.claimed(claim.lease.owner, claim.attempt)
        if not claim.noted:
            self._note(progress, jlog)
        # Should _claimed raise: the claim is given up, and the job runs again later.
        ending = Ending(LEAVE)
        try:
            ending = self._claimed(entry, progress, jlog)
        finally:
            self._end(entry, ending, progress, jlog)
        return ending

    def _claimed(self, entry: InFlight, progress: RunProgress, jlog: JobLog) -> Ending:
        job = entry.job
        assert entry.claim is not None
        try:
            if not self._fresh(entry.claim, self._dedupe.renew, "claim on its message", jlog):
                entry.claim = None  # another daemon has it now, runs the job and records it
                return Ending(LEAVE)
        except AWS_ERRORS as exc:
            jlog.error("not started: its claim could not be renewed (%s)", describe(exc))
            return Ending(PAUSE, run=RunOutcome.FAILED_TO_START, error=describe(exc))
        expired = self._expired(entry, jlog)
        if expired is not None:
            return expired
        if job.lock_id:
            waited_from = time.monotonic()
            refused = self._lock(entry, jlog)
            progress.lock_wait = time.monotonic() - waited_from
            if refused is not None:
                return refused
        return self._run(entry, progress, jlog)

    def _run(self, entry: InFlight, progress: RunProgress, jlog: JobLog) -> Ending:
        job = entry.job
        if self._stopping.is_set():
            jlog.info("not started: stopping")
            return Ending(GIVE_BACK, run=RunOutcome.STOPPED, error="the daemon was stopping")
        timeout = job.timeout.seconds if job.timeout is not None else self._settings.job_timeout
        jlog.info("started: %s", shorten_command(job.what))
        self._listener.notice(progress.start(self._clock()))
        try:
            progress.result = self._runner.run(
                job, timeout=timeout, stop=entry.stop, context=progress.context()
            )
        except HostFault as exc:
            # Not the job's fault: it runs later, here or elsewhere, and receiving pauses.
            jlog.error(
                "not started: %s; its claim and lock are released and its message is left "
                "to run later",
                exc,
            )
            return Ending(PAUSE, run=RunOutcome.FAILED_TO_START, error=str(exc))
        return self._retry_if_due(self._ended(progress.result, timeout, jlog), progress, jlog)

    def _retry_if_due(self, ending: Ending, progress: RunProgress, jlog: JobLog) -> Ending:
        """An errored or timed-out run with retries left runs again after its delay: the
        message is hidden until then, and its claim remembers the runs so far."""
        job = progress.job
        if ending.run not in RETRIED or progress.attempt > job.retries:
            return ending
        delay = retry_delay(job.retry_delay.seconds, progress.attempt)
        retry = Retry(attempts=progress.attempt, at=self._clock() + delay)
        jlog.warning(
            "will run again in %.0fs (retry %d of %d)", delay, progress.attempt, job.retries
        )
        return replace(ending, settle=Settle(visible_in=_hide_for(delay)), retry=retry)

    @staticmethod
    def _ended(result: RunResult, timeout: float | None, jlog: JobLog) -> Ending:
        if result.start_error is not None:
            jlog.error("failed: its command cannot be started (%s)", result.start_error)
            return Ending(DELETE, (Outcome.FAILED,), RunOutcome.FAILED_TO_START, result.start_error)
        if result.stopped is StopReason.CANCELLED:
            jlog.warning(
                "stopped after %.1fs by the shutdown; its message is given back to run again",
                result.seconds,
            )
            return Ending(GIVE_BACK, run=RunOutcome.STOPPED, error="stopped by the shutdown")
        if result.stopped is StopReason.TIMED_OUT:
            jlog.warning("timed out after %.1fs (timeout %gs)", result.seconds, timeout)
            counts = (Outcome.ERRORED, Outcome.TIMED_OUT)
            return Ending(DELETE, counts, RunOutcome.TIMED_OUT, f"timed out after {timeout:g}s")
        if result.ok:
            jlog.info("succeeded in %.1fs", result.seconds)
            return Ending(DELETE, (Outcome.SUCCEEDED,), RunOutcome.SUCCEEDED)
        jlog.warning("errored with exit code %d after %.1fs", result.exit_code, result.seconds)
        return Ending(DELETE, (Outcome.ERRORED,), RunOutcome.ERRORED)

    def _expired(self, entry: InFlight, jlog: JobLog) -> Ending | None:
        """The job's end if it has outlived its life_time (the trigger is run); None if not."""
        job = entry.job
        now = self._clock()
        if not is_expired(job, now):
            return None
        why = f"sent {now - job.sent_at:.1f}s ago, life_time is {job.life_time}"
        jlog.warning("cancelled: %s", why)
        trigger = self._settings.life_time_trigger
        if trigger and not job.disable_life_time_trigger:
            result = self._trigger(trigger, job, entry.stop)
            if not result.ok:
                jlog.error("life_time_trigger exited with %d", result.exit_code)
        return Ending(
            DELETE, (Outcome.FAILED,), RunOutcome.CANCELLED, f"older than its life_time: {why}"
        )

    def _lock(self, entry: InFlight, jlog: JobLog) -> Ending | None:
        """Wait for the job's lock, re-checking life_time between tries: None once taken."""
        job = entry.job
        assert job.lock_id is not None
        lock = quote(job.lock_id)
        waiting = False
        while True:
            if self._stopping.is_set():
                jlog.info("gave up waiting for lock %s: stopping", lock)
                return Ending(GIVE_BACK, run=RunOutcome.STOPPED, error="the daemon was stopping")
            try:
                held = self._take_lock(entry, jlog)
                if held is None:
                    return None
                holder = held.describe(self._clock())
                if job.abort_if_locked:
                    jlog.warning("aborted: lock %s is %s", lock, holder)
                    why = f"lock {lock} is {holder}"
                    return Ending(DELETE, (Outcome.FAILED,), RunOutcome.ABORTED, why)
                # Once at INFO; every try after that at DEBUG only.
                level = logging.DEBUG if waiting else logging.INFO
                jlog.log(level, "waits for lock %s, %s", lock, holder)
                waiting = True
            except AWS_ERRORS as exc:
                self._drop_lock(entry)
                if job.abort_if_locked or not is_transient(exc):
                    # Left on the queue: it comes back to be tried again, and a RedrivePolicy
                    # keeps it in the end.
                    why = f"could not take lock {lock} ({describe(exc)})"
                    jlog.error("failed: %s", why)
                    return Ending(LEAVE, (Outcome.FAILED,), RunOutcome.FAILED_TO_START, why)
                jlog.error("could not take lock %s (%s); retrying", lock, describe(exc))
            self._stopping.wait(bounded_wait(self._settings.lock_retry_interval))
            expired = self._expired(entry, jlog)
            if expired is not None:
                return expired

    def _take_lock(self, entry: InFlight, jlog: JobLog) -> Held | None:
        """One try at the job's lock: None once it is ours with a fresh lease, else who holds it."""
        job = entry.job
        assert job.lock_id is not None
        taken = self._locker.try_lock(job.lock_id, job.event_id)
        if isinstance(taken, Held):
            return taken
        entry.lock = taken
        jlog.debug("took lock %s (lease until %.3f)", quote(taken.key), taken.until)
        if self._fresh(taken, self._locker.renew, "lock", jlog):
            return None
        entry.lock = None  # lost to another holder while we were taking it: held, so wait
        return Held()

    def _drop_lock(self, entry: InFlight) -> None:
        """Give up a lock taken in a try that then failed, so it does not stay held for its lease."""
        lease, entry.lock = entry.lock, None
        if lease is None:
            return
        try:
            self._locker.unlock(lease)
        except AWS_ERRORS as exc:
            log.debug("could not release lock %s (%s)", quote(lease.key), describe(exc))

    def _fresh(self, lease: Lease, renew: Callable[[Lease], bool], what: str, jlog: JobLog) -> bool:
        """Whether lease has FRESH_LEASE_SHARE of its length left, renewing it if not: a slow
        write can leave a lease nearly spent by the time it returns, and the job must not start
        on it. False if it was lost (logged and counted); AWS errors and StoreTooSlow raise."""
        needed = self._settings.lease * FRESH_LEASE_SHARE
        left = lease.until - self._clock()
        for _ in range(FRESHEN_TRIES):
            if left >= needed:
                return True
            jlog.info(
                "%s %s has %.1fs of its lease left: renewing it first", what, quote(lease.key), left
            )
            started = self._clock()
            if not renew(lease):
                self._lost(what, lease, jlog)
                return False
            left = started + self._settings.lease - self._clock()
        raise StoreTooSlow(
            f"the {what} {quote(lease.key)} cannot be renewed to {needed:.1f}s of lease: each "
            "renewal takes too long"
        )

    def _end(self, entry: InFlight, ending: Ending, progress: RunProgress, jlog: JobLog) -> None:
        """Record the run, if it was one; release the lock; finish or release the claim. All in
        one write when the history store can. A claim left unfinished would let a redelivery of
        the message run the job again once its lease ends."""
        # Taken out of the entry first: a renewal failing after this is a release, not a loss.
        claim, entry.claim = entry.claim, None
        lock, entry.lock = entry.lock, None
        finished = ending.settle.delete
        record = None if ending.run is None else progress.record(ending, self._clock())
        ended = NOT_FOLDED
        if record is not None:
            ended = self._record(record, claim if finished else None, lock, jlog)
        if lock is not None:
            if ended.lock is None:
                self._unlock(lock, jlog)
            elif not ended.lock:
                self._lost("lock", lock, jlog)
        if claim is not None:
            if ending.retry is not None:
                self._until_answered(
                    lambda: self._dedupe.release(claim, ending.retry),
                    "keep its claim for its retry",
                    jlog,
                )
            elif ended.claim is None:
                self._end_claim(claim, jlog, finished=finished)
            elif not ended.claim:
                self._lost("claim on its message", claim, jlog)
        if record is not None:
            self._listener.report(record)

    def _record(
        self, record: RunRecord, claim: Lease | None, lock: Lease | None, jlog: JobLog
    ) -> Ended:
        """history.finished, tried again for a while: a record never fails its job or keeps its
        message. What it did not do with claim and lock is left to their stores."""
        answered, ended = self._until_answered(
            lambda: self._history.finished(record, claim=claim, lock=lock),
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

    def _note(self, progress: RunProgress, jlog: JobLog) -> None:
        """Show the run as in progress in its event's summary, when its claim could not."""
        try:
            self._history.started(progress.note())
        except AWS_ERRORS as exc:
            # The run goes on: only its "running now" in `sqsjkr status` is missing.
            jlog.warning("could not mark its event running (%s)", describe(exc))

    def _unlock(self, lease: Lease, jlog: JobLog) -> None:
        what = f"release lock {quote(lease.key)}"
        answered, ours = self._until_answered(lambda: self._locker.unlock(lease), what, jlog)
        if answered and not ours:
            self._lost("lock", lease, jlog)

    def _end_claim(self, lease: Lease, jlog: JobLog, *, finished: bool) -> None:
        if not finished:
            self._until_answered(
                lambda: self._dedupe.release(lease), "release the claim on its message", jlog
            )
            return
        answered, ours = self._until_answered(
            lambda: self._dedupe.finish(lease), "mark its claim finished", jlog
        )
        if answered and not ours:
            self._lost("claim on its message", lease, jlog)

    def _lost(self, what: str, lease: Lease, jlog: JobLog) -> None:
        # Its lease passed unrenewed (an endpoint outage, a frozen host, a slow write) and
        # another daemon took it over: the job may have run twice.
        self._lease_lost()
        jlog.error(
            "LOST its %s %s: its lease had passed and another daemon took it over",
            what,
            quote(lease.key),
        )

    def _until_answered(
        self,
        call: Callable[[], T],
        what: str,
        jlog: JobLog,
        give_up_after: float | None = None,
    ) -> tuple[bool, T | None]:
        """(True, what call returned), retried while the store is out of reach; (False, None) if
        it never answered. The message stays in flight (hidden by the heartbeat) meanwhile.
        Once stopping, after give_up_after seconds, or for an error that retrying cannot mend,
        it gives up: a lease then ends by itself."""
        backoff = Backoff(first=0.5, cap=10.0)
        deadline = None if give_up_after is None else time.monotonic() + give_up_after
        while True:
            try:
                return True, call()
            except AWS_ERRORS as exc:
                late = deadline is not None and time.monotonic() >= deadline
                if not is_transient(exc) or self._stopping.is_set() or late:
                    jlog.error("could not %s (%s); giving up", what, describe(exc))
                    return False, None
                delay = backoff.next_delay()
                jlog.error("could not %s (%s); retrying in %.1fs", what, describe(exc), delay)
                self._stopping.wait(delay)


def _hide_for(seconds: float) -> int:
    """A visibility timeout of about seconds, within what SQS allows a message just received."""
    return int(min(LONGEST_HIDE_SECONDS, max(1, seconds)))


def retry_delay(first: float, attempt: int) -> float:
    """The wait before the run after attempt: first, doubled at each run, capped at a day, and
    up to a tenth shorter at random, so that a fleet's retries do not come in step."""
    delay = min(MAX_RETRY_DELAY, first * 2 ** min(attempt - 1, 32))
    return delay * random.uniform(0.9, 1.0)
