"""One job's path on a worker thread: claim the message, check life_time, lock, run, give back.

Worker.handle says how the job ended and what to do with its message; the daemon loop does it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from sqsjkr.backends.aws import AWS_ERRORS, Backoff, describe, is_transient
from sqsjkr.backends.dedupe import ClaimState, DedupeStore
from sqsjkr.backends.lease import Lease
from sqsjkr.backends.locks import Locker
from sqsjkr.contract.job import Job, is_expired
from sqsjkr.contract.limits import MAX_VISIBILITY_SECONDS
from sqsjkr.daemon.heartbeat import InFlight
from sqsjkr.daemon.runner import JobRunner, RunResult, StopReason, StopSwitch
from sqsjkr.errors import quote
from sqsjkr.observability.stats import Outcome

log = logging.getLogger("sqsjkr.worker")

T = TypeVar("T")


@dataclass(frozen=True)
class Settle:
    """What becomes of a job's message once the worker is done with it."""

    delete: bool = False  # the job finished (succeeded, errored or cancelled)
    visible_in: int | None = None  # make the message visible again in this many seconds
    store_failed: bool = False  # the dedupe store could not be reached

    # Neither delete nor visible_in: leave the message to reappear when its visibility ends.


DELETE = Settle(delete=True)
GIVE_BACK = Settle(visible_in=0)
LEAVE = Settle()

Ending = tuple[Settle, tuple[Outcome, ...]]


