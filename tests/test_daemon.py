"""Unit tests of the daemon loop with an in-memory message source, backends and runner."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from botocore.exceptions import EndpointConnectionError

from sqsjkr.backends.dedupe import Claim, ClaimState, MemoryDedupe
from sqsjkr.backends.lease import Lease
from sqsjkr.backends.locks import Held, MemoryLocker
from sqsjkr.backends.sqs import Message
from sqsjkr.contract.job import Job
from sqsjkr.daemon.intake import IntakeSettings, PendingDeletes
from sqsjkr.daemon.loop import Kicker, KickerSettings
from sqsjkr.daemon.runner import RunResult, StopReason, StopSwitch
from sqsjkr.errors import ResourceMissingError
from sqsjkr.observability.stats import Stats

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
        self.visibility: list[tuple[str, int]] = []
        self.rejected: list[tuple[str, str]] = []
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

    def set_visibility(self, messages: Sequence[Message], seconds: int) -> None:
        self.visibility += [(m.message_id, seconds) for m in messages]

    def reject(self, message: Message, reason: str) -> None:
        self.rejected.append((message.message_id, reason))

    @property
    def released(self) -> list[str]:
        """Messages made visible again at once."""
        return [message_id for message_id, seconds in self.visibility if seconds == 0]


class GateRunner:
    """Runs nothing; each job blocks until the test opens the gate, and concurrency is recorded."""

    def __init__(self, exit_codes: dict[str, int] | None = None) -> None:
        self.gate = threading.Event()
        self._lock = threading.Lock()
        self.running: set[str] = set()
        self.max_running = 0
        self.ran: list[str] = []
        self.timeouts: dict[str, float | None] = {}
        self._stops: list[StopSwitch] = []
        self._exit_codes = exit_codes or {}

    def run(
        self, job: Job, *, timeout: float | None, stop: StopSwitch, context: Any = None
    ) -> RunResult:
        with self._lock:
            self.running.add(job.message_id)
            self.max_running = max(self.max_running, len(self.running))
            self.timeouts[job.message_id] = timeout
            # Opening the gate ends the job; a cancel from the daemon ends it as a kill would.
            if self.gate.is_set():
                stop.trip(StopReason.ENDED)
            self._stops.append(stop)
        reason = stop.wait(10)
        with self._lock:
            self.running.discard(job.message_id)
            self.ran.append(job.message_id)
        if reason is StopReason.CANCELLED:
            return RunResult(-15, 0.0, stopped=reason)
        return RunResult(self._exit_codes.get(job.event_id, 0), 0.0)

    def open(self) -> None:
        """Let every job, running or to come, finish."""
        with self._lock:
            self.gate.set()
            for stop in self._stops:
                stop.trip(StopReason.ENDED)


def make_kicker(
    source: FakeSource, runner: Any, workers: int = 2, **kwargs: Any
) -> tuple[Kicker, Stats]:
    stats = Stats(workers)
    kwargs.setdefault("dedupe", MemoryDedupe())
    kwargs.setdefault("locker", MemoryLocker())
    settings = kwargs.pop(
        "settings",
        KickerSettings(queue=IntakeSettings(max_workers=workers), lock_retry_interval=0.01),
    )
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
    runner.open()
    wait_until(lambda: len(runner.ran) == 7, what="all jobs run")
    running.finish()
    assert runner.max_running == 3
    assert all(1 <= n <= 3 for n in source.asked)
    assert source.asked[0] == 3
    assert stats.snapshot().succeeded == 7


def test_a_message_is_deleted_only_once_its_job_has_finished() -> None:
    source = FakeSource([{"command": "x"}, {"command": "y"}])
    runner = GateRunner()
    kicker, _ = make_kicker(source, runner)
    running = Running(kicker)
    wait_until(lambda: len(runner.running) == 2, what="both jobs running")
    assert source.deleted == []
    runner.open()
    wait_until(lambda: sorted(source.deleted) == ["m0", "m1"], what="both deleted")
    running.finish()
    assert source.delete_calls == 1  # in one batch


def test_delete_on_receive_deletes_before_the_job_runs() -> None:
    source = FakeSource([{"command": "x"}])
    runner = GateRunner()
    # A window no test reaches: deleting on receive does not wait for a batch.
    settings = KickerSettings(
        queue=IntakeSettings(max_workers=2, delete_on_receive=True, delete_window=3600)
    )
    kicker, _ = make_kicker(source, runner, settings=settings)
    running = Running(kicker)
    wait_until(lambda: runner.running and source.deleted == ["m0"], what="deleted while running")
    runner.open()
    running.finish()
    assert source.delete_calls == 1


def test_invalid_messages_are_counted_failed_rejected_and_do_not_stop_the_loop() -> None:
    source = FakeSource(["not json", "[1]", {"command": 3}, {"command": "ok"}])
    runner = GateRunner()
    runner.open()
    kicker, stats = make_kicker(source, runner)
    run_until(kicker, lambda: runner.ran == ["m3"] and source.deleted == ["m3"])
    assert stats.snapshot().failed == 3
    assert [message_id for message_id, _ in source.rejected] == ["m0", "m1", "m2"]
    assert source.rejected[0][1].startswith("body is not JSON")
    assert source.rejected[2][1].startswith('field "command"')


def test_a_duplicate_of_a_finished_job_is_deleted_unrun() -> None:
    dedupe = MemoryDedupe()
    claim = dedupe.claim("m0")
    assert claim.lease is not None
    dedupe.finish(claim.lease)
    source = FakeSource([{"command": "x"}])
    runner = GateRunner()
    kicker, stats = make_kicker(source, runner, dedupe=dedupe)
    run_until(kicker, lambda: stats.snapshot().duplicates == 1 and source.deleted == ["m0"])
    assert runner.ran == []


def test_a_duplicate_of_a_job_in_progress_elsewhere_is_hidden_until_its_lease_ends() -> None:
    class Elsewhere(MemoryDedupe):
        def claim(self, key: str, **_: Any) -> Claim:
            return Claim(ClaimState.RUNNING, held_until=1040.0)

    source = FakeSource([{"command": "x"}])
    runner = GateRunner()
    settings = KickerSettings(queue=IntakeSettings(max_workers=2, visibility=75), lease=60)
    kicker, stats = make_kicker(
        source, runner, dedupe=Elsewhere(), settings=settings, clock=lambda: 1000.0
    )
    run_until(kicker, lambda: source.visibility)
    # 40 s left on the other daemon's lease, plus the 15 s that visibility outlasts a lease.
    assert source.visibility == [("m0", 55)]
    assert (source.deleted, runner.ran, stats.snapshot().duplicates) == ([], [], 1)


def test_a_dedupe_store_that_fails_leaves_the_message_unrun_and_pauses_receiving(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Down(MemoryDedupe):
        def claim(self, key: str, **_: Any) -> Claim:
            raise EndpointConnectionError(endpoint_url="http://127.0.0.1:1")

    caplog.set_level(logging.INFO, logger="sqsjkr.daemon")
    source = FakeSource([{"command": "x"}, {"command": "y"}])
    runner = GateRunner()
    runner.open()
    kicker, stats = make_kicker(source, runner, workers=1, dedupe=Down())
    running = Running(kicker)
    wait_until(lambda: "receiving paused" in caplog.text, what="receiving paused")
    running.finish()
    assert runner.ran == [] and source.deleted == [] and source.visibility == []
    assert len(source.asked) == 1  # the second message was not received during the pause
    assert "not started: its dedupe record could not be written" in caplog.text
    assert stats.snapshot().failed == 0


def test_exit_code_decides_succeeded_or_errored() -> None:
    source = FakeSource([{"command": "x", "event_id": "bad"}, {"command": "x", "event_id": "good"}])
    runner = GateRunner({"bad": 2})
    runner.open()
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
    runner.open()
    kicker, stats = make_kicker(
        source,
        runner,
        workers=3,
        clock=lambda: 1011.0,
        trigger=lambda cmd, job, stop: triggered.append((cmd, job.event_id)) or RunResult(0, 0.0),
        settings=KickerSettings(queue=IntakeSettings(max_workers=3), life_time_trigger="alert"),
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
    runner.open()
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
    class CountingLocker(MemoryLocker):
        tries = 0

        def try_lock(self, lock_id: str, event_id: str) -> Lease | Held:
            self.tries += 1
            return super().try_lock(lock_id, event_id)

    locker = CountingLocker()
    locker.try_lock("L", "other-host")
    source = FakeSource([{"command": "x", "lock_id": "L", "life_time": 5}], sent_at=1000.0)
    now = [1000.0]

    def clock() -> float:
        now[0] += 0.5  # time passes as the job waits
        return now[0]

    runner = GateRunner()
    kicker, stats = make_kicker(source, runner, locker=locker, clock=clock)
    run_until(kicker, lambda: stats.snapshot().failed == 1)
    assert runner.ran == []
    assert locker.tries > 2  # tried while young, given up once past its life_time
    assert source.deleted == ["m0"]  # a cancelled job has finished


def test_receive_failures_back_off_and_recover(caplog: pytest.LogCaptureFixture) -> None:
    source = FakeSource([{"command": "x"}])
    source.failures = 1
    runner = GateRunner()
    runner.open()
    kicker, _ = make_kicker(source, runner)
    run_until(kicker, lambda: runner.ran == ["m0"])
    assert "receive failed (EndpointConnectionError" in caplog.text


@pytest.mark.parametrize(
    ("wait", "took", "pause"), [(10, 0.5, 9.5), (0, 0.25, 0.75), (1, 1.5, 0.0), (20, 25.0, 0.0)]
)
def test_an_empty_receive_is_followed_by_the_rest_of_its_wait_and_of_a_second(
    wait: int, took: float, pause: float
) -> None:
    """An endpoint that ignores WaitTimeSeconds, or a wait of 0, must not make the loop spin."""
    assert IntakeSettings(wait_time_seconds=wait).idle_pause(took) == pytest.approx(pause)


def test_messages_received_while_stopping_are_given_back_not_run() -> None:
    source = FakeSource([{"command": "x"}])
    runner = GateRunner()
    kicker, _ = make_kicker(source, runner)
    stop = threading.Event()
    source.on_receive = stop.set  # the stop signal arrives during the long poll
    kicker.run(stop)
    # The receive may outlive run() by a little (run does not wait long for a long poll).
    wait_until(lambda: source.released == ["m0"], what="message given back")
    assert source.deleted == []
    assert runner.ran == []


def test_stop_waits_for_running_jobs_without_a_shutdown_timeout() -> None:
    source = FakeSource([{"command": "x"}])
    runner = GateRunner()
    kicker, _ = make_kicker(source, runner)
    running = Running(kicker)
    wait_until(lambda: runner.running)
    running.stop.set()
    running.thread.join(0.3)
    assert running.thread.is_alive()
    runner.open()
    running.finish()
    assert runner.ran == ["m0"]
    assert source.deleted == ["m0"]


def test_shutdown_timeout_stops_running_jobs_releases_their_locks_and_gives_messages_back() -> None:
    locker, dedupe = MemoryLocker(), MemoryDedupe()
    source = FakeSource([{"command": "x", "lock_id": "L"}])
    runner = GateRunner()
    settings = KickerSettings(queue=IntakeSettings(max_workers=2), shutdown_timeout=0.2)
    kicker, stats = make_kicker(source, runner, locker=locker, dedupe=dedupe, settings=settings)
    running = Running(kicker)
    wait_until(lambda: runner.running)
    running.finish()  # returns once the timeout has passed and the job was stopped
    assert runner.ran == ["m0"]
    assert source.released == ["m0"] and source.deleted == []
    assert locker.held == {} and dedupe.seen == set()
    snap = stats.snapshot()
    assert (snap.succeeded, snap.errored, snap.failed, snap.busy) == (0, 0, 0, 0)


def test_a_second_signal_stops_running_jobs_at_once() -> None:
    source = FakeSource([{"command": "x"}])
    runner = GateRunner()
    kicker, _ = make_kicker(source, runner)  # no shutdown_timeout: would wait for ever
    stop, force = threading.Event(), threading.Event()
    thread = threading.Thread(target=kicker.run, args=(stop, force), daemon=True)
    thread.start()
    wait_until(lambda: runner.running)
    stop.set()
    thread.join(0.3)
    assert thread.is_alive()
    force.set()
    thread.join(10)
    assert not thread.is_alive()
    assert source.released == ["m0"]


def test_jobs_waiting_for_a_lock_give_their_messages_back_at_stop() -> None:
    locker = MemoryLocker()
    locker.try_lock("L", "other-host")
    dedupe = MemoryDedupe()
    source = FakeSource([{"command": "x", "lock_id": "L"}])
    runner = GateRunner()
    settings = KickerSettings(queue=IntakeSettings(max_workers=2), lock_retry_interval=60)
    kicker, _ = make_kicker(source, runner, locker=locker, dedupe=dedupe, settings=settings)
    running = Running(kicker)
    wait_until(lambda: dedupe.seen == {"m0"}, what="claimed, waiting for the lock")
    running.finish()  # does not sit out the 60 s retry interval
    assert runner.ran == [] and source.released == ["m0"]
    assert dedupe.seen == set()


def test_the_job_timeout_defaults_to_job_timeout_and_a_timed_out_job_counts_twice() -> None:
    source = FakeSource([{"command": "x", "timeout": "2s"}, {"command": "y"}])

    class TimingOut(GateRunner):
        def run(
            self, job: Job, *, timeout: float | None, stop: StopSwitch, context: Any = None
        ) -> RunResult:
            self.timeouts[job.message_id] = timeout
            return RunResult(-15, timeout or 0.0, stopped=StopReason.TIMED_OUT)

    runner = TimingOut()
    settings = KickerSettings(queue=IntakeSettings(max_workers=2), job_timeout=30)
    kicker, stats = make_kicker(source, runner, settings=settings)
    run_until(kicker, lambda: stats.snapshot().timed_out == 2)
    assert runner.timeouts == {"m0": 2.0, "m1": 30}
    assert stats.snapshot().errored == 2
    wait_until(lambda: sorted(source.deleted) == ["m0", "m1"], what="finished jobs deleted")


def test_deletes_of_several_receives_share_one_batch() -> None:
    source = FakeSource([{"command": "x"} for _ in range(4)])
    runner = GateRunner()
    runner.open()
    # One worker: four receives of one message each, and a window no test run reaches.
    settings = KickerSettings(queue=IntakeSettings(max_workers=1, delete_window=3600))
    kicker, _ = make_kicker(source, runner, workers=1, settings=settings)
    running = Running(kicker)
    wait_until(lambda: len(runner.ran) == 4)
    # Flushed once the queue runs dry, before the next receive may long-poll.
    wait_until(lambda: source.delete_calls == 1)
    running.finish()
    assert (source.delete_calls, sorted(source.deleted)) == (1, ["m0", "m1", "m2", "m3"])


def test_pending_deletes_send_whole_batches_when_full_and_the_rest_once_the_window_passes() -> None:
    source = FakeSource()
    messages = [Message(f"m{i}", f"rh{i}", "{}", 0.0) for i in range(11)]
    batch = PendingDeletes(source, window=3600)
    batch.add(messages[:9])
    batch.flush()
    assert source.delete_calls == 0
    batch.add(messages[9:])
    batch.flush()
    # A full batch goes; the one behind it waits for the next rather than a call of its own.
    assert (source.delete_calls, len(source.deleted)) == (1, 10)
    batch.flush()
    assert source.delete_calls == 1
    batch.flush(force=True)
    assert (source.delete_calls, source.deleted[-1]) == (2, "m10")
    late = PendingDeletes(source, window=0)
    late.add(messages[:1])
    late.flush()
    assert source.delete_calls == 3


def test_after_a_full_receive_the_loop_gathers_free_workers_before_receiving_again() -> None:
    source = FakeSource([{"command": "x", "event_id": str(i)} for i in range(6)])
    gates = {str(i): threading.Event() for i in range(6)}

    class PerJobRunner:
        ran: list[str] = []

        def run(
            self, job: Job, *, timeout: float | None, stop: StopSwitch, context: Any = None
        ) -> RunResult:
            gates[job.event_id].wait(10)
            self.ran.append(job.event_id)
            return RunResult(0, 0.0)

    runner = PerJobRunner()
    settings = KickerSettings(queue=IntakeSettings(max_workers=3, gather_window=30))
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

    def try_lock(self, lock_id: str, event_id: str) -> Lease | Held:
        if self.errors:
            raise self.errors.pop(0)
        return super().try_lock(lock_id, event_id)


def test_a_transient_lock_error_is_retried() -> None:
    locker = FlakyLocker(EndpointConnectionError(endpoint_url="http://127.0.0.1:1"))
    source = FakeSource([{"command": "x", "lock_id": "L"}])
    runner = GateRunner()
    runner.open()
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
    dedupe = MemoryDedupe()
    source = FakeSource([{"command": "x", "lock_id": "L", "abort_if_locked": abort_if_locked}])
    runner = GateRunner()
    kicker, stats = make_kicker(source, runner, locker=locker, dedupe=dedupe)
    run_until(kicker, lambda: stats.snapshot().failed == 1)
    assert runner.ran == []
    assert len(locker.errors) == 2  # tried once, not again
    assert 'failed: could not take lock "L"' in caplog.text
    # Left to reappear and be tried again, its claim given up so that it can run then.
    assert source.deleted == [] and source.visibility == []
    assert dedupe.running == {}


def test_a_redelivered_message_is_logged_with_its_receive_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="sqsjkr.daemon")
    source = FakeSource()
    source.queued.append(Message("m9", "rh", '{"command": "x"}', 1000.0, receive_count=3))
    runner = GateRunner()
    runner.open()
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
    runner.open()
    kicker, _ = make_kicker(source, runner)
    run_until(kicker, lambda: runner.ran == ["m0"], timeout=20)
    assert "receive failed (KeyError: 'MessageId')" in caplog.text


def test_a_message_given_back_is_not_hidden_again_by_a_late_heartbeat() -> None:
    source = FakeSource([{"command": "x"}])
    runner = GateRunner()
    # Beats every 10 ms, so that one is likely under way as the job gives its message back.
    settings = KickerSettings(
        queue=IntakeSettings(max_workers=2, visibility=2), lease=0.03, shutdown_timeout=0.2
    )
    kicker, _ = make_kicker(source, runner, settings=settings)
    running = Running(kicker)
    wait_until(lambda: ("m0", 2) in source.visibility, what="heartbeat hiding the message")
    running.finish()
    assert source.visibility[-1] == ("m0", 0)


def test_a_runner_that_raises_gives_the_claim_up_and_leaves_the_message() -> None:
    class Broken(GateRunner):
        def run(
            self, job: Job, *, timeout: float | None, stop: StopSwitch, context: Any = None
        ) -> RunResult:
            raise RuntimeError("can't start new thread")

    dedupe, locker = MemoryDedupe(), MemoryLocker()
    source = FakeSource([{"command": "x", "lock_id": "L"}])
    kicker, stats = make_kicker(source, Broken(), dedupe=dedupe, locker=locker)
    run_until(kicker, lambda: stats.snapshot().failed == 1)
    assert dedupe.seen == set() and locker.held == {}
    assert source.deleted == [] and source.visibility == []  # reappears, to run again


def test_a_hanging_life_time_trigger_is_stopped_by_the_shutdown() -> None:
    source = FakeSource([{"command": "x", "life_time": 1}], sent_at=1000.0)
    reasons: list[StopReason | None] = []

    def trigger(command: str, job: Job, stop: StopSwitch) -> RunResult:
        reasons.append(stop.wait(10))  # an alert endpoint that never answers
        return RunResult(-15, 0.0, stopped=reasons[-1])

    settings = KickerSettings(
        queue=IntakeSettings(max_workers=2), life_time_trigger="alert", shutdown_timeout=0.1
    )
    kicker, _ = make_kicker(
        source, GateRunner(), clock=lambda: 2000.0, trigger=trigger, settings=settings
    )
    run_until(kicker, lambda: len(source.asked) > 1)
    assert reasons == [StopReason.CANCELLED]


def test_an_unlock_that_fails_on_an_outage_is_retried_until_the_store_answers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Outage(MemoryLocker):
        def __init__(self) -> None:
            super().__init__()
            self.failures = 2

        def unlock(self, lease: Lease) -> bool:
            if self.failures:
                self.failures -= 1
                raise EndpointConnectionError(endpoint_url="http://127.0.0.1:1")
            return super().unlock(lease)

    locker = Outage()
    source = FakeSource([{"command": "x", "lock_id": "L"}])
    runner = GateRunner()
    runner.open()
    kicker, stats = make_kicker(source, runner, locker=locker)
    run_until(kicker, lambda: stats.snapshot().succeeded == 1, timeout=20)
    assert locker.held == {} and locker.failures == 0
    assert 'job m0 could not release its lock "L" (EndpointConnectionError' in caplog.text
    assert "retrying in" in caplog.text
