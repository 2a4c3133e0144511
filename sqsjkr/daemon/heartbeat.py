"""The heartbeat: keeps alive what the daemon holds while its jobs wait for a lock or run.

One pass per interval renews every lease (locks, dedupe claims) and hides every in-flight message again;
with nothing in flight it sleeps until a job comes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sqsjkr.backends.aws import AWS_ERRORS, describe
from sqsjkr.backends.dedupe import Claim, DedupeStore
from sqsjkr.backends.groups import Groups, NoGroups
from sqsjkr.backends.kills import KillRequested
from sqsjkr.backends.lease import Lease
from sqsjkr.backends.locks import Locker
from sqsjkr.backends.sqs import Message
from sqsjkr.contract.job import Job
from sqsjkr.contract.run import KillMark
from sqsjkr.daemon.runner import StopReason, StopSwitch
from sqsjkr.errors import quote
from sqsjkr.observability.logs import JobLog, escape

log = logging.getLogger("sqsjkr.heartbeat")


@dataclass(eq=False)
class InFlight:
    """A received message whose job is not done yet.

    Its worker sets claim and lock as it takes them and clears each before giving it back, so a
    renewal that fails after the field was cleared is a release, not a loss. Plain attribute
    assignment is atomic, which is all the heartbeat needs to read them.
    """

    message: Message
    job: Job
    claim: Lease | None = None
    lock: Lease | None = None
    slot: Lease | None = None  # of its concurrency group
    stop: StopSwitch = field(default_factory=StopSwitch)
    queue: str = ""  # the name of the queue it came from
    #: The kill request a renewal of its claim found (`sqsjkr kill`): its stop is tripped.
    kill: KillMark | None = None
    #: Its claim taken on receipt with its receive's (a plain job): the claim set above then.
    ahead: Claim | None = None

    def killed(self, mark: KillMark) -> bool:
        """Note the kill request and stop the job: False if it was known already."""
        if self.kill is not None:
            return False
        self.kill = mark
        self.stop.trip(StopReason.KILLED)
        return True


class InFlightJobs:
    """The set of in-flight jobs, which the heartbeat renews and a stopping daemon waits for."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._entries: set[InFlight] = set()
        #: Adds and discards so far: tells an idle heartbeat whether anything happened.
        self._changes = 0

    def add(self, entry: InFlight) -> None:
        with self._changed:
            self._entries.add(entry)
            self._changes += 1
            self._changed.notify_all()

    def discard(self, entry: InFlight) -> None:
        with self._changed:
            self._entries.discard(entry)
            self._changes += 1
            self._changed.notify_all()

    def snapshot(self) -> list[InFlight]:
        with self._changed:
            return list(self._entries)

    def changes(self) -> int:
        with self._changed:
            return self._changes

    def wait_empty(self, timeout: float | None) -> bool:
        """Wait up to timeout for the set to empty; True if it has."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._entries, timeout)

    def wait_changed(self, since: int, stop: threading.Event) -> bool:
        """Wait until the set holds a job or changed after since (a changes() value), or stop
        is set and wake() called; False if stopped."""
        with self._changed:
            self._changed.wait_for(
                lambda: stop.is_set() or bool(self._entries) or self._changes != since
            )
        return not stop.is_set()

    def wake(self) -> None:
        """Wake wait_changed's callers to look at their stop event again."""
        with self._changed:
            self._changed.notify_all()