@dataclass(frozen=True)
class WorkerSettings:
    life_time_trigger: str | None = None
    lock_retry_interval: float = 5.0
    job_timeout: float | None = None
    #: A message whose job runs elsewhere is hidden until that lease ends plus this margin.
    hide_margin: int = 15


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
    ) -> None:
        self._dedupe = dedupe
        self._locker = locker
        self._runner = runner
        self._stopping = stopping
        self._settings = settings
        self._clock = clock
        self._trigger = trigger

    def handle(self, entry: InFlight) -> Ending:
        job = entry.job
        try:
            claim = self._dedupe.claim(job.message_id)
        except AWS_ERRORS as exc:
            # Not run: unlike the Go daemon, a job that may be a duplicate waits for a later try.
            log.error(
                "job %s (event %s) not started: its dedupe record could not be written (%s); "
                "the message stays on the queue for a later try",
                job.message_id,
                job.event_id,
                describe(exc),
            )
            return Settle(store_failed=True), ()
        if claim.state is ClaimState.FINISHED:
            log.info("duplicate message %s (event %s) deleted", job.message_id, job.event_id)
            return DELETE, (Outcome.DUPLICATE,)
        if claim.state is ClaimState.RUNNING:
            held_for = (claim.held_until or 0) - self._clock()
            hide = int(min(MAX_VISIBILITY_SECONDS, max(1, held_for + self._settings.hide_margin)))
            log.info(
                "message %s (event %s) is in progress on another daemon: hidden for %ds",
                job.message_id,
                job.event_id,
                hide,
            )
            return Settle(visible_in=hide), (Outcome.DUPLICATE,)
        entry.claim = claim.lease
        settle = LEAVE  # should _claimed raise: the claim is given up, the job runs again later
        try:
            settle, outcomes = self._claimed(entry)
        finally:
            lease, entry.claim = entry.claim, None
            if lease is not None:
                self._end_claim(lease, finished=settle.delete)
        return settle, outcomes

    def _claimed(self, entry: InFlight) -> Ending:
        job = entry.job
        if self._expired(entry):
            return DELETE, (Outcome.FAILED,)
        if job.lock_id:
            refused = self._lock(entry)
            if refused is not None:
                return refused
        try:
            return self._run(entry)
        finally:
            self._unlock(entry)

    def _run(self, entry: InFlight) -> Ending:
        job = entry.job
        if self._stopping.is_set():
            log.info("job %s (event %s) not started: stopping", job.message_id, job.event_id)
            return GIVE_BACK, ()
        timeout = job.timeout.seconds if job.timeout is not None else self._settings.job_timeout
        log.info("job %s (event %s) started: %s", job.message_id, job.event_id, job.command)
        result = self._runner.run(job, timeout=timeout, stop=entry.stop)
        if result.stopped is StopReason.CANCELLED:
            log.warning(
                "job %s (event %s) stopped after %.1fs by the shutdown; its message is given "
                "back to run again",
                job.message_id,
                job.event_id,
                result.seconds,
            )
            return GIVE_BACK, ()
        if result.stopped is StopReason.TIMED_OUT:
            log.warning(
                "job %s (event %s) timed out after %.1fs (timeout %gs)",
                job.message_id,
                job.event_id,
                result.seconds,
                timeout,
            )
            return DELETE, (Outcome.ERRORED, Outcome.TIMED_OUT)
        if result.ok:
            log.info(
                "job %s (event %s) succeeded in %.1fs", job.message_id, job.event_id, result.seconds
            )
            return DELETE, (Outcome.SUCCEEDED,)
        log.warning(
            "job %s (event %s) errored with exit code %d after %.1fs",
            job.message_id,
            job.event_id,
            result.exit_code,
            result.seconds,
        )
        return DELETE, (Outcome.ERRORED,)

    def _expired(self, entry: InFlight) -> bool:
        job = entry.job
        now = self._clock()
        if not is_expired(job, now):
            return False
        log.warning(
            "job %s (event %s) cancelled: sent %.1fs ago, life_time is %s",
            job.message_id,
            job.event_id,
            now - job.sent_at,
            job.life_time,
        )
        trigger = self._settings.life_time_trigger
        if trigger and not job.disable_life_time_trigger:
            result = self._trigger(trigger, job, entry.stop)
            if not result.ok:
                log.error("life_time_trigger exited with %d", result.exit_code)
        return True

    def _lock(self, entry: InFlight) -> Ending | None:
        """Wait for the job's lock, re-checking life_time between tries: None once taken."""
        job = entry.job
        assert job.lock_id is not None
        what = f"job {job.message_id} (event {job.event_id})"
        while True:
            if self._stopping.is_set():
                log.info("%s gave up waiting for lock %s: stopping", what, quote(job.lock_id))
                return GIVE_BACK, ()
            try:
                lease = self._locker.try_lock(job.lock_id, job.event_id)
                if lease is not None:
                    entry.lock = lease
                    return None
                if job.abort_if_locked:
                    log.warning("%s aborted: lock %s is held", what, quote(job.lock_id))
                    return DELETE, (Outcome.FAILED,)
                log.info("%s waits for lock %s", what, quote(job.lock_id))
            except AWS_ERRORS as exc:
                if job.abort_if_locked or not is_transient(exc):
                    # Left on the queue: it comes back to be tried again, and a RedrivePolicy
                    # keeps it in the end.
                    log.error(
                        "%s failed: could not take lock %s (%s)",
                        what,
                        quote(job.lock_id),
                        describe(exc),
                    )
                    return LEAVE, (Outcome.FAILED,)
                log.error(
                    "could not take lock %s (%s); retrying", quote(job.lock_id), describe(exc)
                )
            self._stopping.wait(self._settings.lock_retry_interval)
            if self._expired(entry):
                return DELETE, (Outcome.FAILED,)

    def _unlock(self, entry: InFlight) -> None:
        lease, entry.lock = entry.lock, None
        if lease is None:
            return
        what = f"release lock {quote(lease.key)} of job {entry.job.message_id}"
        if self._until_answered(lambda: self._locker.unlock(lease), what) is False:
            log.error(
                "lock %s was no longer ours when job %s released it: its lease had passed "
                "and another daemon took it",
                quote(lease.key),
                entry.job.message_id,
            )

    def _end_claim(self, lease: Lease, *, finished: bool) -> None:
        """Finish or release the claim: a claim left unfinished would let a redelivery of the
        message run the job again once its lease ends."""
        end = self._dedupe.finish if finished else self._dedupe.release
        action = "finish" if finished else "release"
        self._until_answered(
            lambda: end(lease), f"{action} the dedupe record of message {lease.key}"
        )

    def _until_answered(self, call: Callable[[], T], what: str) -> T | None:
        """call, retried while the store is out of reach; None if it never answered. The
        message stays in flight (hidden by the heartbeat) meanwhile. Once stopping, or for an
        error that retrying cannot mend, it gives up: the lease then ends by itself."""
        backoff = Backoff(first=0.5, cap=10.0)
        while True:
            try:
                return call()
            except AWS_ERRORS as exc:
                if not is_transient(exc) or self._stopping.is_set():
                    log.error("could not %s (%s); its lease ends by itself", what, describe(exc))
                    return None
                delay = backoff.next_delay()
                log.error("could not %s (%s); retrying in %.1fs", what, describe(exc), delay)
                self._stopping.wait(delay)
