"""The daemon loop: receive messages while a worker is free, then dedupe, check life_time, lock and run.

Kicker owns its worker threads; the entry point owns signals and only sets the stop event.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from botocore.exceptions import BotoCoreError, ClientError

from .aws import Backoff, describe, is_transient
from .dedupe import DedupeStore
from .errors import InvalidJobError, ResourceMissingError
from .job import Job, is_expired, parse_job
from .locks import Locker
from .runner import JobRunner, RunResult, run_trigger
from .sqs import MAX_BATCH, Message, MessageSource
from .stats import Outcome, Stats

log = logging.getLogger("sqsjkr.daemon")

#: Errors of an AWS call that the loop survives: it logs them and tries again later.
AWS_ERRORS = (BotoCoreError, ClientError, ResourceMissingError)


@dataclass(frozen=True)
class KickerSettings:
    """The knobs of the loop; service.py derives them from the config."""

    max_workers: int = 20
    life_time_trigger: str | None = None
    lock_retry_interval: float = 5.0
    #: After a full receive (a backlog), wait up to this long for a batch's worth of free workers,
    #: so that one ReceiveMessage serves many jobs.
    gather_window: float = 0.5
    #: While there is a backlog, deletes wait up to this long to share a DeleteMessageBatch. A
    #: receive may follow and long-poll, so this plus the poll must stay below the visibility
    #: timeout (a redelivery in between would be caught by dedupe).
    delete_window: float = 10.0


class PendingDeletes:
    """Messages to delete, sent in full DeleteMessageBatch calls or once the oldest has waited."""

    def __init__(self, source: MessageSource, window: float) -> None:
        self._source = source
        self._window = window
        self._messages: list[Message] = []
        self._since = 0.0

    def add(self, messages: Sequence[Message]) -> None:
        if messages and not self._messages:
            self._since = time.monotonic()
        self._messages.extend(messages)

    def flush(self, force: bool = False) -> None:
        """Delete what is pending if a batch is full, the window has passed, or force."""
        if not self._messages:
            return
        waited = time.monotonic() - self._since
        if not force and len(self._messages) < MAX_BATCH and waited < self._window:
            return
        messages, self._messages = self._messages, []
        try:
            self._source.delete(messages)
        except AWS_ERRORS as exc:
            # The jobs ran or run anyway; a redelivery is caught by dedupe.
            log.error("could not delete %d message(s): %s", len(messages), describe(exc))


class Kicker:
    """Takes jobs off a MessageSource and runs at most max_workers of them at once."""

    def __init__(
        self,
        source: MessageSource,
        *,
        dedupe: DedupeStore,
        locker: Locker,
        runner: JobRunner,
        stats: Stats,
        settings: KickerSettings = KickerSettings(),
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        trigger: Callable[[str, Job], RunResult] = run_trigger,
    ) -> None:
        self._source = source
        self._dedupe = dedupe
        self._locker = locker
        self._runner = runner
        self._stats = stats
        self._settings = settings
        self._clock = clock
        self._sleep = sleep
        self._trigger = trigger
        self._free = settings.max_workers
        self._free_changed = threading.Condition()
        self._deletes = PendingDeletes(source, settings.delete_window)

    def run(self, stop: threading.Event) -> None:
        """Receive and run jobs until stop is set, then wait for the running ones to finish."""
        backoff = Backoff()
        with ThreadPoolExecutor(
            max_workers=self._settings.max_workers, thread_name_prefix="sqsjkr-worker"
        ) as pool:
            log.info("receiving with %d workers", self._settings.max_workers)
            backlog = False
            while not stop.is_set():
                # Without a backlog the next receive may long-poll: delete what is pending first.
                self._deletes.flush(force=not backlog)
                free = self._wait_for_free_workers(stop, backlog)
                if not free:
                    continue
                try:
                    messages = self._source.receive(free)
                    backoff.reset()
                    backlog = len(messages) >= free
                except Exception as exc:
                    # Whatever the endpoint did, the loop and the running jobs carry on.
                    delay = backoff.next_delay()
                    log.error(
                        "receive failed (%s); retrying in %.1fs",
                        describe(exc),
                        delay,
                        exc_info=not isinstance(exc, AWS_ERRORS),
                    )
                    stop.wait(delay)
                    continue
                if stop.is_set():
                    self._give_back(messages)
                    break
                for job in self._accept(messages):
                    self._take_worker()
                    pool.submit(self._work, job)
            running = self._settings.max_workers - self._free
            log.info("stopping: no longer receiving; waiting for %d running job(s)", running)
            self._deletes.flush(force=True)
        log.info("stopped")

    # -- intake -----------------------------------------------------------------------------------

    def _wait_for_free_workers(self, stop: threading.Event, backlog: bool) -> int:
        with self._free_changed:
            # The timeout lets the loop notice stop, which a signal handler sets without notifying.
            self._free_changed.wait_for(lambda: self._free > 0 or stop.is_set(), timeout=0.5)
            if backlog and self._free > 0:
                batch = min(MAX_BATCH, self._settings.max_workers)
                self._free_changed.wait_for(
                    lambda: self._free >= batch or stop.is_set(),
                    timeout=self._settings.gather_window,
                )
            return 0 if stop.is_set() else self._free

    def _take_worker(self) -> None:
        with self._free_changed:
            self._free -= 1

    def _give_worker_back(self) -> None:
        with self._free_changed:
            self._free += 1
            self._free_changed.notify()

    def _accept(self, messages: Sequence[Message]) -> list[Job]:
        """Parse messages and delete them all from the queue (the Go daemon's at-most-once)."""
        self._deletes.add(messages)
        jobs = []
        for message in messages:
            if message.receive_count > 1:
                log.info(
                    "message %s delivered again (receive %d)",
                    message.message_id,
                    message.receive_count,
                )
            try:
                jobs.append(
                    parse_job(message.body, message_id=message.message_id, sent_at=message.sent_at)
                )
            except InvalidJobError as exc:
                log.error("invalid message %s deleted: %s", message.message_id, exc)
                self._stats.count(Outcome.FAILED)
        return jobs

    def _give_back(self, messages: Sequence[Message]) -> None:
        if not messages:
            return
        log.info("giving back %d message(s) received while stopping", len(messages))
        try:
            self._source.release(messages)
        except AWS_ERRORS as exc:
            log.error("could not give back messages (%s); they reappear later", describe(exc))

    # -- one job ----------------------------------------------------------------------------------

    def _work(self, job: Job) -> None:
        try:
            self._stats.job_started()
            outcome = self._handle(job)
        except Exception:
            log.exception("job %s (event %s) failed unexpectedly", job.message_id, job.event_id)
            outcome = Outcome.FAILED
        finally:
            self._stats.job_finished()
            self._give_worker_back()
        self._stats.count(outcome)

    def _handle(self, job: Job) -> Outcome:
        if not self._claim(job):
            log.info("duplicate message %s (event %s) skipped", job.message_id, job.event_id)
            return Outcome.DUPLICATE
        if self._expired(job):
            return Outcome.FAILED
        if job.lock_id and not self._lock(job):
            return Outcome.FAILED
        try:
            log.info("job %s (event %s) started: %s", job.message_id, job.event_id, job.command)
            result = self._runner.run(job)
        finally:
            if job.lock_id:
                self._unlock(job)
        if result.ok:
            log.info(
                "job %s (event %s) succeeded in %.1fs", job.message_id, job.event_id, result.seconds
            )
            return Outcome.SUCCEEDED
        log.warning(
            "job %s (event %s) errored with exit code %d after %.1fs",
            job.message_id,
            job.event_id,
            result.exit_code,
            result.seconds,
        )
        return Outcome.ERRORED

    def _claim(self, job: Job) -> bool:
        try:
            return self._dedupe.claim(job.message_id)
        except AWS_ERRORS as exc:
            # As the Go daemon did: a dedupe store that cannot be reached does not stop the job.
            log.error(
                "dedupe record for message %s not written (%s); running it anyway",
                job.message_id,
                describe(exc),
            )
            return True

    def _expired(self, job: Job) -> bool:
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
            result = self._trigger(trigger, job)
            if not result.ok:
                log.error("life_time_trigger exited with %d", result.exit_code)
        return True

    def _lock(self, job: Job) -> bool:
        """Wait for the job's lock, re-checking life_time between tries; False when giving up."""
        assert job.lock_id is not None
        while True:
            try:
                if self._locker.try_lock(job.lock_id, job.event_id):
                    return True
                if job.abort_if_locked:
                    log.warning(
                        "job %s (event %s) aborted: lock %r is held",
                        job.message_id,
                        job.event_id,
                        job.lock_id,
                    )
                    return False
                log.info(
                    "job %s (event %s) waits for lock %r",
                    job.message_id,
                    job.event_id,
                    job.lock_id,
                )
            except AWS_ERRORS as exc:
                if job.abort_if_locked or not is_transient(exc):
                    log.error(
                        "job %s (event %s) failed: could not take lock %r (%s)",
                        job.message_id,
                        job.event_id,
                        job.lock_id,
                        describe(exc),
                    )
                    return False
                log.error("could not take lock %r (%s); retrying", job.lock_id, describe(exc))
            self._sleep(self._settings.lock_retry_interval)
            if self._expired(job):
                return False

    def _unlock(self, job: Job) -> None:
        assert job.lock_id is not None
        try:
            self._locker.unlock(job.lock_id)
        except AWS_ERRORS as exc:
            log.error(
                "could not release lock %r of job %s (%s): it stays held until removed by hand",
                job.lock_id,
                job.message_id,
                describe(exc),
            )
