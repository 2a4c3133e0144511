"""Fleet-wide pauses as the daemon sees them, in the copy of the controls (daemon/controls.py) read at
most once a refresh interval and only when it matters; the messages of paused events, held back hidden.

Nothing here runs on a timer: the receive loop asks when messages arrive and once per turn.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from sqsjkr.backends.aws import AWS_ERRORS, describe
from sqsjkr.backends.pause import Pause, paused
from sqsjkr.backends.sqs import Message, MessageSource
from sqsjkr.contract.limits import LONGEST_HIDE_SECONDS
from sqsjkr.daemon.controls import ControlsCopy
from sqsjkr.errors import quote
from sqsjkr.observability.logs import moment

log = logging.getLogger("sqsjkr.pause")


class Pausing:
    """Which events are paused, and the messages held back for them. The pause store is read only
    when messages arrive, while messages are held back, or while all events are paused; each
    time at most once a refresh interval. An idle daemon reads nothing.

    Used by the receive loop's thread; give_back() may come from the stopping thread.
    """

    def __init__(
        self,
        controls: ControlsCopy,
        source: MessageSource,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._controls = controls
        self._source = source
        self._clock = clock
        self._lock = threading.Lock()
        #: message id -> (a message hidden while its event is paused, that event)
        self._held: dict[str, tuple[Message, str]] = {}
        #: While a pause of all stops the receiving: that pause, as the log names it.
        self._not_receiving: str | None = None

    def hold_back(self, received: Sequence[tuple[Message, str]]) -> set[str]:
        """Of (message, event_id) pairs just received, hide those of paused events until their
        pause ends (at most SQS's 12 hours) and keep them; the ids held back."""
        now = self._clock()
        pauses = self._current()
        held = set()
        for message, event_id in received:
            pause = paused(pauses, event_id, now)
            if pause is None:
                continue
            until = LONGEST_HIDE_SECONDS if pause.until is None else pause.until - now
            hide = int(min(LONGEST_HIDE_SECONDS, max(1, until)))
            # Not run either way: a message that could not be hidden comes back at the end of
            # its visibility timeout, and is held back then.
            held.add(message.message_id)
            if not self._hide([message], hide):
                continue
            with self._lock:
                self._held[message.message_id] = (message, event_id)
            log.info(
                "message %s of event %s held back for %ds: %s",
                message.message_id,
                quote(event_id),
                hide,
                describe_pause(pause),
            )
        return held

    def paused_all(self) -> Pause | None:
        """While the last copy says all events are paused: that pause, read again once the copy
        is old (the receive loop then waits instead of receiving). None otherwise, without a read;
        the first None after a pause of all says so in the log."""
        pause = self._pause_of_all()
        if pause is None and self._not_receiving is not None:
            log.info("receiving again: the pause of all events is over (%s)", self._not_receiving)
        self._not_receiving = None if pause is None else describe_pause(pause)
        return pause

    def _pause_of_all(self) -> Pause | None:
        now = self._clock()
        if not any(p.event_id is None and p.in_effect(now) for p in self._controls.last().pauses):
            return None
        return next((p for p in self._current() if p.event_id is None and p.in_effect(now)), None)

    def next_read_in(self) -> float:
        """Seconds until the copy is old enough to be read again."""
        return self._controls.next_read_in()

    def review(self) -> None:
        """While messages are held back, read the pauses again when the copy is old, and show at
        once those whose pause has ended: resume runs what accumulated within a minute."""
        with self._lock:
            if not self._held:
                return
            held = list(self._held.values())
        now = self._clock()
        pauses = self._current()
        free = [message for message, event_id in held if paused(pauses, event_id, now) is None]
        if free and self._hide(free, 0):
            with self._lock:
                for message in free:
                    self._held.pop(message.message_id, None)
            log.info("pause over: %d held message(s) visible again", len(free))

    def give_back(self) -> None:
        """Stopping: make held messages visible again, for another daemon to hold or run."""
        with self._lock:
            held, self._held = [message for message, _ in self._held.values()], {}
        if held:
            self._hide(held, 0)

    def _current(self) -> list[Pause]:
        """The pauses, read again if the copy is older than the refresh interval."""
        return self._controls.current().pauses

    def _hide(self, messages: Sequence[Message], seconds: int) -> bool:
        try:
            self._source.set_visibility(messages, seconds)
        except AWS_ERRORS as exc:
            log.error(
                "could not change the visibility of held message(s) %s (%s)",
                ", ".join(m.message_id for m in messages),
                describe(exc),
            )
            return False
        return True


def describe_pause(pause: Pause) -> str:
    what = "all events paused" if pause.event_id is None else "its event is paused"
    until = "until resumed" if pause.until is None else f"until {moment(pause.until)}"
    reason = f" ({pause.reason})" if pause.reason else ""
    return f"{what} {until} by {pause.by}{reason}"
