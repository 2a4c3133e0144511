"""Stop signals in the entry point: the stop event wakes the main thread whichever thread the
kernel gave the signal to."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from sqsjkr.daemon.signals import StopEvent, install_stop_signals

needs_main_thread = pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(),
    reason="signal handlers can only be installed from the main thread",
)


@needs_main_thread
def test_a_stop_signal_taken_by_another_thread_wakes_the_main_thread() -> None:
    stop, force = StopEvent(), threading.Event()
    restore = install_stop_signals(stop, force)
    waiting = threading.Event()

    def signal_this_thread() -> None:
        waiting.wait(10)
        # To this thread, not the process: the kernel's choice when the main thread is busy.
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)

    other = threading.Thread(target=signal_this_thread)
    other.start()
    try:
        waiting.set()
        # A plain Event would sleep out the whole timeout and return False: its handler runs
        # only once the main thread wakes.
        assert stop.wait(60) is True
        assert not force.is_set()
    finally:
        other.join()
        restore()
        stop.close()


def test_set_from_another_thread_wakes_a_waiting_main_thread() -> None:
    stop = StopEvent()
    setter = threading.Timer(0.1, stop.set)
    setter.start()
    try:
        assert stop.wait(60) is True
    finally:
        setter.join()
        stop.close()


def test_wait_times_out_when_nothing_happens() -> None:
    stop = StopEvent()
    try:
        assert stop.wait(0.05) is False and not stop.is_set()
    finally:
        stop.close()


def test_a_stop_event_closes_its_pipe() -> None:
    stop = StopEvent()
    fd = stop.wakeup_fd
    stop.close()
    with pytest.raises(OSError):
        os.fstat(fd)
