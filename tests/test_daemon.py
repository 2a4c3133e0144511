"""Unit tests of the daemon loop with an in-memory message source, backends and runner."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from botocore.exceptions import EndpointConnectionError

from sqsjkr.daemon import Kicker, KickerSettings, PendingDeletes
from sqsjkr.dedupe import MemoryDedupe
from sqsjkr.errors import ResourceMissingError
from sqsjkr.job import Job
from sqsjkr.locks import MemoryLocker
from sqsjkr.runner import RunResult
from sqsjkr.sqs import Message
from sqsjkr.stats import Stats

from .conftest import wait_until


class FakeSource:
    """A queue in memory that records what the loop asked of it."""

    def __init__(
        self, bodies: Sequence[str | dict[str, Any]] = (), sent_at: float = 1000.0
    ) -> None:
        self._lock = threading.Lock()
        self.queued: list[Message] = []
        self.asked: list[int] = []
        self.deleted: list[str] = []
        self.delete_calls = 0
        self.released: list[str] = []
        self.failures = 0  # receives to fail before answering
        self.on_receive: Any = None
        for i, body in enumerate(bodies):
            self.put(body, f"m{i}", sent_at)

    def put(self, body: str | dict[str, Any], message_id: str, sent_at: float = 1000.0) -> None:
        text = body if isinstance(body, str) else json.dumps(body)
        with self._lock:
            self.queued.append(Message(message_id, f"rh-{message_id}", text, sent_at))

    def receive(self, max_messages: int) -> list[Message]:
        if self.on_receive:
            self.on_receive()
        with self._lock:
            self.asked.append(max_messages)
            if self.failures:
                self.failures -= 1
                raise EndpointConnectionError(endpoint_url="http://127.0.0.1:1")
            taken, self.queued = self.queued[:max_messages], self.queued[max_messages:]
        if not taken:
            threading.Event().wait(0.01)  # a short "long poll"
        return taken

    def delete(self, messages: Sequence[Message]) -> None:
        self.delete_calls += 1
        self.deleted += [m.message_id for m in messages]

    def release(self, messages: Sequence[Message]) -> None:
        self.released += [m.message_id for m in messages]


class GateRunner:
    """Runs nothing; each job blocks until the test opens the gate, and concurrency is recorded."""

    def __init__(self, exit_codes: dict[str, int] | None = None) -> None:
        self.gate = threading.Event()
        self._lock = threading.Lock()
        self.running: set[str] = set()
        self.max_running = 0
        self.ran: list[str] = []
        self._exit_codes = exit_codes or {}

    def run(self, job: Job) -> RunResult:
        with self._lock:
            self.running.add(job.message_id)
            self.max_running = max(self.max_running, len(self.running))
        self.gate.wait(10)
        with self._lock:
            self.running.discard(job.message_id)
            self.ran.append(job.message_id)
        return RunResult(self._exit_codes.get(job.event_id, 0), 0.0)


def make_kicker(
    source: FakeSource, runner: Any, workers: int = 2, **kwargs: Any
) -> tuple[Kicker, Stats]:
    stats = Stats(workers)
    kwargs.setdefault("dedupe", MemoryDedupe())
    kwargs.setdefault("locker", MemoryLocker())
    settings = kwargs.pop("settings", KickerSettings(max_workers=workers, lock_retry_interval=0.01))
    return Kicker(source, runner=runner, stats=stats, settings=settings, **kwargs), stats


class Running:
    """A kicker on a thread of the test's own, stopped and joined at the end."""

    def __init__(self, kicker: Kicker) -> None:
        self.stop = threading.Event()
        # A daemon thread, so that a failing test cannot hang the whole run at exit.
        self.thread = threading.Thread(target=kicker.run, args=(self.stop,), daemon=True)
        self.thread.start()

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(10)
        assert not self.thread.is_alive()


def run_until(kicker: Kicker, done: Callable[[], Any], timeout: float = 15.0) -> None:
    """Run kicker on a thread until done() holds, then stop it and join the thread."""
    running = Running(kicker)
    try:
        wait_until(done, timeout)
    finally:
        running.finish()