class Heartbeat:
    """Keeps in-flight jobs alive: one beat renews their leases in the lock and dedupe stores,
    another hides their messages again (and sends pending deletes), each on a thread of its own
    so that a hung call to one service cannot hold up the other."""

    def __init__(
        self,
        jobs: InFlightJobs,
        *,
        hide: Callable[[list[InFlight]], None],
        dedupe: DedupeStore,
        locker: Locker,
        interval: float,
        groups: Groups | None = None,
        flush_deletes: Callable[[], None] = lambda: None,
        lease_lost: Callable[[], None] = lambda: None,
    ) -> None:
        """hide: hides in-flight jobs' messages again, each for its queue's visibility timeout
        (and logs its own failures: the lease timing leaves room for a missed beat)."""
        self._jobs = jobs
        self._hide = hide
        self._dedupe = dedupe
        self._locker = locker
        self._groups = groups or NoGroups()
        self._interval = interval
        self._flush_deletes = flush_deletes
        self._lease_lost = lease_lost
        #: Held while a beat hides messages. Taken after removing a job from the set, it
        #: guarantees that no beat hides that job's message again after the caller settles it.
        self.hiding = threading.Lock()

    def run(self, stop: threading.Event) -> None:
        """Beat every interval while there is something to keep alive, until stop is set."""
        beats = [
            threading.Thread(
                target=self._every, args=(stop, self.hide), name="sqsjkr-heartbeat-sqs"
            ),
            threading.Thread(
                target=self._every, args=(stop, self.renew), name="sqsjkr-heartbeat-leases"
            ),
        ]
        for thread in beats:
            thread.start()
        try:
            # The beats sleep on the in-flight set while it is idle, which stop does not wake:
            # this thread waits for stop (without waking up meanwhile) and passes it on.
            stop.wait()
        finally:
            stop.set()
            self._jobs.wake()
            for thread in beats:
                thread.join()

    def _every(self, stop: threading.Event, beat: Callable[[], None]) -> None:
        """Beat every interval while jobs are in flight. With none, and none added or finished
        since the beat before last, sleep until one is added: an idle daemon's heartbeat makes
        no call and does not wake up. The two beats after the last job finished send its
        delete, should the receive loop wait (a pause, a backoff) with it pending."""
        seen = previous = self._jobs.changes()
        while self._jobs.wait_changed(previous, stop):
            # From start to start: a slow beat must not push the next one back by its own length.
            # The first beat is an interval after the wake-up, as a received job's first renewal
            # is due an interval after it was received.
            due = time.monotonic() + self._interval
            while not stop.wait(max(0.0, due - time.monotonic())):
                due = max(due + self._interval, time.monotonic())
                previous, seen = seen, self._jobs.changes()
                try:
                    beat()
                except Exception:
                    # A bug must not end the heartbeat: every lease would lapse behind it.
                    log.exception("heartbeat failed; beating again in %.1fs", self._interval)
                if not self._jobs.snapshot() and self._jobs.changes() == previous:
                    break

    def hide(self) -> None:
        """Hide every in-flight message again for the visibility timeout; send due deletes."""
        with self.hiding:
            entries = self._jobs.snapshot()
            if entries:
                self._hide(entries)
        # Finished jobs' messages wait in a batch; sending it from here too bounds their wait
        # even while the receive loop sits in a long poll or a backoff.
        self._flush_deletes()

    def renew(self) -> None:
        """Renew the lease of every lock and claim of the in-flight jobs."""
        # Once a store fails, the rest of this beat leaves it alone: behind a dead network each
        # call would wait out its timeouts.
        failed: set[str] = set()
        for entry in self._jobs.snapshot():
            self._renew(entry, "claim", self._dedupe.renew, "claim on its message", failed)
            self._renew(entry, "lock", self._locker.renew, "lock", failed)
            self._renew(entry, "slot", self._groups.renew, "concurrency group slot", failed)

    def _renew(
        self,
        entry: InFlight,
        name: str,
        renew: Callable[[Lease], bool],
        what: str,
        failed: set[str],
    ) -> None:
        lease: Lease | None = getattr(entry, name)
        if lease is None or name in failed:
            return
        try:
            kept = renew(lease)
        except KillRequested as request:
            if entry.killed(request.mark):
                JobLog(log, entry.job).warning(
                    "kill requested (%s): stopping it", escape(request.mark.describe())
                )
            return
        except AWS_ERRORS as exc:
            failed.add(name)
            log.error(
                "could not renew the %s %s (%s); trying again at the next beat",
                what,
                quote(lease.key),
                describe(exc),
            )
            return
        if kept or getattr(entry, name) is not lease:
            return
        setattr(entry, name, None)
        self._lease_lost()
        # Its lease passed unrenewed (an endpoint outage longer than the lease, a frozen host)
        # and another daemon took it over: the job may now run twice.
        JobLog(log, entry.job).error(
            "LOST its %s %s: its lease passed and another daemon took it over; the job keeps "
            "running here",
            what,
            quote(lease.key),
        )
