"""What a job costs the daemon beside its AWS calls: a job's end wakes the receive loop and the
deleter only when they have something to do, and the collector does not walk the imports."""

from __future__ import annotations

import gc
import threading
from typing import Any, cast

import pytest

from sqsjkr.backends.sqs import Message
from sqsjkr.daemon import service
from sqsjkr.daemon.intake import Intake, IntakeSettings, PendingDeletes
from sqsjkr.daemon.worker import Worker

from .conftest import wait_until
from .test_daemon import FakeSource


class CountingCondition(threading.Condition):
    """A Condition that counts its notify_all calls: the wake-ups its waiters get."""

    def __init__(self) -> None:
        super().__init__()
        self.wakeups = 0

    def notify_all(self) -> None:
        self.wakeups += 1
        super().notify_all()


def test_a_delete_wakes_the_deleter_only_for_a_first_message_or_a_full_batch() -> None:
    source = FakeSource()
    deletes = PendingDeletes(source, window=3600)
    counted = CountingCondition()
    deletes._changed = counted  # the condition send_when_due waits on
    stop = threading.Event()
    deleter = threading.Thread(target=deletes.send_when_due, args=(stop,))
    deleter.start()
    try:
        messages = [Message(f"m{i}", f"rh{i}", "{}", 0.0) for i in range(10)]
        deletes.add(messages[:1])  # the deadline is set: one wake-up
        for message in messages[1:9]:
            deletes.add([message])
        assert counted.wakeups == 1
        assert source.delete_calls == 0
        deletes.add(messages[9:])  # a full batch is due now
        assert counted.wakeups == 2
        wait_until(lambda: source.delete_calls == 1)
        assert len(source.deleted) == 10
    finally:
        stop.set()
        deletes.wake()
        deleter.join(5)
    assert not deleter.is_alive()


def test_a_slot_given_back_wakes_the_receive_loop_only_once_it_has_what_it_waits_for() -> None:
    settings = IntakeSettings(max_workers=1, prefetch=9, gather_window=30)
    intake = Intake(FakeSource(), settings, cast(Worker, None), None)
    counted = CountingCondition()
    intake._free_changed = counted  # the condition wait_for_free waits on
    entries: list[Any] = [object() for _ in range(intake.capacity)]
    for entry in entries:
        intake.take(entry)
    stop = threading.Event()
    free: list[int] = []
    receiver = threading.Thread(target=lambda: free.append(intake.wait_for_free(stop, True)))
    receiver.start()
    # A first free slot ends its first wait; it then gathers a batch (min(10, capacity)).
    wait_until(lambda: intake._wanted == 1)
    intake.give_back_slot()
    wait_until(lambda: intake._wanted == 10)
    for _ in range(8):
        intake.give_back_slot()
    assert counted.wakeups == 1
    assert receiver.is_alive()
    intake.give_back_slot()
    receiver.join(5)
    assert free == [10]
    assert counted.wakeups == 2


def test_sqsjkr_run_freezes_what_its_imports_made_before_it_serves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    frozen: list[int] = []
    monkeypatch.setattr(
        service, "serve", lambda *args, **kwargs: frozen.append(gc.get_freeze_count())
    )
    gc.unfreeze()
    try:
        service.serve_until_stopped(cast(Any, None), "sqsjkr.toml")
    finally:
        gc.unfreeze()
    assert frozen and frozen[0] > 10_000
