"""One job's path on a worker thread: claim the message, check life_time, lock, run, give back.

Worker.handle says how the job ended and what to do with its message; the daemon loop does it.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TypeVar

from sqsjkr.backends.aws import AWS_ERRORS, Backoff, describe, is_transient
from sqsjkr.backends.dedupe import ClaimState, DedupeStore, Retry, WantedLock
from sqsjkr.backends.groups import Groups, NoGroups
from sqsjkr.backends.history import NOT_FOLDED, Ended, History, NoHistory
from sqsjkr.backends.lease import FRESH_LEASE_SHARE, Lease
from sqsjkr.backends.locks import Held, Locker
from sqsjkr.contract.job import Job, is_expired
from sqsjkr.contract.limits import LONGEST_HIDE_SECONDS, bounded_wait
from sqsjkr.contract.run import RunOutcome, RunRecord
from sqsjkr.daemon.heartbeat import InFlight
from sqsjkr.daemon.runner import JobRunner, RunResult, StopReason, StopSwitch, time_limit
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
from sqsjkr.observability.logs import JobLog, Moment, shorten_command
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
    #: The queue's RedrivePolicy maxReceiveCount, if any: a retry is one more receive.
    max_receive_count: int | None = None


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
        groups: Groups | None = None,
        locks_wanted: LocksWanted | None = None,
    ) -> None:
        """locks_wanted: one for the whole daemon, shared by the Workers of all its queues."""
        self._dedupe = dedupe
        self._locker = locker
        self._runner = runner
        self._stopping = stopping
        self._settings = settings
        self._clock = clock
        self._trigger = trigger
        self._lease_lost = lease_lost
        self._history = history or NoHistory()
        self._groups = groups or NoGroups()
        self._listener = listener or NoListener()
        self._locks_wanted = locks_wanted or LocksWanted()

    def handle(self, entry: InFlight) -> Ending:
        wanted = _lock_with_claim(entry.job)
        if wanted is None:
            return self._handle(entry, None)
        with self._locks_wanted.wanting(wanted.lock_id) as alone:
            # A lock that another job here wants is not free: trying it in the claim's write
            # would only cost that write a second try.
            return self._handle(entry, wanted if alone else None)

    def _handle(self, entry: InFlight, lock: WantedLock | None) -> Ending:
        """handle(), with the lock that the claim's write may take if it is free."""
        job = entry.job
        jlog = JobLog(log, job)
        progress = RunProgress(job, entry.message, self._clock())
        try:
            # The run shows as in progress in its event's summary from its claim on: in the
            # claim's own write when the store can, which takes a free lock too.
            claim = self._dedupe.claim(job.message_id, running=progress.note(), lock=lock)
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
        jlog.debug(
            "claimed its message (lease until %s)", Moment(claim.lease.until, "milliseconds")
        )
        entry.claim = claim.lease
        entry.lock = claim.lock  # taken by the claim's own write, when the store could
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
        waited_from = time.monotonic()
        for hold in self._holds(job):
            refused = self._acquire(entry, hold, progress, jlog)
            if refused is not None:
                return refused
        progress.lock_wait = time.monotonic() - waited_from
        if progress.waiting is not None:
            progress.waiting = None
            self._note(progress, jlog)  # no longer shown as waiting
        return self._run(entry, progress, jlog)

    def _run(self, entry: InFlight, progress: RunProgress, jlog: JobLog) -> Ending:
        job = entry.job
        if self._stopping.is_set():
            jlog.info("not started: stopping")
            return Ending(GIVE_BACK, run=RunOutcome.STOPPED, error="the daemon was stopping")
        # An HTTP job's own http.timeout first: what the runner keeps, and what its end says.
        timeout = time_limit(job, self._settings.job_timeout)
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
        """An errored or timed-out run, or an HTTP call that could not connect, with retries left
        runs again after its delay: the message is hidden until then, and its claim remembers the
        runs so far."""
        job = progress.job
        # An HTTP service that refused the call may be restarting; a command that cannot start
        # (no sh, arguments too long) fails the same way every time.
        retried = ending.run in RETRIED or (
            ending.run is RunOutcome.FAILED_TO_START and job.http is not None
        )
        if not retried or progress.attempt > job.retries:
            return ending
        delay = retry_delay(job.retry_delay.seconds, progress.attempt)
        retry = Retry(attempts=progress.attempt, at=self._clock() + delay)
        limit = self._settings.max_receive_count
        if limit is not None and progress.message.receive_count >= limit:
            # Still hidden until the retry is due, and kept for it by its claim: should the
            # message be redriven from the dead-letter queue, that retry runs then.
            jlog.error(
                "failed for good: its retry cannot run here: the message has been received %d "
                "time(s), the queue's maxReceiveCount, so SQS moves it to the dead-letter queue "
                "instead; give the queue a maxReceiveCount above retries + 1 (%d)",
                progress.message.receive_count,
                job.retries + 1,
            )
            last = True
        else:
            jlog.warning(
                "will run again in %.0fs (retry %d of %d)", delay, progress.attempt, job.retries
            )
            last = False
        settle = Settle(visible_in=_hide_for(delay))
        return replace(ending, settle=settle, retry=retry, last=last)

    @staticmethod
    def _ended(result: RunResult, timeout: float | None, jlog: JobLog) -> Ending:
        if result.start_error is not None:
            jlog.error("failed: it cannot be started (%s)", result.start_error)
            return Ending(DELETE, (Outcome.FAILED,), RunOutcome.FAILED_TO_START, result.start_error)
        if result.stopped is StopReason.CANCELLED:
            jlog.warning(
                "stopped after %.1fs by the shutdown; its message is given back to run again",
                result.seconds,
            )
            return Ending(GIVE_BACK, run=RunOutcome.STOPPED, error="stopped by the shutdown")
        if result.stopped is StopReason.TIMED_OUT:
            limit = f"{result.seconds:.1f}s" if timeout is None else f"{timeout:g}s"
            jlog.warning("timed out after %.1fs (timeout %s)", result.seconds, limit)
            counts = (Outcome.ERRORED, Outcome.TIMED_OUT)
            return Ending(DELETE, counts, RunOutcome.TIMED_OUT, f"timed out after {limit}")
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

    def _holds(self, job: Job) -> list[_Hold]:
        """What the job must hold before it runs, in the order it takes them: its concurrency
        group's slot, then its lock (one order for all: no two jobs wait for each other)."""
        holds = []
        if job.concurrency_key:
            key, limit = job.concurrency_key, job.concurrency_limit
            holds.append(
                _Hold(
                    "concurrency group",
                    key,
                    "slot",
                    lambda: self._groups.try_enter(key, limit, job.event_id),
                    self._groups.renew,
                    self._groups.leave,
                )
            )
        if job.lock_id:
            lock_id = job.lock_id
            holds.append(
                _Hold(
                    "lock",
                    lock_id,
                    "lock",
                    lambda: self._locker.try_lock(lock_id, job.event_id),
                    self._locker.renew,
                    self._locker.unlock,
                )
            )
        return holds

    def _acquire(
        self, entry: InFlight, hold: _Hold, progress: RunProgress, jlog: JobLog
    ) -> Ending | None:
        """Wait until hold is ours, re-checking life_time between tries: None once taken. While
        it waits, its event's summary shows for what and who holds it."""
        job = entry.job
        waiting = False
        while True:
            if self._stopping.is_set():
                jlog.info("gave up waiting for %s: stopping", hold.what)
                return Ending(GIVE_BACK, run=RunOutcome.STOPPED, error="the daemon was stopping")
            try:
                held = self._take(entry, hold, jlog)
                if held is None:
                    return None
                holder = held.describe(self._clock())
                if job.abort_if_locked:
                    jlog.warning("aborted: %s is %s", hold.what, holder)
                    why = f"{hold.what} is {holder}"
                    return Ending(DELETE, (Outcome.FAILED,), RunOutcome.ABORTED, why)
                # Once at INFO; every try after that at DEBUG only.
                level = logging.DEBUG if waiting else logging.INFO
                jlog.log(level, "waits for %s, %s", hold.what, holder)
                waiting = True
                noted = (hold.kind, hold.key, held.owner)
                if progress.waiting != noted:  # the first refusal, or another holder now
                    progress.waiting = noted
                    self._note(progress, jlog)
            except AWS_ERRORS as exc:
                self._drop(entry, hold)
                if job.abort_if_locked or not is_transient(exc):
                    # Left on the queue: it comes back to be tried again, and a RedrivePolicy
                    # keeps it in the end.
                    why = f"could not take {hold.what} ({describe(exc)})"
                    jlog.error("failed: %s", why)
                    return Ending(LEAVE, (Outcome.FAILED,), RunOutcome.FAILED_TO_START, why)
                jlog.error("could not take %s (%s); retrying", hold.what, describe(exc))
            self._stopping.wait(bounded_wait(self._settings.lock_retry_interval))
            expired = self._expired(entry, jlog)
            if expired is not None:
                return expired

    def _take(self, entry: InFlight, hold: _Hold, jlog: JobLog) -> Held | None:
        """One try at hold: None once it is ours with a fresh lease, else who holds it."""
        # A lock may already be ours, from the claim's write (never a slot: see _holds).
        taken = getattr(entry, hold.field) or hold.take()
        if isinstance(taken, Held):
            return taken
        setattr(entry, hold.field, taken)
        jlog.debug("took %s (lease until %s)", hold.what, Moment(taken.until, "milliseconds"))
        if self._fresh(taken, hold.renew, hold.what, jlog):
            return None
        setattr(entry, hold.field, None)  # lost to another holder while we took it: wait
        return Held()

    def _drop(self, entry: InFlight, hold: _Hold) -> None:
        """Give up a lease taken in a try that then failed, so it does not stay held for its lease."""
        lease = getattr(entry, hold.field)
        setattr(entry, hold.field, None)
        if lease is None:
            return
        try:
            hold.release(lease)
        except AWS_ERRORS as exc:
            log.debug("could not release %s (%s)", hold.what, describe(exc))

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
        slot, entry.slot = entry.slot, None
        finished = ending.settle.delete
        record = None if ending.run is None else progress.record(ending, self._clock())
        ended = NOT_FOLDED
        if record is not None:
            ended = self._record(record, claim if finished else None, lock, slot, jlog)
        for lease, answer, release, what in (
            (lock, ended.lock, self._locker.unlock, "lock"),
            (slot, ended.slot, self._groups.leave, "concurrency group slot"),
        ):
            if lease is None:
                continue
            if answer is None:
                self._release(lease, release, what, jlog)
            elif not answer:
                self._lost(what, lease, jlog)
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
        self,
        record: RunRecord,
        claim: Lease | None,
        lock: Lease | None,
        slot: Lease | None,
        jlog: JobLog,
    ) -> Ended:
        """history.finished, tried again for a while: a record never fails its job or keeps its
        message. What it did not do with claim, lock and slot is left to their stores."""
        answered, ended = self._until_answered(
            lambda: self._history.finished(record, claim=claim, lock=lock, slot=slot),
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
        """Show the run as in progress (or waiting) in its event's summary, when its claim could
        not, or what it waits for changes."""
        try:
            self._history.started(progress.note())
        except AWS_ERRORS as exc:
            # The run goes on: only its "running now" in `sqsjkr status` is missing.
            jlog.warning("could not mark its event running (%s)", describe(exc))

    def _release(
        self, lease: Lease, release: Callable[[Lease], bool], what: str, jlog: JobLog
    ) -> None:
        action = f"release its {what} {quote(lease.key)}"
        answered, ours = self._until_answered(lambda: release(lease), action, jlog)
        if answered and not ours:
            self._lost(what, lease, jlog)

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


class LocksWanted:
    """How many of this daemon's jobs want each lock_id now, waiting for it or holding it."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._counts: Counter[str] = Counter()

    @contextmanager
    def wanting(self, lock_id: str) -> Iterator[bool]:
        """Count one more job wanting lock_id while inside; True if no other job here does."""
        with self._mutex:
            alone = self._counts[lock_id] == 0
            self._counts[lock_id] += 1
        try:
            yield alone
        finally:
            with self._mutex:
                self._counts[lock_id] -= 1
                if not self._counts[lock_id]:
                    del self._counts[lock_id]


def _lock_with_claim(job: Job) -> WantedLock | None:
    """The job's lock, for the claim's write to take if it is free: not for a job of a
    concurrency group, which takes its group's slot first (_holds' order)."""
    if not job.lock_id or job.concurrency_key:
        return None
    return WantedLock(job.lock_id, job.event_id)


def _hide_for(seconds: float) -> int:
    """A visibility timeout of about seconds, within what SQS allows a message just received."""
    return int(min(LONGEST_HIDE_SECONDS, max(1, seconds)))


def retry_delay(first: float, attempt: int) -> float:
    """The wait before the run after attempt: first, doubled at each run, capped at a day, and
    up to a tenth shorter at random, so that a fleet's retries do not come in step."""
    delay = min(MAX_RETRY_DELAY, first * 2 ** min(attempt - 1, 32))
    return delay * random.uniform(0.9, 1.0)


@dataclass(frozen=True)
class _Hold:
    """A lease a job must hold to run, and how to take, renew and give it back."""

    kind: str  # "lock" or "concurrency group"
    key: str  # its lock_id or concurrency_key
    field: str  # the InFlight attribute that keeps it, for the heartbeat
    take: Callable[[], Lease | Held]
    renew: Callable[[Lease], bool]
    release: Callable[[Lease], bool]

    @property
    def what(self) -> str:
        """For the log: 'lock "L"', 'concurrency group "db"'."""
        return f"{self.kind} {quote(self.key)}"
