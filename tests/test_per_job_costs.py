"""What a job costs the daemon beside its AWS calls: a job's end wakes the receive loop and the
deleter only when they have something to do, and the collector does not walk the imports."""

from __future__ import annotations

import gc
import threading
from typing import Any, cast

import pytest

from sqsjkr.backends.history import Ended, MemoryHistory
from sqsjkr.backends.sqs import Message
from sqsjkr.contract.run import RunRecord
from sqsjkr.daemon import service
from sqsjkr.daemon.closing import AHEAD_LINGER_SECONDS, BEHIND_LINGER_SECONDS
from sqsjkr.daemon.intake import Intake, IntakeSettings, PendingDeletes
from sqsjkr.daemon.loop import KickerSettings
from sqsjkr.daemon.worker import Worker

from .conftest import wait_until
from .test_daemon import FakeSource, GateRunner, Running, make_kicker, run_until


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


def test_sqsjkr_run_freezes_what_its_imports_made_and_collects_less_often_as_it_serves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[tuple[int, int]] = []
    monkeypatch.setattr(
        service,
        "serve",
        lambda *args, **kwargs: seen.append((gc.get_freeze_count(), gc.get_threshold()[0])),
    )
    gc.unfreeze()
    threshold = gc.get_threshold()
    try:
        service.serve_until_stopped(cast(Any, None), "sqsjkr.toml")
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
    assert seen and seen[0][0] > 10_000
    assert seen[0][1] == service.YOUNG_GC_THRESHOLD > threshold[0]


class ThreadsOfEnds(MemoryHistory):
    """A history that notes the thread each run's end is written from, and its linger."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[str] = []
        self.lingers: list[float] = []

    def finished(self, record: RunRecord, **kwargs: Any) -> Ended:
        self.threads.append(threading.current_thread().name)
        self.lingers.append(kwargs.get("linger", 0.0))
        return super().finished(record, **kwargs)


def ends_of_nine_behind_one(jobs: list[dict[str, Any]]) -> ThreadsOfEnds:
    """Where and how the ends of nine jobs received at once by one worker (prefetch 9) were
    written, once all have run: eight wait behind the first until the runner opens."""
    settings = KickerSettings(queue=IntakeSettings(max_workers=1, prefetch=9))
    history = ThreadsOfEnds()
    runner = GateRunner()
    kicker, _ = make_kicker(FakeSource(jobs), runner, workers=1, settings=settings, history=history)
    running = Running(kicker)
    try:
        intake = next(iter(kicker._intakes.values()))
        wait_until(lambda: len(runner.running) == 1 and len(intake._waiting) == 8)
        runner.open()
        wait_until(lambda: len(history.records) == 9)
    finally:
        running.finish()
    return history


def test_a_run_whose_end_no_claim_can_carry_is_closed_by_its_own_worker_not_a_closer() -> None:
    settings = KickerSettings(queue=IntakeSettings(max_workers=1, prefetch=9))
    runner = GateRunner()
    runner.gate.set()
    # A lone job: its receive came back short and nothing waits, so no claim is coming.
    history = ThreadsOfEnds()
    kicker, _ = make_kicker(
        FakeSource([{"command": "x"}]), runner, workers=1, settings=settings, history=history
    )
    run_until(kicker, lambda: len(history.records) == 1)
    assert [name.startswith("sqsjkr-worker_") for name in history.threads] == [True]
    # Nine in one receive (short of the ten asked for): eight wait behind the first, so each end
    # but the last waits for the next claim on a closer's thread; the last goes from its worker.
    history = ends_of_nine_behind_one([{"command": "x", "event_id": str(i)} for i in range(9)])
    # Counted, not in order: an end behind may linger for the next claim while the last is written.
    closers = [name.startswith("sqsjkr-worker-close") for name in history.threads]
    assert (closers.count(True), closers.count(False)) == (8, 1)


@pytest.mark.parametrize(
    ("lock", "linger"), [(False, AHEAD_LINGER_SECONDS), (True, BEHIND_LINGER_SECONDS)]
)
def test_a_plain_jobs_end_lingers_for_the_next_receives_claims_and_a_locked_ones_less(
    lock: bool, linger: float
) -> None:
    # Nine in one receive on one worker: each end but the last lingers for the next job's claim,
    # which for a plain job is the next receive's (claimed on receipt), for a locked one a
    # worker's own, which comes sooner.
    history = ends_of_nine_behind_one(
        [
            {"command": "x", "event_id": str(i), **({"lock_id": f"lock-{i}"} if lock else {})}
            for i in range(9)
        ]
    )
    # Whether an end lingers at all depends on a claim still coming when it is written (timing);
    # how long it may, on its job alone.
    assert set(history.lingers) - {0.0} == {linger}, history.lingers
    assert AHEAD_LINGER_SECONDS > BEHIND_LINGER_SECONDS
