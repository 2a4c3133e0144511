"""One queue's receive loop: receive while its workers are free, parse, and hand the jobs over.

The Kicker starts a Receiver per queue, which runs its loop and its deletes on threads of their own.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqsjkr.backends.aws import AWS_ERRORS, Backoff, describe
from sqsjkr.backends.routes import FORWARDED_FROM_ATTRIBUTE, without_forward
from sqsjkr.backends.sqs import Message
from sqsjkr.contract.firing import check_firing_sent
from sqsjkr.contract.job import parse_job
from sqsjkr.daemon.fifo import behind_held
from sqsjkr.daemon.heartbeat import InFlight
from sqsjkr.daemon.intake import Intake
from sqsjkr.daemon.pausing import describe_pause
from sqsjkr.errors import InvalidJobError, quote
from sqsjkr.observability.health import Health
from sqsjkr.observability.notify import Notifier
from sqsjkr.observability.stats import Stats

log = logging.getLogger("sqsjkr.daemon")


@dataclass(frozen=True)
class Daemon:
    """What every queue's Receiver shares: the daemon's health, notifier, stats and hold-off."""

    health: Health
    notifier: Notifier
    stats: Stats
    hold_off: HoldOff
    #: URL prefixes HTTP jobs may call; a message naming another is malformed.
    http_allow: tuple[str, ...]


#: Hands accepted jobs to workers: False if stop is set (they were given back instead).
HandOver = Callable[[Intake, list[InFlight], threading.Event], bool]


class Receiver:
    """Receives from one queue until stopped, and sends its finished jobs' deletes when due until
    joined (a drain's jobs finish after the stop); a failure of its own stops the whole daemon."""

    def __init__(self, intake: Intake, daemon: Daemon, hand_over: HandOver, *, name_queue: bool):
        """name_queue: say which queue in the log (the daemon has several)."""
        self._intake = intake
        self._daemon = daemon
        self._hand_over = hand_over
        self._where = f" from queue {intake.name}" if name_queue else ""
        self._thread: threading.Thread | None = None
        self._deleter: threading.Thread | None = None
        #: Ends the deleter; set by join, once the drain has no more deletes to add.
        self._closing = threading.Event()
        #: What ended the loop other than a stop: a bug, since AWS failures are retried.
        self.error: BaseException | None = None

    def start(self, stop: threading.Event) -> None:
        # Daemon threads: a long poll (or a delete) cannot be interrupted, and exiting must not
        # wait for it (see join's timeout).
        name = self._intake.name
        suffix = f"-{name}" if name else ""
        self._thread = threading.Thread(
            target=self._until_stopped,
            args=(stop,),
            name=f"sqsjkr-receiver{suffix}",
            daemon=True,
        )
        # Not the receive loop's: it may be long-polling when a job's message falls due.
        self._deleter = threading.Thread(
            target=self._intake.deletes.send_when_due,
            args=(self._closing,),
            name=f"sqsjkr-deletes{suffix}",
            daemon=True,
        )
        self._thread.start()
        self._deleter.start()

    def join(self, timeout: float) -> None:
        """Stop the deleter (the Kicker sends what is left) and wait up to timeout for both."""
        self._closing.set()
        self._intake.deletes.wake()
        deadline = time.monotonic() + timeout
        for thread in (self._thread, self._deleter):
            if thread is not None:
                thread.join(max(0.0, deadline - time.monotonic()))

    def _until_stopped(self, stop: threading.Event) -> None:
        try:
            self._loop(stop)
        except BaseException as exc:
            # A bug, not an AWS failure (those are retried): stop the daemon rather than leave
            # it up and receiving nothing.
            log.critical("the receive loop failed; stopping", exc_info=True)
            self.error = exc
            stop.set()

    def _loop(self, stop: threading.Event) -> None:
        intake, daemon = self._intake, self._daemon
        backoff = Backoff()
        log.info("receiving with %d workers%s", intake.settings.max_workers, self._where)
        backlog = False
        while not stop.is_set():
            # The watchdog hears from the loop only while it turns; outages included, since
            # restarting the daemon would not end them.
            daemon.health.turned()
            if daemon.notifier.watchdog_interval is not None:
                daemon.notifier.watchdog()
            # Without a backlog the next receive may long-poll: delete what is pending first.
            intake.deletes.flush(force=not backlog)
            if self._paused(stop):
                continue
            free = intake.wait_for_free(stop, backlog)
            if not free or daemon.hold_off.wait(stop):
                continue
            try:
                asked_at = time.monotonic()
                messages = intake.source.receive(free)
                log.debug("received %d message(s), asked for at most %d", len(messages), free)
                backoff.reset()
                backlog = len(messages) >= free
            except Exception as exc:
                intake.received(False)
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
            intake.received(backlog)
            if not messages:
                # As before a long poll: what is done is deleted before the wait.
                intake.deletes.flush(force=True)
                stop.wait(intake.settings.idle_pause(time.monotonic() - asked_at))
                continue
            if not self._hand_over(intake, self._accept(messages), stop):
                return

    def _paused(self, stop: threading.Event) -> bool:
        """Show held messages whose pause ended; while all events are paused, wait instead of
        receiving (a receive would only spend the messages' receive counts): True if it waited."""
        pausing = self._intake.pausing
        if pausing is None:
            return False
        pausing.review()
        pause = pausing.paused_all()
        if pause is None:
            return False
        log.info("not receiving: %s", describe_pause(pause))
        stop.wait(max(1.0, pausing.next_read_in()))
        return True

    def _accept(self, messages: Sequence[Message]) -> list[InFlight]:
        """Parse messages; invalid ones are rejected (dead-lettered or logged) on the spot."""
        intake = self._intake
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
                    http_allow=self._daemon.http_allow,
                )
                if job.firing is not None:
                    check_firing_sent(job.firing, message.sent_at)
            except InvalidJobError as exc:
                self._daemon.stats.invalid(intake.name)
                intake.reject(message, str(exc))
                continue
            message = self._honoured(message, job.event_id)
            accepted.append(InFlight(message, job, queue=intake.name))
        if accepted:
            accepted = self._steer(accepted)
        if intake.settings.delete_on_receive:
            # At once: a crash between here and a later batch would run these jobs again.
            intake.deletes.add([entry.message for entry in accepted])
            intake.deletes.flush(force=True)
        return accepted

    def _honoured(self, message: Message, event_id: str) -> Message:
        """A forward is honoured only where a route forward arrives: on the queue its event is
        routed to. Elsewhere the attribute is a sender's, who could name another message's id
        and so make that message's run a duplicate of its own: the job goes by its own id."""
        if FORWARDED_FROM_ATTRIBUTE not in message.attributes:
            return message
        routing = self._intake.routing
        if routing is not None and routing.routed_here(event_id):
            return message
        log.warning(
            "message %s names a forward (%s) but event %s is not routed to queue %s: its job "
            "goes by its own id",
            message.message_id,
            FORWARDED_FROM_ATTRIBUTE,
            quote(event_id),
            self._intake.name,
        )
        return without_forward(message)

    def _steer(self, accepted: list[InFlight]) -> list[InFlight]:
        """Forward the messages of events routed to another queue, hold back those of paused
        events; the rest, which may run here."""
        intake = self._intake
        received = [(e.message, e.job.event_id) for e in accepted]
        taken: set[str] = set()
        if intake.routing is not None:
            rerouted = intake.routing.reroute(received)
            taken = rerouted.taken
            if rerouted.forwarded:
                # Sent on already: deleted now, so that a crash does not send them twice.
                intake.deletes.add(rerouted.forwarded)
                intake.deletes.flush(force=True)
        if intake.pausing is not None:
            taken |= intake.pausing.hold_back([r for r in received if r[0].message_id not in taken])
        # A FIFO group's later messages must not run before its held or forwarded one.
        accepted, behind = behind_held(accepted, taken)
        intake.set_visibility([e.message for e in behind], 0)
        return accepted


class HoldOff:
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
        """Sleep out a hold-off, if any; True if it slept (the caller looks again before
        receiving)."""
        with self._mutex:
            left = self._until - time.monotonic()
        if left <= 0:
            return False
        log.info("receiving paused for %.1fs: jobs could not be claimed or started", left)
        stop.wait(left)
        return True
