"""Keeping a job's leases (claim, lock, group slot): fresh enough to start on, and given back.

Shared by taking a job's holds (daemon/holds.py) and closing its run (daemon/closing.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

from sqsjkr.backends.aws import AWS_ERRORS, Backoff, describe, is_transient
from sqsjkr.backends.lease import FRESH_LEASE_SHARE, Lease
from sqsjkr.errors import StoreTooSlow, quote
from sqsjkr.observability.logs import JobLog

T = TypeVar("T")

#: Renewals tried to bring a stale lease back to a fresh share before the store counts as too
#: slow to hold one.
FRESHEN_TRIES = 3


class LeaseKeeper:
    """Renews, releases and reports the loss of one daemon's leases; safe from many threads."""

    def __init__(
        self,
        *,
        lease: float,
        stopping: threading.Event,
        clock: Callable[[], float],
        lease_lost: Callable[[], None],
    ) -> None:
        """lease: the length of every lease; lease_lost counts one lost (for the metrics)."""
        self._lease = lease
        self._stopping = stopping
        self._clock = clock
        self._lease_lost = lease_lost

    def fresh(self, lease: Lease, renew: Callable[[Lease], bool], what: str, jlog: JobLog) -> bool:
        """Whether lease has FRESH_LEASE_SHARE of its length left, renewing it if not: a slow
        write can leave a lease nearly spent by the time it returns, and the job must not start
        on it. False if it was lost (logged and counted); AWS errors and StoreTooSlow raise."""
        needed = self._lease * FRESH_LEASE_SHARE
        left = lease.until - self._clock()
        for _ in range(FRESHEN_TRIES):
            if left >= needed:
                return True
            jlog.info(
                "%s %s has %.1fs of its lease left: renewing it first", what, quote(lease.key), left
            )
            started = self._clock()
            if not renew(lease):
                self.lost(what, lease, jlog)
                return False
            left = started + self._lease - self._clock()
        raise StoreTooSlow(
            f"the {what} {quote(lease.key)} cannot be renewed to {needed:.1f}s of lease: each "
            "renewal takes too long"
        )

    def release(
        self, lease: Lease, release: Callable[[Lease], bool], what: str, jlog: JobLog
    ) -> None:
        action = f"release its {what} {quote(lease.key)}"
        answered, ours = self.until_answered(lambda: release(lease), action, jlog)
        if answered and not ours:
            self.lost(what, lease, jlog)

    def lost(self, what: str, lease: Lease, jlog: JobLog) -> None:
        # Its lease passed unrenewed (an endpoint outage, a frozen host, a slow write) and
        # another daemon took it over: the job may have run twice.
        self._lease_lost()
        jlog.error(
            "LOST its %s %s: its lease had passed and another daemon took it over",
            what,
            quote(lease.key),
        )

    def until_answered(
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
