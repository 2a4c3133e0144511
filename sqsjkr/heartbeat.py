"""The heartbeat: keeps alive what the daemon holds while its jobs wait for a lock or run.

One pass per interval renews every lease (locks, dedupe claims) and hides every in-flight message again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from .aws import AWS_ERRORS, describe
from .dedupe import DedupeStore
from .errors import quote
from .job import Job
from .lease import Lease
from .locks import Locker
from .runner import StopSwitch
from .sqs import Message, MessageSource

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
    stop: StopSwitch = field(default_factory=StopSwitch)


class InFlightJobs:
    """The set of in-flight jobs, which the heartbeat renews and a stopping daemon waits for."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._entries: set[InFlight] = set()

    def add(self, entry: InFlight) -> None:
        with self._changed:
            self._entries.add(entry)

    def discard(self, entry: InFlight) -> None:
        with self._changed:
            self._entries.discard(entry)
            self._changed.notify_all()

    def snapshot(self) -> list[InFlight]:
        with self._changed:
            return list(self._entries)

    def wait_empty(self, timeout: float | None) -> bool:
        """Wait up to timeout for the set to empty; True if it has."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._entries, timeout)


class Heartbeat:
    """Renews leases and message visibility every interval, on a thread that run() blocks."""

    def __init__(
        self,
        jobs: InFlightJobs,
        *,
        source: MessageSource,
        dedupe: DedupeStore,
        locker: Locker,
        interval: float,
        visibility: int | None,
    ) -> None:
        """visibility: seconds to hide in-flight messages for at each beat; None to leave them
        alone (they were deleted on receive)."""
        self._jobs = jobs
        self._source = source
        self._dedupe = dedupe
        self._locker = locker
        self._interval = interval
        self._visibility = visibility

    def run(self, stop: threading.Event) -> None:
        """Beat every interval until stop is set."""
        while not stop.wait(self._interval):
            try:
                self.beat()
            except Exception:
                # A bug must not end the heartbeat: every lease would lapse behind it.
                log.exception("heartbeat failed; beating again in %.1fs", self._interval)

    def beat(self) -> None:
        entries = self._jobs.snapshot()
        if not entries:
            return
        if self._visibility is not None:
            try:
                self._source.set_visibility([e.message for e in entries], self._visibility)
            except AWS_ERRORS as exc:
                # Kept short of the visibility timeout by the lease timing: the next beat retries.
                log.error(
                    "could not extend the visibility of in-flight messages: %s", describe(exc)
                )
        # Once a store fails, the rest of this beat leaves it alone: behind a dead network each
        # call would wait out its timeouts and hold up the next beat.
        failed: set[str] = set()
        for entry in entries:
            self._renew(entry, "claim", self._dedupe.renew, "claim on message", failed)
            self._renew(entry, "lock", self._locker.renew, "lock", failed)

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
        # Its lease passed unrenewed (an endpoint outage longer than the lease, a frozen host)
        # and another daemon took it over: the job may now run twice.
        log.error(
            "LOST the %s %s of job %s (event %s): its lease passed and another daemon took it "
            "over; the job keeps running here",
            what,
            quote(lease.key),
            entry.job.message_id,
            entry.job.event_id,
        )
