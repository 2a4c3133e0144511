"""The daemon loop: receive from each queue while its workers are free, run its jobs, stop cleanly.

Kicker owns its receivers, heartbeat and worker threads; the entry point owns signals and only sets events.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass

from sqsjkr.backends.dedupe import DedupeStore
from sqsjkr.backends.fleet import ControlStore
from sqsjkr.backends.groups import Groups
from sqsjkr.backends.history import History
from sqsjkr.backends.lease import lease_timing
from sqsjkr.backends.locks import Locker
from sqsjkr.backends.pipeline import PipelineStore
from sqsjkr.backends.sqs import Message, MessageSource
from sqsjkr.contract.http_call import LOOPBACK
from sqsjkr.contract.job import Job
from sqsjkr.daemon.ahead import LateNotes, plain
from sqsjkr.daemon.closing import ClosingRun, EndsBehind
from sqsjkr.daemon.controls import ControlsCopy
from sqsjkr.daemon.heartbeat import Heartbeat, InFlight, InFlightJobs
from sqsjkr.daemon.holds import LocksWanted
from sqsjkr.daemon.intake import Intake, IntakeSettings
from sqsjkr.daemon.pausing import Pausing
from sqsjkr.daemon.pipeline import Steps, StepSender
from sqsjkr.daemon.receiving import Daemon, HoldOff, Receiver
from sqsjkr.daemon.routing import Forwarder, Routing
from sqsjkr.daemon.runner import JobRunner, RunResult, StopReason, StopSwitch, run_trigger
from sqsjkr.daemon.runs import GIVE_BACK, LEAVE, Ending, RunListener, Settle
from sqsjkr.daemon.worker import Worker, WorkerSettings
from sqsjkr.errors import ReceiverFailed
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

    #: The queue's own settings when the Kicker is given a bare MessageSource.
    queue: IntakeSettings = IntakeSettings()
    life_time_trigger: str | None = None
    lock_retry_interval: float = 5.0
    #: The lease of locks and dedupe claims (lease.lease_timing relates it to the visibility).
    lease: float = 60.0
    job_timeout: float | None = None
    shutdown_timeout: float | None = None  # None: wait for running jobs without limit
    #: How old the copy of the fleet's pauses and routes may get before it is read again.
    pause_refresh: float = 60.0
    #: URL prefixes HTTP jobs may call ([http] allow); a message naming another is malformed.
    http_allow: tuple[str, ...] = LOOPBACK


#: A queue to receive from, with its own settings.
QueueSource = tuple[MessageSource, IntakeSettings]


class Kicker:
    """Takes jobs off each queue and runs at most its max_workers of them at once."""

    def __init__(
        self,
        queues: MessageSource | Sequence[QueueSource],
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
        controls: ControlStore | None = None,
        forwarder: Forwarder | None = None,
        groups: Groups | None = None,
        pipelines: PipelineStore | None = None,
        step_sender: StepSender | None = None,
    ) -> None:
        """queues: one MessageSource (with settings.queue), or each queue with its own settings;
        history keeps the runs' records (none by default); listener hears of them as they start
        and end (the reporters); controls holds the fleet's pauses and routes, and forwarder
        sends routed messages on (no routing without it); pipelines keeps the state of each run
        of a pipeline and step_sender sends its next steps (without both: ignored)."""
        if not isinstance(queues, Sequence):
            queues = [(queues, settings.queue)]
        self._notifier = notifier or NullNotifier()
        self._health = health or Health()
        self._stats = stats
        self._settings = settings
        self._in_flight = InFlightJobs()
        # Held while received jobs are handed to workers, so that stopping never cuts in halfway.
        self._intake_lock = threading.Lock()
        self._stopping = threading.Event()
        self._hold_off = HoldOff()

        worker = functools.partial(
            Worker,
            dedupe=dedupe,
            locker=locker,
            runner=runner,
            stopping=self._stopping,
            clock=clock,
            trigger=trigger,
            lease_lost=stats.lease_lost,
            history=history,
            listener=listener,
            groups=groups,
            locks_wanted=LocksWanted(),
            ends_behind=EndsBehind(),
        )
        self._intakes = {}
        for source, queue in queues:
            steps = None
            if pipelines is not None and step_sender is not None:
                steps = Steps(pipelines, step_sender, queue.name, clock)
            settled = self._worker_settings(queue)
            intake = Intake(source, queue, worker(settings=settled, steps=steps), None)
            if controls is not None:
                # One copy for both: routes cost no read more than the pauses do.
                copy = ControlsCopy(controls, clock=clock, refresh=settings.pause_refresh)
                intake.pausing = Pausing(copy, source, clock=clock)
                if forwarder is not None:
                    intake.routing = Routing(copy, queue.name, forwarder)
            self._intakes[queue.name] = intake
        self._heartbeat = Heartbeat(
            self._in_flight,
            hide=self._hide,
            dedupe=dedupe,
            locker=locker,
            interval=lease_timing(settings.lease)[0],
            flush_deletes=self._flush_deletes,
            lease_lost=stats.lease_lost,
            groups=groups,
        )

    def _worker_settings(self, queue: IntakeSettings) -> WorkerSettings:
        """The settings of one queue's worker: its visibility and RedrivePolicy are its own."""
        settings = self._settings
        return WorkerSettings(
            life_time_trigger=settings.life_time_trigger,
            lock_retry_interval=settings.lock_retry_interval,
            job_timeout=settings.job_timeout,
            hide_margin=max(1, int(queue.visibility - settings.lease)),
            lease=settings.lease,
            max_receive_count=queue.max_receive_count,
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
            with ExitStack() as pools:
                receivers = [self._receiver(intake, pools) for intake in self._intakes.values()]
                for receiver in receivers:
                    receiver.start(stop)
                self._notifier.ready()
                self._report_workers()
                stop.wait()
                self._notifier.stopping()
                self._health.draining()
                # After a hand-over under way, so that the drain sees every job taken before.
                with self._intake_lock:
                    self._stopping.set()
                for intake in self._intakes.values():
                    self._give_back_waiting(intake, intake.order.drain())
                    intake.wake()
                self._drain(force)
                for receiver in receivers:
                    receiver.join(RECEIVER_JOIN_SECONDS)
        finally:
            beat_stop.set()
            heartbeat.join()
            for intake in self._intakes.values():
                intake.deletes.flush(force=True)
                if intake.pausing is not None:
                    intake.pausing.give_back()
        errors = [receiver.error for receiver in receivers if receiver.error is not None]
        if errors:
            # A non-zero exit, so that systemd's Restart=on-failure starts a fresh daemon.
            raise ReceiverFailed("the receive loop failed") from errors[0]
        log.info("stopped")

    def _receiver(self, intake: Intake, pools: ExitStack) -> Receiver:
        """intake's receive loop, handing its jobs to a pool of its max_workers threads."""
        prefix = f"sqsjkr-worker-{intake.name}" if intake.name else "sqsjkr-worker"
        workers = intake.settings.max_workers
        # Entered first, so shut down last: a worker's last job may still hand its end over.
        # As many as jobs may be in flight: ends lingering for the next claim wait side by
        # side, so that one call carries them all (one closer would hold each in turn).
        closers = pools.enter_context(
            ThreadPoolExecutor(max_workers=intake.capacity, thread_name_prefix=f"{prefix}-close")
        )
        # Left after the workers, whose runs have ended their notes, and before the closers.
        notes = pools.enter_context(LateNotes(closers.submit))
        pool = pools.enter_context(
            ThreadPoolExecutor(max_workers=workers, thread_name_prefix=prefix)
        )
        daemon = Daemon(
            self._health, self._notifier, self._stats, self._hold_off, self._settings.http_allow
        )
        return Receiver(
            intake,
            daemon,
            functools.partial(self._hand_over, pool=pool, closers=closers, notes=notes),
            name_queue=len(self._intakes) > 1,
        )

    def _hand_over(
        self,
        intake: Intake,
        entries: list[InFlight],
        stop: threading.Event,
        *,
        pool: ThreadPoolExecutor,
        closers: ThreadPoolExecutor,
        notes: LateNotes,
    ) -> bool:
        """Start entries' jobs on pool's workers, in their FIFO order, their ends written on
        closers' threads (notes: where plain runs are noted late): False if stopping."""
        with self._intake_lock:
            # Whatever a receive returns after the stop request is given back, never started.
            if stop.is_set():
                intake.give_back([entry.message for entry in entries])
                return False
            for entry in entries:
                # Kept hidden by the heartbeat, even while it waits behind its FIFO group.
                self._in_flight.add(entry)
            admitted = intake.order.admit(entries)
            for entry in admitted:
                intake.take(entry)
        # The receive's plain jobs are claimed together, in one call, before their workers take
        # them up: a worker never waits for its claim, nor is woken by it. Should the daemon
        # stop meanwhile, the drain waits for them, and each worker gives its job back.
        plain_ones = [entry for entry in entries if plain(entry.message, entry.job)]
        try:
            if plain_ones:
                intake.worker.claim_ahead(plain_ones)
        finally:  # taken and in flight: the drain waits for them
            for entry in admitted:
                future = pool.submit(self._work, intake, entry, closers, notes)
                future.add_done_callback(_log_failure)
        self._report_workers()
        return True

    def _report_workers(self) -> None:
        busy = self._stats.busy
        self._notifier.status(f"busy {busy}, idle {self._stats.workers - busy}")

    # -- what the heartbeat does for each queue ---------------------------------------------------

    def _hide(self, entries: list[InFlight]) -> None:
        by_queue: dict[str, list[Message]] = {}
        for entry in entries:
            by_queue.setdefault(entry.queue, []).append(entry.message)
        for name, messages in by_queue.items():
            self._intakes[name].hide(messages)

    def _flush_deletes(self) -> None:
        for intake in self._intakes.values():
            intake.deletes.flush()

    # -- one job ----------------------------------------------------------------------------------

    def _work(
        self, intake: Intake, entry: InFlight, closers: ThreadPoolExecutor, notes: LateNotes
    ) -> None:
        """Run entry's job, then on the same worker each message of its FIFO group that waited
        behind it on this host, in order. The worker is free once a run ends: its end is
        written on closers' threads (close behind), its message settled after that."""
        following: InFlight | None = entry
        try:
            while following is not None:
                following = self._work_one(intake, following, closers, notes)
        finally:
            intake.give_back_slot()
            self._report_workers()

    def _work_one(
        self, intake: Intake, entry: InFlight, closers: ThreadPoolExecutor, notes: LateNotes
    ) -> InFlight | None:
        """Run one job and settle its message (or leave both to closers); the next of its
        message group, if any."""
        self._stats.job_started(intake.name)
        intake.started(entry)
        # Should handle() fail, the message is left to reappear: its job runs again.
        ending = Ending(LEAVE, (Outcome.FAILED,))
        behind = False
        following = None
        try:
            # A prefetched job whose turn came after the stop is given back, not even claimed.
            if self._stopping.is_set():
                intake.worker.give_back(entry)
                ending = Ending(GIVE_BACK)
            elif entry.message.group_id is not None:
                # A FIFO group's next message starts only once this one's is settled.
                ending = intake.worker.handle(entry)
            else:
                started = intake.worker.start(entry, notes)
                if isinstance(started, ClosingRun):
                    # Behind only when a next claim is sure to come at once, for the end to
                    # ride its call: else the end goes alone, and the worker writing it itself
                    # spares two thread hand-offs (a closer woken, then woken by its answer).
                    coming = intake.claims_coming()
                    behind = coming and self._close_behind(intake, entry, started, closers)
                    if behind:
                        # No longer busy: its worker takes the next job.
                        self._stats.job_finished(intake.name)
                    else:
                        ending = started.finish(False)
                else:
                    ending = started
        except Exception:
            log.exception(
                "job %s (event %s) failed unexpectedly", entry.job.message_id, entry.job.event_id
            )
        finally:
            if not behind:
                following = self._settled(intake, entry, ending)
        return following

    def _close_behind(
        self, intake: Intake, entry: InFlight, closing: ClosingRun, closers: ThreadPoolExecutor
    ) -> bool:
        """Hand closing to closers: True, or False if they no longer take work (the caller
        finishes it itself)."""

        def close() -> None:
            ending = Ending(LEAVE, (Outcome.FAILED,))
            try:
                # Lingering for a next claim only when one is still sure to come at once (a
                # stop gives the prefetched back): else its call's shape does not vary by timing.
                ending = closing.finish(intake.claims_coming())
            except Exception:
                log.exception(
                    "job %s (event %s) failed unexpectedly at its end",
                    entry.job.message_id,
                    entry.job.event_id,
                )
            finally:
                self._settled(intake, entry, ending, busy=False)

        try:
            closers.submit(close).add_done_callback(_log_failure)
        except RuntimeError:  # shut down: only after the drain, when no job is left to run
            return False
        return True

    def _settled(
        self, intake: Intake, entry: InFlight, ending: Ending, *, busy: bool = True
    ) -> InFlight | None:
        """Do with entry's message what its ending asks and count it (busy: its worker is
        still counted busy with it); the next of its message group, if any."""
        try:
            # Out of the heartbeat's set before settling, or a beat could hide it again.
            self._in_flight.discard(entry)
            self._settle(intake, entry, ending.settle)
        finally:
            if busy:
                self._stats.job_finished(intake.name)
        if ending.settle.pause_intake:
            self._hold_off.fail()
        else:
            self._hold_off.reset()
        if ending.run is not None:
            self._stats.ran(ending.run, intake.name)
        for outcome in ending.counts:
            self._stats.count(outcome, intake.name)
        if ending.settle.removed or intake.settings.delete_on_receive:
            return intake.order.finished(entry)
        # It runs again later: what waits behind it must not run first.
        self._give_back_waiting(intake, intake.order.given_back(entry))
        return None

    def _give_back_waiting(self, intake: Intake, entries: Sequence[InFlight]) -> None:
        """Messages that waited behind another of their FIFO group go back to the queue, which
        hands them out again after it."""
        if not entries:
            return
        for entry in entries:
            self._in_flight.discard(entry)
        log.info(
            "giving back %d message(s) that waited behind another of their message group",
            len(entries),
        )
        intake.set_visibility([entry.message for entry in entries], 0)

    def _settle(self, intake: Intake, entry: InFlight, settle: Settle) -> None:
        """Do with the message what the job's end asks for."""
        if intake.settings.delete_on_receive:
            return  # deleted when received
        if settle.delete:
            intake.deletes.add([entry.message])
        elif settle.reject is not None:
            intake.reject(entry.message, settle.reject)
        elif settle.visible_in is not None:
            # A beat under way may still be hiding this message: let it finish first.
            with self._heartbeat.hiding:
                intake.set_visibility([entry.message], settle.visible_in)

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
            self._flush_deletes()
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


def _log_failure(future: Future[None]) -> None:
    """A pool's work that raised (a bug: each job's own failures are caught and logged), a
    worker's or a closer's, which would otherwise go unseen."""
    error = future.exception()
    if error is not None:
        log.critical("a worker failed", exc_info=error)
