"""The daemon loop: receive messages while a worker is free, hand each job to a worker, stop cleanly.

Kicker owns its receiver, heartbeat and worker threads; the entry point owns signals and only sets events.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from sqsjkr.backends.aws import AWS_ERRORS, Backoff, describe
from sqsjkr.backends.dedupe import DedupeStore
from sqsjkr.backends.groups import Groups
from sqsjkr.backends.history import History
from sqsjkr.backends.lease import lease_timing
from sqsjkr.backends.locks import Locker
from sqsjkr.backends.pause import PauseStore
from sqsjkr.backends.sqs import MAX_BATCH, Message, MessageSource
from sqsjkr.contract.http_call import LOOPBACK
from sqsjkr.contract.job import Job, parse_job
from sqsjkr.daemon.heartbeat import Heartbeat, InFlight, InFlightJobs
from sqsjkr.daemon.pausing import Pausing, describe_pause
from sqsjkr.daemon.runner import JobRunner, RunResult, StopReason, StopSwitch, run_trigger
from sqsjkr.daemon.runs import LEAVE, Ending, RunListener, Settle
from sqsjkr.daemon.worker import Worker, WorkerSettings
from sqsjkr.errors import InvalidJobError, ReceiverFailed
from sqsjkr.observability.health import Health
from sqsjkr.observability.notify import Notifier, NullNotifier
from sqsjkr.observability.stats import Outcome, Stats

log = logging.getLogger("sqsjkr.daemon")

#: How long a stopping daemon waits for a receive still in its long poll before it exits anyway.
#: A message that such a receive takes reappears when its visibility timeout ends.
RECEIVER_JOIN_SECONDS = 1.0


@dataclass(frozen=True)
class KickerSettings:
    """The knobs of the loop; service.py derives them from the config."""

    max_workers: int = 20
    life_time_trigger: str | None = None
    lock_retry_interval: float = 5.0
    #: After a full receive (a backlog), wait up to this long for a batch's worth of free workers,
    #: so that one ReceiveMessage serves many jobs.
    gather_window: float = 0.5
    #: Deletes wait up to this long to share a DeleteMessageBatch; see service.py for the bound
    #: that keeps a delete ahead of the message's visibility timeout.
    delete_window: float = 10.0
    #: True: delete every message as soon as it is received (the Go daemon's at-most-once).
    delete_on_receive: bool = False
    #: The lease of locks and dedupe claims, and the visibility timeout that in-flight messages
    #: get on receipt and at each heartbeat (lease.lease_timing gives both their relation).
    lease: float = 60.0
    visibility: int = lease_timing(60.0)[1]
    job_timeout: float | None = None
    shutdown_timeout: float | None = None  # None: wait for running jobs without limit
    #: How old the copy of the fleet's pauses may get before it is read again.
    pause_refresh: float = 60.0
    #: URL prefixes HTTP jobs may call ([http] allow); a message naming another is malformed.
    http_allow: tuple[str, ...] = LOOPBACK


class PendingDeletes:
    """Messages to delete, sent in full DeleteMessageBatch calls or once the oldest has waited."""

    def __init__(self, source: MessageSource, window: float) -> None:
        self._source = source
        self._window = window
        self._mutex = threading.Lock()
        self._messages: list[Message] = []
        self._since = 0.0

    def add(self, messages: Sequence[Message]) -> None:
        with self._mutex:
            if messages and not self._messages:
                self._since = time.monotonic()
            self._messages.extend(messages)

    def flush(self, force: bool = False) -> None:
        """Delete what is pending if a batch is full, the window has passed, or force."""
        with self._mutex:
            if not self._messages:
                return
            waited = time.monotonic() - self._since
            if not force and len(self._messages) < MAX_BATCH and waited < self._window:
                return
            messages, self._messages = self._messages, []
        log.debug(
            "deleting %d message(s): %s", len(messages), " ".join(m.message_id for m in messages)
        )
        try:
            self._source.delete(messages)
        except AWS_ERRORS as exc:
            # Their jobs are done and their dedupe records say so: a redelivery is deleted unrun.
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
        trigger: Callable[[str, Job, StopSwitch], RunResult] = run_trigger,
        notifier: Notifier | None = None,
        history: History | None = None,
        listener: RunListener | None = None,
        health: Health | None = None,
        pauses: PauseStore | None = None,
        groups: Groups | None = None,
    ) -> None:
        """history keeps the runs' records (none by default); listener hears of them as they
        start and end (the reporters)."""
        self._source = source
        self._notifier = notifier or NullNotifier()
        self._health = health or Health()
        self._pausing = (
            None
            if pauses is None
            else Pausing(pauses, source, clock=clock, refresh=settings.pause_refresh)
        )
        self._receiver_error: BaseException | None = None
        self._stats = stats
        self._settings = settings
        self._free = settings.max_workers
        self._free_changed = threading.Condition()
        self._deletes = PendingDeletes(source, settings.delete_window)
        self._in_flight = InFlightJobs()
        # Held while received jobs are handed to workers, so that stopping never cuts in halfway.
        self._intake = threading.Lock()
        self._stopping = threading.Event()
        self._pause = _Pause()
        self._heartbeat = Heartbeat(
            self._in_flight,
            source=source,
            dedupe=dedupe,
            locker=locker,
            interval=lease_timing(settings.lease)[0],
            visibility=None if settings.delete_on_receive else settings.visibility,
            flush_deletes=self._deletes.flush,
            lease_lost=stats.lease_lost,
            groups=groups,
        )
        self._worker = Worker(
            dedupe=dedupe,
            locker=locker,
            runner=runner,
            stopping=self._stopping,
            settings=WorkerSettings(
                life_time_trigger=settings.life_time_trigger,
                lock_retry_interval=settings.lock_retry_interval,
                job_timeout=settings.job_timeout,
                hide_margin=max(1, int(settings.visibility - settings.lease)),
                lease=settings.lease,
            ),
            clock=clock,
            trigger=trigger,
            lease_lost=stats.lease_lost,
            history=history,
            listener=listener,
            groups=groups,
        )

    def run(self, stop: threading.Event, force: threading.Event | None = None) -> None:
        """Receive and run jobs until stop is set; then drain (see _drain) and return.

        force, set by a second signal, stops running jobs at once instead of waiting for them.
        """
        force = force or threading.Event()
        beat_stop = threading.Event()
        heartbeat = threading.Thread(
            target=self._heartbeat.run, args=(beat_stop,), name="sqsjkr-heartbeat"
        )
        heartbeat.start()
        try:
            with ThreadPoolExecutor(
                max_workers=self._settings.max_workers, thread_name_prefix="sqsjkr-worker"
            ) as pool:
                # A daemon thread: a long poll cannot be interrupted, and exiting must not wait
                # for it (see RECEIVER_JOIN_SECONDS).
                receiver = threading.Thread(
                    target=self._receive_until_stopped,
                    args=(stop, pool),
                    name="sqsjkr-receiver",
                    daemon=True,
                )
                receiver.start()
                stop.wait()
                self._notifier.stopping()
                self._health.draining()
                # After a hand-over under way, so that the drain sees every job taken before.
                with self._intake:
                    self._stopping.set()
                with self._free_changed:
                    self._free_changed.notify_all()
                self._drain(force)
                receiver.join(RECEIVER_JOIN_SECONDS)
        finally:
            beat_stop.set()
            heartbeat.join()
            self._deletes.flush(force=True)
            if self._pausing is not None:
                self._pausing.give_back()
        if self._receiver_error is not None:
            # A non-zero exit, so that systemd's Restart=on-failure starts a fresh daemon.
            raise ReceiverFailed("the receive loop failed") from self._receiver_error
        log.info("stopped")

    # -- intake -----------------------------------------------------------------------------------

    def _receive_until_stopped(self, stop: threading.Event, pool: ThreadPoolExecutor) -> None:
        try:
            self._receive_loop(stop, pool)
        except BaseException as exc:
            # A bug, not an AWS failure (those are retried): stop the daemon rather than leave
            # it up and receiving nothing.
            log.critical("the receive loop failed; stopping", exc_info=True)
            self._receiver_error = exc
            stop.set()

    def _receive_loop(self, stop: threading.Event, pool: ThreadPoolExecutor) -> None:
        backoff = Backoff()
        log.info("receiving with %d workers", self._settings.max_workers)
        self._notifier.ready()
        self._report_workers()
        backlog = False
        while not stop.is_set():
            # The watchdog hears from the loop only while it turns; outages included, since
            # restarting the daemon would not end them.
            self._health.turned()
            if self._notifier.watchdog_interval is not None:
                self._notifier.watchdog()
            # Without a backlog the next receive may long-poll: delete what is pending first.
            self._deletes.flush(force=not backlog)
            if self._paused(stop):
                continue
            free = self._wait_for_free_workers(stop, backlog)
            if not free or self._pause.wait(stop):
                continue
            try:
                messages = self._source.receive(free)
                log.debug("received %d message(s), asked for at most %d", len(messages), free)
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
            entries = self._accept(messages)
            with self._intake:
                # Whatever a receive returns after the stop request is given back, never started.
                if stop.is_set():
                    self._give_back([entry.message for entry in entries])
                    return
                for entry in entries:
                    self._take_worker()
                    self._in_flight.add(entry)
                    pool.submit(self._work, entry)

    def _paused(self, stop: threading.Event) -> bool:
        """Show held messages whose pause ended; while all events are paused, wait instead of
        receiving (a receive would only spend the messages' receive counts): True if it waited."""
        if self._pausing is None:
            return False
        self._pausing.review()
        pause = self._pausing.paused_all()
        if pause is None:
            return False
        log.info("not receiving: %s", describe_pause(pause))
        stop.wait(max(1.0, self._pausing.next_read_in()))
        return True

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
        self._report_workers()

    def _give_worker_back(self) -> None:
        with self._free_changed:
            self._free += 1
            self._free_changed.notify_all()
        self._report_workers()

    def _report_workers(self) -> None:
        free = self._free
        self._notifier.status(f"busy {self._settings.max_workers - free}, idle {free}")

    def _accept(self, messages: Sequence[Message]) -> list[InFlight]:
        """Parse messages; invalid ones are rejected (dead-lettered or logged) on the spot."""
        accepted = []
        for message in messages:
            if message.receive_count > 1:
                log.info(
                    "message %s delivered again (receive %d)",
                    message.message_id,
                    message.receive_count,
                )
            try:
                job = parse_job(
                    message.body,
                    message_id=message.message_id,
                    sent_at=message.sent_at,
                    http_allow=self._settings.http_allow,
                )
            except InvalidJobError as exc:
                self._stats.invalid()
                self._reject(message, str(exc))
                continue
            accepted.append(InFlight(message, job))
        if self._pausing is not None and accepted:
            held = self._pausing.hold_back([(e.message, e.job.event_id) for e in accepted])
            accepted = [e for e in accepted if e.message.message_id not in held]
        if self._settings.delete_on_receive:
            # At once: a crash between here and a later batch would run these jobs again.
            self._deletes.add([entry.message for entry in accepted])
            self._deletes.flush(force=True)
        return accepted

    def _reject(self, message: Message, reason: str) -> None:
        try:
            self._source.reject(message, reason)
        except AWS_ERRORS as exc:
            # Left on the queue: it comes back, and a RedrivePolicy moves it on in the end.
            log.error(
                "invalid message %s (%s) could not be taken off the queue: %s",
                message.message_id,
                reason,
                describe(exc),
            )

    def _give_back(self, messages: Sequence[Message]) -> None:
        if not messages:
            return
        log.info("giving back %d message(s) received while stopping", len(messages))
        self._set_visibility(messages, 0)

    def _set_visibility(self, messages: Sequence[Message], seconds: int) -> None:
        try:
            self._source.set_visibility(messages, seconds)
        except AWS_ERRORS as exc:
            log.error(
                "could not change the visibility of message(s) %s (%s); they reappear when "
                "their visibility timeout ends",
                ", ".join(m.message_id for m in messages),
                describe(exc),
            )

    # -- one job ----------------------------------------------------------------------------------

    def _work(self, entry: InFlight) -> None:
        self._stats.job_started()
        # Should handle() fail, the message is left to reappear: its job runs again.
        ending = Ending(LEAVE, (Outcome.FAILED,))
        try:
            ending = self._worker.handle(entry)
        except Exception:
            log.exception(
                "job %s (event %s) failed unexpectedly", entry.job.message_id, entry.job.event_id
            )
        finally:
            # Out of the heartbeat's set before settling, or a beat could hide it again.
            self._in_flight.discard(entry)
            try:
                self._settle(entry, ending.settle)
            finally:
                self._stats.job_finished()
                self._give_worker_back()
        if ending.settle.pause_intake:
            self._pause.fail()
        else:
            self._pause.reset()
        for outcome in ending.counts:
            self._stats.count(outcome)

    def _settle(self, entry: InFlight, settle: Settle) -> None:
        """Do with the message what the job's end asks for."""
        if self._settings.delete_on_receive:
            return  # deleted when received
        if settle.delete:
            self._deletes.add([entry.message])
        elif settle.visible_in is not None:
            # A beat under way may still be hiding this message: let it finish first.
            with self._heartbeat.hiding:
                self._set_visibility([entry.message], settle.visible_in)

    # -- stopping ---------------------------------------------------------------------------------

    def _drain(self, force: threading.Event) -> None:
        """Wait for in-flight jobs up to shutdown_timeout, or until force; then stop them.

        Jobs still waiting for a lock give their messages back at once. Stopped jobs release their
        locks and give their messages back, for a re-run elsewhere.
        """
        timeout = self._settings.shutdown_timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        running = len(self._in_flight.snapshot())
        log.info("stopping: no longer receiving; waiting for %d in-flight job(s)", running)
        while not self._in_flight.wait_empty(0.5):
            # Jobs that finish while others drain must still be deleted in time.
            self._deletes.flush()
            if force.is_set() or (deadline is not None and time.monotonic() >= deadline):
                break
        left = self._in_flight.snapshot()
        if not left:
            return
        why = "a second signal" if force.is_set() else f"shutdown_timeout ({timeout:g}s)"
        log.warning("%s: stopping %d running job(s)", why, len(left))
        for entry in left:
            entry.stop.trip(StopReason.CANCELLED)
        self._in_flight.wait_empty(None)


class _Pause:
    """Holds back receiving while the dedupe store or the host fails: a message that cannot be
    claimed or started is left to reappear, and receiving more would only spend receive counts."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._backoff = Backoff()
        self._until = 0.0

    def fail(self) -> None:
        with self._mutex:
            self._until = time.monotonic() + self._backoff.next_delay()

    def reset(self) -> None:
        with self._mutex:
            self._backoff.reset()
            self._until = 0.0

    def wait(self, stop: threading.Event) -> bool:
        """Sleep out a pause, if any; True if it slept (the caller looks again before receiving)."""
        with self._mutex:
            left = self._until - time.monotonic()
        if left <= 0:
            return False
        log.info("receiving paused for %.1fs: jobs could not be claimed or started", left)
        stop.wait(left)
        return True
