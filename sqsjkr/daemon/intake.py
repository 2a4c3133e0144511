"""One queue's intake: its source, workers and pending deletes, the pauses and the routes it honours.

The Kicker (loop.py) owns one per queue and shares the heartbeat, the stores and the drain among them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from sqsjkr.backends.aws import AWS_ERRORS, describe
from sqsjkr.backends.lease import lease_timing
from sqsjkr.backends.sqs import MAX_BATCH, Message, MessageSource
from sqsjkr.daemon.fifo import GroupOrder
from sqsjkr.daemon.heartbeat import InFlight
from sqsjkr.daemon.pausing import Pausing
from sqsjkr.daemon.routing import Routing
from sqsjkr.daemon.worker import Worker

log = logging.getLogger("sqsjkr.daemon")

#: The shortest time from one empty receive of a queue to its next: an idle daemon makes at most
#: one (billed) ReceiveMessage a second per queue, whatever its wait or its endpoint.
MIN_EMPTY_RECEIVE_SECONDS = 1.0


@dataclass(frozen=True)
class IntakeSettings:
    """The knobs of one queue; service.py derives them from its [sqs] or [[queues]] table."""

    name: str = ""  # the queue's name, for logs and per-queue figures
    max_workers: int = 20
    #: Messages received beyond the free workers, kept in flight (hidden by the heartbeat) until
    #: a worker is free: fewer receives for hosts with few workers, less work for other hosts.
    prefetch: int = 0
    #: After a full receive (a backlog), wait up to this long for a batch's worth of free workers,
    #: so that one ReceiveMessage serves many jobs.
    gather_window: float = 0.5
    #: Deletes wait up to this long to share a DeleteMessageBatch; see service.py for the bound
    #: that keeps a delete ahead of the message's visibility timeout.
    delete_window: float = 10.0
    #: True: delete every message as soon as it is received (the Go daemon's at-most-once).
    delete_on_receive: bool = False
    #: The visibility timeout in-flight messages get on receipt and at each heartbeat.
    visibility: int = lease_timing(60.0)[1]
    #: The queue's RedrivePolicy maxReceiveCount: past it, SQS dead-letters instead of delivering.
    max_receive_count: int | None = None
    #: The long poll each receive asks for ([sqs] wait_time_seconds).
    wait_time_seconds: int = 20

    def idle_pause(self, took: float) -> float:
        """How long to wait after an empty receive that took `took` seconds: the rest of its long
        poll (which wait_time_seconds = 0, or an endpoint that ignores it, cuts short), and of
        MIN_EMPTY_RECEIVE_SECONDS."""
        return max(0.0, max(MIN_EMPTY_RECEIVE_SECONDS, self.wait_time_seconds) - took)


class PendingDeletes:
    """Messages to delete, sent in full DeleteMessageBatch calls or once the oldest has waited
    the window: by the receive loop before it long-polls (flush), and by a thread of their own
    (send_when_due) that keeps the window whatever that loop waits for. A full batch goes
    without the few that came in behind it: they wait for the next, not a call of their own."""

    def __init__(self, source: MessageSource, window: float) -> None:
        self._source = source
        self._window = window
        #: add() and wake() notify it: a first message sets the deadline, a full batch is due.
        self._changed = threading.Condition()
        self._messages: list[Message] = []
        self._since = 0.0

    def add(self, messages: Sequence[Message]) -> None:
        with self._changed:
            first = bool(messages) and not self._messages
            if first:
                self._since = time.monotonic()
            self._messages.extend(messages)
            # send_when_due's wait changes only with a first message (its deadline) or a full
            # batch (due now): every other delete would wake it for nothing, once a job.
            if first or len(self._messages) >= MAX_BATCH:
                self._changed.notify_all()

    def flush(self, force: bool = False) -> None:
        """Delete what is pending if a batch is full, the window has passed, or force."""
        with self._changed:
            messages = self._take(force)
        self._delete(messages)

    def send_when_due(self, stop: threading.Event) -> None:
        """Delete each batch as soon as it is due, until stop is set and wake() called: a
        message waits at most the window, even while the receive loop sits in a long poll."""
        while True:
            with self._changed:
                # Under the lock: a wake() after stop was set cannot slip in before the wait.
                if stop.is_set():
                    return
                due = self._due_in()
                if due != 0:
                    self._changed.wait(due)
                    continue
                messages = self._take(force=False)
            self._delete(messages)

    def wake(self) -> None:
        """Let send_when_due look at its stop event now."""
        with self._changed:
            self._changed.notify_all()

    def _due_in(self) -> float | None:
        """Seconds until the pending batch is due (0: now); None with nothing pending."""
        if not self._messages:
            return None
        if len(self._messages) >= MAX_BATCH:
            return 0.0
        return max(0.0, self._since + self._window - time.monotonic())

    def _take(self, force: bool) -> list[Message]:
        """What is due: everything once the window has passed (or force), else whole batches."""
        due = self._due_in()
        if due is None or (due > 0 and not force):
            return []
        if force or time.monotonic() >= self._since + self._window:
            messages, self._messages = self._messages, []
        else:
            # Those left keep the oldest's deadline: sent no later than their own window.
            whole = len(self._messages) - len(self._messages) % MAX_BATCH
            messages, self._messages = self._messages[:whole], self._messages[whole:]
        return messages

    def _delete(self, messages: Sequence[Message]) -> None:
        if not messages:
            return
        log.debug(
            "deleting %d message(s): %s", len(messages), " ".join(m.message_id for m in messages)
        )
        try:
            self._source.delete(messages)
        except AWS_ERRORS as exc:
            # Their jobs are done and their dedupe records say so: a redelivery is deleted unrun.
            log.error("could not delete %d message(s): %s", len(messages), describe(exc))


class Intake:
    """One queue as the daemon works it: how many of its slots are free, and its messages."""

    def __init__(
        self,
        source: MessageSource,
        settings: IntakeSettings,
        worker: Worker,
        pausing: Pausing | None,
        routing: Routing | None = None,
    ) -> None:
        self.source = source
        self.settings = settings
        self.worker = worker
        self.pausing = pausing
        self.routing = routing
        self.deletes = PendingDeletes(source, settings.delete_window)
        #: A FIFO queue's messages of one group run one at a time, in order.
        self.order: GroupOrder[InFlight] = GroupOrder()
        # Slots: workers plus prefetch. A prefetched job waits in the pool's queue for a worker.
        self.capacity = settings.max_workers + settings.prefetch
        self._free = self.capacity
        self._free_changed = threading.Condition()
        #: How many free slots the receive loop waits for (0: it does not wait): a slot given
        #: back wakes it only once that many are free, not at every job's end.
        self._wanted = 0
        #: Jobs handed to the pool (take) that no worker has taken up yet: prefetched ones.
        self._waiting: set[InFlight] = set()
        #: The last receive came back full: the receive loop receives again as soon as slots
        #: are free, and the jobs it gets claim at once.
        self._backlog = False

    @property
    def name(self) -> str:
        return self.settings.name

    def wait_for_free(self, stop: threading.Event, backlog: bool) -> int:
        """The free slots once there is one (0 if stopped); after a backlog, wait up to the
        gather window for a batch's worth."""
        with self._free_changed:
            # A stop wakes it through wake(): the Kicker calls it once stop is set.
            self._wanted = 1
            self._free_changed.wait_for(lambda: self._free > 0 or stop.is_set())
            if backlog and self._free > 0:
                self._wanted = min(MAX_BATCH, self.capacity)
                self._free_changed.wait_for(
                    lambda: self._free >= self._wanted or stop.is_set(),
                    timeout=self.settings.gather_window,
                )
            self._wanted = 0
            return 0 if stop.is_set() else self._free

    def take(self, entry: InFlight) -> None:
        """A slot for entry, handed to the pool, where it waits until started()."""
        with self._free_changed:
            self._free -= 1
            self._waiting.add(entry)

    def started(self, entry: InFlight) -> None:
        """A worker has taken entry up."""
        with self._free_changed:
            self._waiting.discard(entry)

    def received(self, full: bool) -> None:
        """What the receive loop's last receive gave: full (a backlog), or not (fewer messages
        than it asked for, none, or an error)."""
        with self._free_changed:
            self._backlog = full

    def claims_coming(self) -> bool:
        """Whether a job's claim is sure to come at once, so that a run's end written behind
        may wait to share its call: a job handed to the pool waits for a worker (prefetched:
        its claim, or its run's end when its claim was taken ahead and the run is short), or
        the last receive came back full and the next one is made as slots are free (one
        worker's end of a received batch's last run, and the next batch's first claim)."""
        with self._free_changed:
            return bool(self._waiting) or self._backlog

    def give_back_slot(self) -> None:
        with self._free_changed:
            self._free += 1
            if self._wanted and self._free >= self._wanted:
                self._free_changed.notify_all()

    def wake(self) -> None:
        """Let a receive loop waiting for free slots look at its stop event now."""
        with self._free_changed:
            self._free_changed.notify_all()

    def reject(self, message: Message, reason: str) -> None:
        try:
            self.source.reject(message, reason)
        except AWS_ERRORS as exc:
            # Left on the queue: it comes back, and a RedrivePolicy moves it on in the end.
            log.error(
                "invalid message %s (%s) could not be taken off the queue: %s",
                message.message_id,
                reason,
                describe(exc),
            )

    def give_back(self, messages: Sequence[Message]) -> None:
        if not messages:
            return
        log.info("giving back %d message(s) received while stopping", len(messages))
        self.set_visibility(messages, 0)

    def set_visibility(self, messages: Sequence[Message], seconds: int) -> None:
        try:
            self.source.set_visibility(messages, seconds)
        except AWS_ERRORS as exc:
            log.error(
                "could not change the visibility of message(s) %s (%s); they reappear when "
                "their visibility timeout ends",
                ", ".join(m.message_id for m in messages),
                describe(exc),
            )

    def hide(self, messages: Sequence[Message]) -> None:
        """Hide in-flight messages again for the visibility timeout (a heartbeat's beat)."""
        if not self.settings.delete_on_receive:  # else deleted on receipt: nothing to hide
            hide_again(self.source, messages, self.settings.visibility)


def hide_again(source: MessageSource, messages: Sequence[Message], visibility: int) -> None:
    """Hide in-flight messages for visibility seconds more; a failure is logged, not raised."""
    if not messages:
        return
    try:
        source.set_visibility(messages, visibility)
    except AWS_ERRORS as exc:
        # The lease timing leaves room for a missed beat: the next one retries.
        log.error("could not extend the visibility of in-flight messages: %s", describe(exc))
