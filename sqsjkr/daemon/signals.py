"""Stop signals, installed only by the entry point (`sqsjkr run`, `sqsjkr local`): the handler flips events.

The first signal asks for a stop; a second one forces running jobs to stop too.
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import os
import select
import signal
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType

log = logging.getLogger("sqsjkr.cli")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)


class StopEvent(threading.Event):
    """The entry point's stop event. Waited on by the main thread, it wakes for a signal that
    another thread took too: Python runs signal handlers in the main thread only, and a main
    thread asleep on a lock would not run them until something else woke it."""

    def __init__(self) -> None:
        super().__init__()
        self._wake_read, self.wakeup_fd = os.pipe()
        os.set_blocking(self._wake_read, False)
        os.set_blocking(self.wakeup_fd, False)  # as signal.set_wakeup_fd requires

    def set(self) -> None:
        super().set()
        # Wakes a main thread asleep in wait(); a full pipe has a wake-up pending already.
        with contextlib.suppress(OSError):
            os.write(self.wakeup_fd, b"\0")

    def wait(self, timeout: float | None = None) -> bool:
        if threading.current_thread() is not threading.main_thread():
            return super().wait(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.is_set():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            # Readable once a signal arrives (the wakeup fd) or set() is called; handlers run
            # as soon as select returns.
            select.select([self._wake_read], [], [], left)
            self._drain()
        return True

    def close(self) -> None:
        os.close(self._wake_read)
        os.close(self.wakeup_fd)

    def _drain(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self._wake_read, 512):
                pass


def install_stop_signals(stop: threading.Event, force: threading.Event) -> Callable[[], None]:
    """Make the first stop signal set stop and the next set force; returns a function that
    restores the old handlers."""

    def handle(signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if stop.is_set():
            log.warning("%s received again: stopping running jobs now", name)
            force.set()
        else:
            log.info("%s received: stopping (a second signal stops running jobs)", name)
            stop.set()

    previous = {sig: signal.signal(sig, handle) for sig in STOP_SIGNALS}
    wakeup = -1
    if isinstance(stop, StopEvent):
        wakeup = signal.set_wakeup_fd(stop.wakeup_fd, warn_on_full_buffer=False)
    # SIGUSR1 writes every thread's stack to stderr (the log), for a daemon that seems stuck.
    faulthandler.register(signal.SIGUSR1, all_threads=True)

    def restore() -> None:
        if isinstance(stop, StopEvent):
            signal.set_wakeup_fd(wakeup)
        faulthandler.unregister(signal.SIGUSR1)
        for sig, old in previous.items():
            signal.signal(sig, old)

    return restore


@contextlib.contextmanager
def stop_signals() -> Iterator[tuple[StopEvent, threading.Event]]:
    """The stop and force events, set by stop signals while the block runs; the old handlers
    are back after it."""
    stop, force = StopEvent(), threading.Event()
    restore = install_stop_signals(stop, force)
    try:
        yield stop, force
    finally:
        restore()
        stop.close()
