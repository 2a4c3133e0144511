"""What a job must hold before it runs (its concurrency group's slot, then its lock), and the wait.

LocksWanted counts this daemon's jobs per lock, so that a claim's write tries only a free one.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sqsjkr.backends.aws import AWS_ERRORS, describe, is_transient
from sqsjkr.backends.dedupe import WantedLock
from sqsjkr.backends.groups import Groups
from sqsjkr.backends.lease import Lease
from sqsjkr.backends.locks import Held, Locker
from sqsjkr.contract.job import Job
from sqsjkr.contract.limits import bounded_wait
from sqsjkr.contract.run import RunOutcome
from sqsjkr.daemon.heartbeat import InFlight
from sqsjkr.daemon.leases import LeaseKeeper
from sqsjkr.daemon.runs import DELETE, GIVE_BACK, LEAVE, Ending, RunProgress, killed
from sqsjkr.errors import quote
from sqsjkr.observability.logs import JobLog, Moment, escape
from sqsjkr.observability.stats import Outcome

log = logging.getLogger("sqsjkr.worker")


@dataclass(frozen=True)
class Hold:
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


class Holds:
    """Takes a job's holds, waiting while they are held elsewhere; safe from many threads."""

    def __init__(
        self,
        *,
        locker: Locker,
        groups: Groups,
        keeper: LeaseKeeper,
        stopping: threading.Event,
        clock: Callable[[], float],
        retry_interval: float,
    ) -> None:
        """retry_interval: the wait between two tries at a hold held elsewhere."""
        self._locker = locker
        self._groups = groups
        self._keeper = keeper
        self._stopping = stopping
        self._clock = clock
        self._retry_interval = retry_interval

    def of(self, job: Job) -> list[Hold]:
        """What the job must hold before it runs, in the order it takes them: its concurrency
        group's slot, then its lock (one order for all: no two jobs wait for each other)."""
        holds = []
        if job.concurrency_key:
            key, limit = job.concurrency_key, job.concurrency_limit
            holds.append(
                Hold(
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
                Hold(
                    "lock",
                    lock_id,
                    "lock",
                    lambda: self._locker.try_lock(lock_id, job.event_id),
                    self._locker.renew,
                    self._locker.unlock,
                )
            )
        return holds

    def acquire(
        self,
        entry: InFlight,
        hold: Hold,
        progress: RunProgress,
        jlog: JobLog,
        *,
        expired: Callable[[], Ending | None],
        note: Callable[[], None],
    ) -> Ending | None:
        """Wait until hold is ours, re-checking life_time (expired) between tries: None once
        taken. While it waits, note shows its event's summary for what and who holds it."""
        job = entry.job
        waiting = False
        while True:
            # Seen by the heartbeat's renewal of its claim; acted on at the next try at most
            # retry_interval later, as a shutdown is.
            if entry.kill is not None:
                jlog.warning(
                    "not started: %s while it waited for %s",
                    escape(entry.kill.describe()),
                    hold.what,
                )
                return killed(entry.kill)
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
                    note()
            except AWS_ERRORS as exc:
                self._drop(entry, hold)
                if job.abort_if_locked or not is_transient(exc):
                    # Left on the queue: it comes back to be tried again, and a RedrivePolicy
                    # keeps it in the end.
                    why = f"could not take {hold.what} ({describe(exc)})"
                    jlog.error("failed: %s", why)
                    return Ending(LEAVE, (Outcome.FAILED,), RunOutcome.FAILED_TO_START, why)
                jlog.error("could not take %s (%s); retrying", hold.what, describe(exc))
            self._stopping.wait(bounded_wait(self._retry_interval))
            ended = expired()
            if ended is not None:
                return ended

    def _take(self, entry: InFlight, hold: Hold, jlog: JobLog) -> Held | None:
        """One try at hold: None once it is ours with a fresh lease, else who holds it."""
        # A lock may already be ours, from the claim's write (never a slot: see of()).
        taken = getattr(entry, hold.field) or hold.take()
        if isinstance(taken, Held):
            return taken
        setattr(entry, hold.field, taken)
        jlog.debug("took %s (lease until %s)", hold.what, Moment(taken.until, "milliseconds"))
        if self._keeper.fresh(taken, hold.renew, hold.what, jlog):
            return None
        setattr(entry, hold.field, None)  # lost to another holder while we took it: wait
        return Held()

    def _drop(self, entry: InFlight, hold: Hold) -> None:
        """Give up a lease taken in a try that then failed, so it does not stay held for its lease."""
        lease = getattr(entry, hold.field)
        setattr(entry, hold.field, None)
        if lease is None:
            return
        try:
            hold.release(lease)
        except AWS_ERRORS as exc:
            log.debug("could not release %s (%s)", hold.what, describe(exc))


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

    def by_others(self, lock_id: str) -> bool:
        """Whether a job here other than the caller (which counts itself) wants lock_id."""
        with self._mutex:
            return self._counts[lock_id] > 1


def lock_with_claim(job: Job) -> WantedLock | None:
    """The job's lock, for the claim's write to take if it is free: not for a job of a
    concurrency group, which takes its group's slot first (Holds.of's order)."""
    if not job.lock_id or job.concurrency_key:
        return None
    return WantedLock(job.lock_id, job.event_id)