def test_never_runs_more_than_max_workers_and_asks_only_for_free_ones() -> None:
    source = FakeSource([{"command": "x"} for _ in range(7)])
    runner = GateRunner()
    kicker, stats = make_kicker(source, runner, workers=3)
    running = Running(kicker)
    wait_until(lambda: len(runner.running) == 3, what="three jobs running")
    assert stats.snapshot().busy == 3 and stats.snapshot().idle == 0
    runner.gate.set()
    wait_until(lambda: len(runner.ran) == 7, what="all jobs run")
    running.finish()
    assert runner.max_running == 3
    assert all(1 <= n <= 3 for n in source.asked)
    assert source.asked[0] == 3
    assert stats.snapshot().succeeded == 7


def test_messages_are_deleted_in_one_batch_on_receive() -> None:
    source = FakeSource([{"command": "x"}, {"command": "y"}])
    runner = GateRunner()
    runner.gate.set()
    kicker, _ = make_kicker(source, runner)
    run_until(kicker, lambda: len(runner.ran) == 2)
    assert sorted(source.deleted) == ["m0", "m1"]


def test_invalid_messages_are_counted_failed_deleted_and_do_not_stop_the_loop(
    caplog: pytest.LogCaptureFixture,
) -> None:
    source = FakeSource(["not json", "[1]", {"command": 3}, {"command": "ok"}])
    runner = GateRunner()
    runner.gate.set()
    kicker, stats = make_kicker(source, runner)
    run_until(kicker, lambda: runner.ran == ["m3"])
    assert stats.snapshot().failed == 3
    assert sorted(source.deleted) == ["m0", "m1", "m2", "m3"]
    assert "invalid message m0 deleted: body is not JSON" in caplog.text
    assert 'invalid message m2 deleted: field "command"' in caplog.text


def test_duplicate_is_skipped_and_counted() -> None:
    dedupe = MemoryDedupe()
    dedupe.claim("m0")
    source = FakeSource([{"command": "x"}])
    runner = GateRunner()
    kicker, stats = make_kicker(source, runner, dedupe=dedupe)
    run_until(kicker, lambda: stats.snapshot().duplicates == 1)
    assert runner.ran == []


def test_exit_code_decides_succeeded_or_errored() -> None:
    source = FakeSource([{"command": "x", "event_id": "bad"}, {"command": "x", "event_id": "good"}])
    runner = GateRunner({"bad": 2})
    runner.gate.set()
    kicker, stats = make_kicker(source, runner)
    run_until(kicker, lambda: len(runner.ran) == 2)
    snap = stats.snapshot()
    assert (snap.succeeded, snap.errored, snap.failed) == (1, 1, 0)


def test_expired_job_is_cancelled_and_trigger_runs_unless_disabled() -> None:
    source = FakeSource(
        [
            {"command": "x", "event_id": "late", "life_time": 10},
            {
                "command": "x",
                "event_id": "quiet",
                "life_time": "10s",
                "disable_life_time_trigger": True,
            },
            {"command": "x", "event_id": "fresh", "life_time": "1h"},
        ],
        sent_at=1000.0,
    )
    triggered: list[tuple[str, str]] = []
    runner = GateRunner()
    runner.gate.set()
    kicker, stats = make_kicker(
        source,
        runner,
        workers=3,
        clock=lambda: 1011.0,
        trigger=lambda cmd, job: triggered.append((cmd, job.event_id)) or RunResult(0, 0.0),
        settings=KickerSettings(max_workers=3, life_time_trigger="alert"),
    )
    run_until(kicker, lambda: stats.snapshot().failed == 2 and len(runner.ran) == 1)
    assert triggered == [("alert", "late")]
    assert runner.ran == ["m2"]


def test_lock_serialises_jobs_and_is_released() -> None:
    locker = MemoryLocker()
    source = FakeSource([{"command": "x", "lock_id": "L"} for _ in range(3)])
    runner = GateRunner()
    kicker, stats = make_kicker(source, runner, workers=3, locker=locker)
    running = Running(kicker)
    wait_until(lambda: len(runner.running) == 1 and stats.snapshot().busy == 3)
    assert list(locker.held) == ["L"]
    runner.gate.set()
    wait_until(lambda: len(runner.ran) == 3)
    running.finish()
    assert runner.max_running == 1
    assert locker.held == {}


