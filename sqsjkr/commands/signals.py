"""Stop signals, handled only in the entry point: the handler flips events and nothing else.

The first signal asks for a stop; a second one forces running jobs to stop too.
"""

from __future__ import annotations

import faulthandler
import logging
import signal
import threading
from collections.abc import Callable
from types import FrameType

log = logging.getLogger("sqsjkr.cli")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)


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
    # SIGUSR1 writes every thread's stack to stderr (the log), for a daemon that seems stuck.
    faulthandler.register(signal.SIGUSR1, all_threads=True)

    def restore() -> None:
        faulthandler.unregister(signal.SIGUSR1)
        for sig, old in previous.items():
            signal.signal(sig, old)

    return restore