def test_abort_if_locked_gives_up_at_once() -> None:
    locker = MemoryLocker()
    locker.try_lock("L", "other-host")
    source = FakeSource([{"command": "x", "lock_id": "L", "abort_if_locked": True}])
    runner = GateRunner()
    kicker, stats = make_kicker(source, runner, locker=locker)
    run_until(kicker, lambda: stats.snapshot().failed == 1)
    assert runner.ran == []
    assert locker.held == {"L": "other-host"}  # someone else's lock is left alone


def test_lock_wait_rechecks_life_time() -> None:
    locker = MemoryLocker()
    locker.try_lock("L", "other-host")
    now = [1000.0]
    source = FakeSource([{"command": "x", "lock_id": "L", "life_time": 5}], sent_at=1000.0)

    def sleep(seconds: float) -> None:
        assert seconds == 0.01  # the configured lock_retry_interval
        now[0] += 2  # each retry interval passes two seconds of the injected clock

    runner = GateRunner()
    kicker, stats = make_kicker(source, runner, locker=locker, clock=lambda: now[0], sleep=sleep)
    run_until(kicker, lambda: stats.snapshot().failed == 1)
    assert runner.ran == []
    assert now[0] == 1006.0  # gave up at the first check past 5 s


def test_receive_failures_back_off_and_recover(caplog: pytest.LogCaptureFixture) -> None:
    source = FakeSource([{"command": "x"}])
    source.failures = 1
    runner = GateRunner()
    runner.gate.set()
    kicker, _ = make_kicker(source, runner)
    run_until(kicker, lambda: runner.ran == ["m0"])
    assert "receive failed (EndpointConnectionError" in caplog.text


def test_messages_received_while_stopping_are_given_back_not_run() -> None:
    source = FakeSource([{"command": "x"}])
    runner = GateRunner()
    kicker, _ = make_kicker(source, runner)
    stop = threading.Event()
    source.on_receive = stop.set  # the stop signal arrives during the long poll
    kicker.run(stop)
    assert source.released == ["m0"]
    assert source.deleted == []
    assert runner.ran == []


def test_stop_waits_for_running_jobs() -> None:
    source = FakeSource([{"command": "x"}])
    runner = GateRunner()
    kicker, _ = make_kicker(source, runner)
    running = Running(kicker)
    wait_until(lambda: runner.running)
    running.stop.set()
    running.thread.join(0.3)
    assert running.thread.is_alive()
    runner.gate.set()
    running.finish()
    assert runner.ran == ["m0"]


def test_deletes_of_several_receives_share_one_batch() -> None:
    source = FakeSource([{"command": "x"} for _ in range(4)])
    runner = GateRunner()
    runner.gate.set()
    # One worker: four receives of one message each, and a window no test run reaches.
    settings = KickerSettings(max_workers=1, delete_window=3600)
    kicker, _ = make_kicker(source, runner, workers=1, settings=settings)
    running = Running(kicker)
    wait_until(lambda: len(runner.ran) == 4)
    # Flushed once the queue runs dry, before the next receive may long-poll.
    wait_until(lambda: source.delete_calls == 1)
    running.finish()
    assert (source.delete_calls, sorted(source.deleted)) == (1, ["m0", "m1", "m2", "m3"])


def test_pending_deletes_flush_when_a_batch_is_full_or_the_window_passes() -> None:
    source = FakeSource()
    messages = [Message(f"m{i}", f"rh{i}", "{}", 0.0) for i in range(11)]
    batch = PendingDeletes(source, window=3600)
    batch.add(messages[:9])
    batch.flush()
    assert source.delete_calls == 0
    batch.add(messages[9:])
    batch.flush()
    assert (source.delete_calls, len(source.deleted)) == (1, 11)
    late = PendingDeletes(source, window=0)
    late.add(messages[:1])
    late.flush()
    assert source.delete_calls == 2


def test_after_a_full_receive_the_loop_gathers_free_workers_before_receiving_again() -> None:
    source = FakeSource([{"command": "x", "event_id": str(i)} for i in range(6)])
    gates = {str(i): threading.Event() for i in range(6)}

    class PerJobRunner:
        ran: list[str] = []

        def run(self, job: Job) -> RunResult:
            gates[job.event_id].wait(10)
            self.ran.append(job.event_id)
            return RunResult(0, 0.0)

    runner = PerJobRunner()
    settings = KickerSettings(max_workers=3, gather_window=30)
    kicker, stats = make_kicker(source, runner, workers=3, settings=settings)
    running = Running(kicker)
    wait_until(lambda: stats.snapshot().busy == 3 and source.asked == [3])
    gates["0"].set()
    wait_until(lambda: stats.snapshot().busy == 2)
    with pytest.raises(AssertionError):
        wait_until(lambda: len(source.asked) > 1, timeout=0.3)  # no receive for one free worker
    gates["1"].set()
    gates["2"].set()
    wait_until(lambda: len(source.asked) > 1)
    assert source.asked[1] == 3
    for gate in gates.values():
        gate.set()
    wait_until(lambda: len(runner.ran) == 6)
    running.finish()


class FlakyLocker(MemoryLocker):
    """Raises the given errors on the first tries, then behaves."""

    def __init__(self, *errors: Exception) -> None:
        super().__init__()
        self.errors = list(errors)

    def try_lock(self, lock_id: str, event_id: str) -> bool:
        if self.errors:
            raise self.errors.pop(0)
        return super().try_lock(lock_id, event_id)


def test_a_transient_lock_error_is_retried() -> None:
    locker = FlakyLocker(EndpointConnectionError(endpoint_url="http://127.0.0.1:1"))
    source = FakeSource([{"command": "x", "lock_id": "L"}])
    runner = GateRunner()
    runner.gate.set()
    kicker, stats = make_kicker(source, runner, locker=locker)
    run_until(kicker, lambda: stats.snapshot().succeeded == 1)
    assert locker.held == {}


@pytest.mark.parametrize(
    ("error", "abort_if_locked"),
    [
        (ResourceMissingError("DynamoDB table 'x' not found"), False),
        (EndpointConnectionError(endpoint_url="http://127.0.0.1:1"), True),
    ],
)
def test_a_lasting_lock_error_or_abort_if_locked_fails_the_job_at_once(
    error: Exception, abort_if_locked: bool, caplog: pytest.LogCaptureFixture
) -> None:
    locker = FlakyLocker(error, error, error)
    source = FakeSource([{"command": "x", "lock_id": "L", "abort_if_locked": abort_if_locked}])
    runner = GateRunner()
    kicker, stats = make_kicker(source, runner, locker=locker)
    run_until(kicker, lambda: stats.snapshot().failed == 1)
    assert runner.ran == []
    assert len(locker.errors) == 2  # tried once, not again
    assert "failed: could not take lock 'L'" in caplog.text


def test_a_redelivered_message_is_logged_with_its_receive_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="sqsjkr.daemon")
    source = FakeSource()
    source.queued.append(Message("m9", "rh", '{"command": "x"}', 1000.0, receive_count=3))
    runner = GateRunner()
    runner.gate.set()
    kicker, _ = make_kicker(source, runner)
    run_until(kicker, lambda: runner.ran == ["m9"])
    assert "message m9 delivered again (receive 3)" in caplog.text


def test_an_unexpected_receive_error_does_not_stop_the_loop(
    caplog: pytest.LogCaptureFixture,
) -> None:
    source = FakeSource([{"command": "x"}])
    errors = [KeyError("MessageId")]

    def odd_response() -> None:
        if errors:
            raise errors.pop()

    source.on_receive = odd_response
    runner = GateRunner()
    runner.gate.set()
    kicker, _ = make_kicker(source, runner)
    run_until(kicker, lambda: runner.ran == ["m0"], timeout=20)
    assert "receive failed (KeyError: 'MessageId')" in caplog.text
